package trainjob

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/trainyard/trainyard/e2e/cluster"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/trainjob"
)

// TestSideObjectsAreOursAndRepaired (issue 15): a side object counts as the TrainJob's
// only when the TrainJob controls it, and one deleted under a running TrainJob comes
// back.
//
//   - Someone creates the MPI SSH Secret <name>-mpi-ssh-auth before the TrainJob, with a
//     key they hold: the TrainJob gets JobSetReady=False, reason SideObjectConflict,
//     naming the Secret, its lack of a controller and the fix; no JobSet is created
//     (its pods would mount that key).
//   - The squatter deletes it: the TrainJob proceeds by itself (within the conflict
//     recheck period, the Secret being unlabelled and so unwatched) with a Secret of
//     its own — a fresh key, the TrainJob as controller, the side-object label.
//   - Someone deletes the hostfile ConfigMap of the running TrainJob: it is re-created
//     with the same hostfile; then the SSH Secret: re-created with a new key. The
//     running JobSet is not written.
func TestSideObjectsAreOursAndRepaired(t *testing.T) {
	e := newEnv(t)
	startController(t, e.c, noAdmission)
	e.createMPIRuntime(t, "deepspeed", 10*time.Minute, 10*time.Minute, nil)
	ctx := context.Background()
	secrets, configMaps := e.c.Client().CoreV1().Secrets(e.ns), e.c.Client().CoreV1().ConfigMaps(e.ns)

	squatter, err := secrets.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "squat-mpi-ssh-auth"},
		Type:       corev1.SecretTypeSSHAuth,
		Data:       map[string][]byte{corev1.SSHAuthPrivateKey: []byte("the squatter's key"), "ssh-publickey": []byte("the squatter's key")},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tj := e.createTrainJob(t, trainJob("squat", trainer.TrainingRuntimeKind, "deepspeed").withNumNodes(2))
	cond := e.waitCondition(t, "squat", trainjob.ConditionJobSetReady, metav1.ConditionFalse, time.Minute)
	if cond.Reason != trainjob.ReasonSideObjectConflict {
		t.Errorf("JobSetReady reason %q, want %s (message %q)", cond.Reason, trainjob.ReasonSideObjectConflict, cond.Message)
	}
	for _, want := range []string{`Secret "squat-mpi-ssh-auth"`, "has no controller", "delete or rename"} {
		if !strings.Contains(cond.Message, want) {
			t.Errorf("JobSetReady message %q does not say %q", cond.Message, want)
		}
	}
	t.Logf("squatted: JobSetReady=False %s: %s", cond.Reason, cond.Message)
	// Give a wrong controller time to go ahead anyway.
	time.Sleep(3 * time.Second)
	if _, err := e.jobsets.JobsetV1alpha2().JobSets(e.ns).Get(ctx, "squat", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("JobSet of a TrainJob whose Secret is squatted: err = %v, want NotFound", err)
	}
	if _, err := configMaps.Get(ctx, "squat-mpi-hostfile", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("hostfile ConfigMap of a TrainJob whose Secret is squatted: err = %v, want NotFound (nothing is written before the conflict is gone)", err)
	}

	// The squatter gives the name up.
	deleted := time.Now()
	if err := secrets.Delete(ctx, squatter.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	js := e.waitJobSet(t, "squat")
	t.Logf("JobSet created %s after the squatter's Secret was deleted", time.Since(deleted).Round(time.Second))
	ownSecret := e.waitSideObject(t, "Secret", "squat-mpi-ssh-auth", tj.UID, squatter.UID, func(ctx context.Context) (metav1.Object, error) {
		return secrets.Get(ctx, "squat-mpi-ssh-auth", metav1.GetOptions{})
	}).(*corev1.Secret)
	if string(ownSecret.Data["ssh-publickey"]) == "the squatter's key" || !strings.HasPrefix(string(ownSecret.Data["ssh-publickey"]), "ecdsa-sha2-nistp521 ") {
		t.Errorf("the TrainJob's Secret holds public key %q, want a fresh P-521 key", ownSecret.Data["ssh-publickey"])
	}
	e.waitCondition(t, "squat", trainjob.ConditionJobSetReady, metav1.ConditionTrue, time.Minute)
	if ptr.Deref(js.Spec.Suspend, false) {
		t.Fatal("the JobSet is suspended; the test needs it running")
	}

	// Someone deletes the running TrainJob's hostfile ConfigMap: it comes back, same hostfile.
	hostfile, err := configMaps.Get(ctx, "squat-mpi-hostfile", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	deleted = time.Now()
	if err := configMaps.Delete(ctx, hostfile.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	again := e.waitSideObject(t, "ConfigMap", hostfile.Name, tj.UID, hostfile.UID, func(ctx context.Context) (metav1.Object, error) {
		return configMaps.Get(ctx, hostfile.Name, metav1.GetOptions{})
	}).(*corev1.ConfigMap)
	t.Logf("hostfile ConfigMap re-created %s after its deletion", time.Since(deleted).Round(time.Millisecond))
	if again.Data["hostfile"] != hostfile.Data["hostfile"] {
		t.Errorf("re-created hostfile %q, want the deleted one's %q", again.Data["hostfile"], hostfile.Data["hostfile"])
	}

	// And the SSH Secret: re-created with a new key (the old one is not known to the
	// controller, which never reads Secret data).
	if err := secrets.Delete(ctx, ownSecret.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	renewed := e.waitSideObject(t, "Secret", ownSecret.Name, tj.UID, ownSecret.UID, func(ctx context.Context) (metav1.Object, error) {
		return secrets.Get(ctx, ownSecret.Name, metav1.GetOptions{})
	}).(*corev1.Secret)
	if string(renewed.Data["ssh-publickey"]) == string(ownSecret.Data["ssh-publickey"]) {
		t.Error("the re-created Secret holds the deleted one's key, want a new one")
	}

	now, err := e.jobsets.JobsetV1alpha2().JobSets(e.ns).Get(ctx, "squat", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if now.Generation != js.Generation || now.Annotations["trainyard.dev/jobset-hash"] != js.Annotations["trainyard.dev/jobset-hash"] {
		t.Errorf("the running JobSet changed (generation %d → %d): repairing side objects must not write it", js.Generation, now.Generation)
	}
}

// waitSideObject waits until get returns an object other than the one with uid old,
// controlled by the TrainJob of uid owner and labelled as its side object, and
// returns it.
func (e *env) waitSideObject(t *testing.T, kind, name string, owner, old types.UID, get func(context.Context) (metav1.Object, error)) metav1.Object {
	t.Helper()
	var found metav1.Object
	cluster.Eventually(t, time.Minute, fmt.Sprintf("%s %s of the TrainJob", kind, name), func(ctx context.Context) (bool, string) {
		obj, err := get(ctx)
		if err != nil {
			return false, err.Error()
		}
		if obj.GetUID() == old {
			return false, "the old one (uid " + string(old) + ")"
		}
		ref := metav1.GetControllerOf(obj)
		if ref == nil || ref.UID != owner {
			return false, fmt.Sprintf("controller %+v", ref)
		}
		if obj.GetLabels()[plan.LabelTrainJobName] == "" {
			return false, fmt.Sprintf("labels %v", obj.GetLabels())
		}
		found = obj
		return true, ""
	})
	return found
}
