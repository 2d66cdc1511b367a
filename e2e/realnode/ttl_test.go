package realnode

import (
	"context"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	jobsetclient "sigs.k8s.io/jobset/client-go/clientset/versioned"

	"github.com/trainyard/trainyard/e2e/cluster"
	"github.com/trainyard/trainyard/e2e/training"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
)

// TestTTLDeletesACompletedTrainJob (issue 40, KEP-2899): a TrainJob with
// ttlSecondsAfterFinished 5 that trains to Complete on the real node carries its
// startTime and completionTime, and is deleted about 5 s after Complete, its JobSet
// and pods with it (docs/compatibility.md#ttl-and-run-policy). The lateness bound
// tolerates a loaded 2-core machine; the figure is logged.
func TestTTLDeletesACompletedTrainJob(t *testing.T) {
	e := newEnv(t)
	tj, err := training.DigitsTrainJob(e.repo, e.ns, "ttl", training.DigitsOptions{Nodes: 1, Epochs: 1})
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 5
	tj.Spec.TTLSecondsAfterFinished = ptr.To[int32](ttl)
	e.create(t, tj)
	got := e.waitComplete(t, tj.Name)
	complete := meta.FindStatusCondition(got.Status.Conditions, trainer.TrainJobComplete)
	if st := got.Status; st.StartTime == nil || st.CompletionTime == nil || !st.CompletionTime.Equal(&complete.LastTransitionTime) {
		t.Errorf("startTime %v completionTime %v; want both, completionTime = Complete's time %v", st.StartTime, st.CompletionTime, complete.LastTransitionTime)
	}

	var deletedAt time.Time
	cluster.Eventually(t, time.Minute, "TrainJob ttl deleted", func(ctx context.Context) (bool, string) {
		got, err := e.get(ctx, tj.Name)
		switch {
		case apierrors.IsNotFound(err):
			deletedAt = time.Now()
			return true, ""
		case err != nil:
			return false, err.Error()
		case got.DeletionTimestamp != nil:
			deletedAt = got.DeletionTimestamp.Time
			return true, ""
		}
		return false, "still there"
	})
	expiry := complete.LastTransitionTime.Add(ttl * time.Second)
	late := deletedAt.Sub(expiry)
	t.Logf("deleted %v after its TTL expired (Complete at %v)", late.Round(10*time.Millisecond), complete.LastTransitionTime)
	// Complete's time has whole seconds: the deletion may come up to a second early.
	if late < -time.Second || late > 15*time.Second {
		t.Errorf("deleted %v after the expiry; want within [-1 s, 15 s]", late)
	}
	jobsets, err := jobsetclient.NewForConfig(e.c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	cluster.Eventually(t, time.Minute, "JobSet ttl deleted by garbage collection", func(ctx context.Context) (bool, string) {
		_, err := jobsets.JobsetV1alpha2().JobSets(e.ns).Get(ctx, tj.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	e.waitNoPods(t, tj.Name, 90*time.Second)
}
