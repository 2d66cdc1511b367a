package trainjob

import (
	"context"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/trainyard/trainyard/e2e/cluster"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
)

// TestLifecycle covers KEP-2899 as kubeflow/trainer #4052 lists it
// (docs/compatibility.md#ttl-and-run-policy) with one controller, each case in its own
// namespace and in parallel: a TTL deletes the finished TrainJob with its JobSet; a
// runtime's runPolicy deadline stops a TrainJob that sets none; a TrainJob's own
// values override the runtime's. TestLifecycleRestart is the restart.
func TestLifecycle(t *testing.T) {
	startController(t, cluster.Shared(t))
	t.Run("TTLDeletes", func(t *testing.T) { t.Parallel(); testTTLDeletes(t) })
	t.Run("RuntimeDeadline", func(t *testing.T) { t.Parallel(); testRuntimeDeadline(t) })
	t.Run("TrainJobOverrides", func(t *testing.T) { t.Parallel(); testTrainJobOverrides(t) })
}

// testTTLDeletes: a TrainJob with ttlSecondsAfterFinished 3 gets its times and
// Complete, and is deleted about 3 s after Complete's time, its JobSet with it. The
// lateness bound tolerates a loaded 2-core machine; the figure is logged.
func testTTLDeletes(t *testing.T) {
	e := newEnv(t)
	e.createRuntime(t, "quick", nil) // pods succeed after 3 s
	tj := trainJob("ttl", trainer.TrainingRuntimeKind, "quick")
	tj.Spec.TTLSecondsAfterFinished = ptr.To[int32](3)
	e.createTrainJob(t, tj)
	e.waitJobSet(t, "ttl")
	complete := e.waitCondition(t, "ttl", trainer.TrainJobComplete, metav1.ConditionTrue, 2*time.Minute)

	got, err := e.trainers.TrainerV1alpha1().TrainJobs(e.ns).Get(context.Background(), "ttl", metav1.GetOptions{})
	if err == nil {
		st := got.Status
		if st.StartTime == nil || st.CompletionTime == nil || !st.CompletionTime.Equal(&complete.LastTransitionTime) || st.StartTime.After(st.CompletionTime.Time) {
			t.Errorf("startTime %v completionTime %v; want both, completionTime = Complete's time %v", st.StartTime, st.CompletionTime, complete.LastTransitionTime)
		}
	} else if !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}

	expiry := complete.LastTransitionTime.Add(3 * time.Second)
	var deletedAt time.Time
	cluster.Eventually(t, time.Minute, "TrainJob ttl deleted", func(ctx context.Context) (bool, string) {
		got, err := e.trainers.TrainerV1alpha1().TrainJobs(e.ns).Get(ctx, "ttl", metav1.GetOptions{})
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
	// Complete's time has whole seconds: the deletion may come up to a second early.
	late := deletedAt.Sub(expiry)
	t.Logf("TrainJob deleted %v after its TTL expired (Complete at %v)", late, complete.LastTransitionTime)
	if late < -time.Second || late > 20*time.Second {
		t.Errorf("deleted %v after the expiry; want within [-1 s, 20 s]", late)
	}
	cluster.Eventually(t, time.Minute, "JobSet ttl deleted by garbage collection", func(ctx context.Context) (bool, string) {
		_, err := e.jobsets.JobsetV1alpha2().JobSets(e.ns).Get(ctx, "ttl", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

// testRuntimeDeadline: a runtime's runPolicy.activeDeadlineSeconds fails a TrainJob
// that sets no deadline, and its runPolicy.ttlSecondsAfterFinished then deletes it.
func testRuntimeDeadline(t *testing.T) {
	e := newEnv(t)
	e.createRuntimeWith(t, "bounded", map[string]string{cluster.AnnotationCompleteDelay: "120s"}, func(rt *trainer.TrainingRuntime) {
		rt.Spec.RunPolicy = &trainer.RunPolicy{ActiveDeadlineSeconds: ptr.To[int64](3), TTLSecondsAfterFinished: ptr.To[int32](2)}
	})
	e.createTrainJob(t, trainJob("bounded", trainer.TrainingRuntimeKind, "bounded"))
	failed := e.waitCondition(t, "bounded", trainer.TrainJobFailed, metav1.ConditionTrue, time.Minute)
	if failed.Reason != trainer.TrainJobDeadlineExceededReason {
		t.Errorf("Failed reason %q, want %s", failed.Reason, trainer.TrainJobDeadlineExceededReason)
	}
	cluster.Eventually(t, time.Minute, "TrainJob bounded deleted by the runtime's TTL", func(ctx context.Context) (bool, string) {
		_, err := e.trainers.TrainerV1alpha1().TrainJobs(e.ns).Get(ctx, "bounded", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

// testTrainJobOverrides: a TrainJob's own activeDeadlineSeconds and
// ttlSecondsAfterFinished win over its runtime's: it outlives the runtime's 2 s
// deadline and completes, and is kept past the runtime's TTL of 1 s.
func testTrainJobOverrides(t *testing.T) {
	e := newEnv(t)
	e.createRuntimeWith(t, "strict", map[string]string{cluster.AnnotationCompleteDelay: "6s"}, func(rt *trainer.TrainingRuntime) {
		rt.Spec.RunPolicy = &trainer.RunPolicy{ActiveDeadlineSeconds: ptr.To[int64](2), TTLSecondsAfterFinished: ptr.To[int32](1)}
	})
	tj := trainJob("own", trainer.TrainingRuntimeKind, "strict")
	tj.Spec.ActiveDeadlineSeconds = ptr.To[int64](600)
	tj.Spec.TTLSecondsAfterFinished = ptr.To[int32](3600)
	e.createTrainJob(t, tj)
	e.waitCondition(t, "own", trainer.TrainJobComplete, metav1.ConditionTrue, 2*time.Minute)
	cluster.Consistently(t, 5*time.Second, "TrainJob own kept and not failed", func(ctx context.Context) (bool, string) {
		got, err := e.trainers.TrainerV1alpha1().TrainJobs(e.ns).Get(ctx, "own", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range got.Status.Conditions {
			if c.Type == trainer.TrainJobFailed && c.Status == metav1.ConditionTrue {
				return false, "Failed: " + c.Reason
			}
		}
		return got.DeletionTimestamp == nil, "being deleted"
	})
}

// TestLifecycleRestart: times are stable across a controller restart (a resync of
// every TrainJob), and a TrainJob whose TTL expired while the controller was down is
// deleted at once when it is back.
func TestLifecycleRestart(t *testing.T) {
	e := newEnv(t)
	ctrl := startController(t, e.c)
	e.createRuntime(t, "quick", nil)
	tj := trainJob("expires", trainer.TrainingRuntimeKind, "quick")
	tj.Spec.TTLSecondsAfterFinished = ptr.To[int32](8)
	e.createTrainJob(t, tj)
	kept := trainJob("kept", trainer.TrainingRuntimeKind, "quick")
	e.createTrainJob(t, kept)
	complete := e.waitCondition(t, "expires", trainer.TrainJobComplete, metav1.ConditionTrue, 2*time.Minute)
	e.waitCondition(t, "kept", trainer.TrainJobComplete, metav1.ConditionTrue, 2*time.Minute)
	before, err := e.trainers.TrainerV1alpha1().TrainJobs(e.ns).Get(context.Background(), "kept", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if before.Status.StartTime == nil || before.Status.CompletionTime == nil {
		t.Fatalf("kept: startTime %v completionTime %v, want both", before.Status.StartTime, before.Status.CompletionTime)
	}
	ctrl.stop(t)

	expiry := complete.LastTransitionTime.Add(8 * time.Second)
	if wait := time.Until(expiry.Add(2 * time.Second)); wait > 0 {
		time.Sleep(wait)
	}
	if _, err := e.trainers.TrainerV1alpha1().TrainJobs(e.ns).Get(context.Background(), "expires", metav1.GetOptions{}); err != nil {
		t.Fatalf("with the controller stopped the TrainJob should still exist: %v", err)
	}
	restarted := time.Now()
	startController(t, e.c)
	cluster.Eventually(t, time.Minute, "TrainJob expires deleted after the restart", func(ctx context.Context) (bool, string) {
		_, err := e.trainers.TrainerV1alpha1().TrainJobs(e.ns).Get(ctx, "expires", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	t.Logf("deleted %v after the controller started (its TTL expired %v before)", time.Since(restarted), restarted.Sub(expiry))

	after, err := e.trainers.TrainerV1alpha1().TrainJobs(e.ns).Get(context.Background(), "kept", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !after.Status.StartTime.Equal(before.Status.StartTime) || !after.Status.CompletionTime.Equal(before.Status.CompletionTime) {
		t.Errorf("times moved across the restart: start %v → %v, completion %v → %v",
			before.Status.StartTime, after.Status.StartTime, before.Status.CompletionTime, after.Status.CompletionTime)
	}
}
