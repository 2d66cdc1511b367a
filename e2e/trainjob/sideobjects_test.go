package trainjob

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard/trainyard/e2e/cluster"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/objectkeys"
	"github.com/trainyard/trainyard/pkg/trainjob"
)

// TestSideObjectsAreOursAndRepaired (issue 15): a side object counts as the TrainJob's
// only when the TrainJob controls it, and one deleted under a running TrainJob comes
// back. The controller cannot read Secrets at all.
//
//   - Someone creates a Secret under the SSH Secret's upstream name, <name>-mpi-ssh-auth,
//     before the TrainJob, with a key they hold: it is simply not used. The TrainJob
//     runs with its own Secret, <name>-mpi-ssh-auth-<suffix> (a name no one could know
//     in advance), a fresh key, the TrainJob as controller, the side-object label.
//   - Someone deletes the hostfile ConfigMap of the running TrainJob: it is re-created
//     with the same hostfile (its deletion is watched).
//   - Someone deletes the SSH Secret: nothing watches Secrets; the JobSet's next restart
//     (its new pods mount the Secret) has it re-created, with a new key. The running
//     JobSet is never written.
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
	js := e.waitJobSet(t, "squat")
	mounted := sshSecretOf(js)
	if mounted == squatter.Name || !strings.HasPrefix(mounted, "squat-mpi-ssh-auth-") {
		t.Fatalf("the JobSet's pods mount Secret %q, want squat-mpi-ssh-auth-<suffix>, not the squatter's", mounted)
	}
	t.Logf("the pods mount %s; %s is left alone", mounted, squatter.Name)
	ownSecret := e.waitSideObject(t, "Secret", mounted, tj.UID, "", func(ctx context.Context) (metav1.Object, error) {
		return secrets.Get(ctx, mounted, metav1.GetOptions{})
	}).(*corev1.Secret)
	if !strings.HasPrefix(string(ownSecret.Data["ssh-publickey"]), "ecdsa-sha2-nistp521 ") {
		t.Errorf("the TrainJob's Secret holds public key %q, want a fresh P-521 key", ownSecret.Data["ssh-publickey"])
	}
	if s, err := secrets.Get(ctx, squatter.Name, metav1.GetOptions{}); err != nil || s.UID != squatter.UID || s.ResourceVersion != squatter.ResourceVersion {
		t.Errorf("the squatter's Secret changed: %v, %v", s, err)
	}
	got, err := e.trainers.TrainerV1alpha1().TrainJobs(e.ns).Get(ctx, "squat", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, trainjob.ConditionJobSetReady); c != nil && c.Status == metav1.ConditionFalse {
		t.Errorf("JobSetReady=False %s: %s; want no conflict", c.Reason, c.Message)
	}
	if ptr.Deref(js.Spec.Suspend, false) {
		t.Fatal("the JobSet is suspended; the test needs it running")
	}

	// Someone deletes the running TrainJob's hostfile ConfigMap: it comes back, same hostfile.
	hostfile, err := configMaps.Get(ctx, "squat-mpi-hostfile", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
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

	// And the SSH Secret: back at the JobSet's next restart, as the JobSet controller
	// counts one in status.restarts when its failure policy recreates the Jobs, with a
	// new key (the controller never read the old one).
	if err := secrets.Delete(ctx, ownSecret.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	restarted, err := e.jobsets.JobsetV1alpha2().JobSets(e.ns).Get(ctx, "squat", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	restarted.Status.Restarts++
	if _, err := e.jobsets.JobsetV1alpha2().JobSets(e.ns).UpdateStatus(ctx, restarted, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	deleted = time.Now()
	renewed := e.waitSideObject(t, "Secret", ownSecret.Name, tj.UID, ownSecret.UID, func(ctx context.Context) (metav1.Object, error) {
		return secrets.Get(ctx, ownSecret.Name, metav1.GetOptions{})
	}).(*corev1.Secret)
	t.Logf("SSH Secret re-created %s after the JobSet's restart", time.Since(deleted).Round(time.Millisecond))
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

// sshSecretOf returns the name of the Secret js's pods mount as the MPI SSH key.
func sshSecretOf(js *jobsetv1alpha2.JobSet) string {
	for _, rj := range js.Spec.ReplicatedJobs {
		for _, v := range rj.Template.Spec.Template.Spec.Volumes {
			if v.Name == "mpi-ssh-auth" && v.Secret != nil {
				return v.Secret.SecretName
			}
		}
	}
	return ""
}

// waitSideObject waits until get returns an object other than the one with uid old
// ("" for none),
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
		if obj.GetLabels()[objectkeys.LabelTrainJobName] == "" {
			return false, fmt.Sprintf("labels %v", obj.GetLabels())
		}
		found = obj
		return true, ""
	})
	return found
}

// TestSquattedHostfileBlocksUntilRemoved (issue 15): a ConfigMap under the name of a
// TrainJob's hostfile, created first by someone else, is neither mounted nor
// overwritten. The TrainJob says why it waits (JobSetReady=False, SideObjectConflict,
// naming the ConfigMap and the fix) and gets no JobSet; once the squatter's ConfigMap
// is deleted, the TrainJob proceeds by itself with its own hostfile.
func TestSquattedHostfileBlocksUntilRemoved(t *testing.T) {
	e := newEnv(t)
	startController(t, e.c, noAdmission)
	e.createMPIRuntime(t, "deepspeed", 10*time.Minute, 10*time.Minute, nil)
	ctx := context.Background()
	configMaps := e.c.Client().CoreV1().ConfigMaps(e.ns)

	squatter, err := configMaps.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "held-mpi-hostfile"},
		Data:       map[string]string{"hostfile": "attacker.example slots=1\n"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tj := e.createTrainJob(t, trainJob("held", trainer.TrainingRuntimeKind, "deepspeed").withNumNodes(2))
	c := e.waitCondition(t, "held", trainjob.ConditionJobSetReady, metav1.ConditionFalse, time.Minute)
	if c.Reason != trainjob.ReasonSideObjectConflict || !strings.Contains(c.Message, `ConfigMap "held-mpi-hostfile"`) || !strings.Contains(c.Message, "delete or rename") {
		t.Fatalf("JobSetReady=False %s: %q; want %s naming ConfigMap \"held-mpi-hostfile\" and the fix", c.Reason, c.Message, trainjob.ReasonSideObjectConflict)
	}
	t.Logf("JobSetReady=False %s: %s", c.Reason, c.Message)
	cluster.Consistently(t, 5*time.Second, "no JobSet and the squatter's ConfigMap untouched while it is in the way", func(ctx context.Context) (bool, string) {
		if _, err := e.jobsets.JobsetV1alpha2().JobSets(e.ns).Get(ctx, "held", metav1.GetOptions{}); err == nil {
			return false, "a JobSet exists: its pods would mount the squatter's hostfile"
		}
		cm, err := configMaps.Get(ctx, squatter.Name, metav1.GetOptions{})
		if err != nil || cm.ResourceVersion != squatter.ResourceVersion {
			return false, fmt.Sprintf("the squatter's ConfigMap changed: %v", err)
		}
		return true, ""
	})

	if err := configMaps.Delete(ctx, squatter.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	own := e.waitSideObject(t, "ConfigMap", squatter.Name, tj.UID, squatter.UID, func(ctx context.Context) (metav1.Object, error) {
		return configMaps.Get(ctx, squatter.Name, metav1.GetOptions{})
	}).(*corev1.ConfigMap)
	e.waitJobSet(t, "held")
	t.Logf("the TrainJob's own hostfile and its JobSet %s after the squatter's ConfigMap was deleted", time.Since(deleted).Round(time.Millisecond))
	if strings.Contains(own.Data["hostfile"], "attacker.example") {
		t.Errorf("the TrainJob's hostfile %q holds the squatter's host", own.Data["hostfile"])
	}
	if c := e.waitCondition(t, "held", trainjob.ConditionJobSetReady, metav1.ConditionTrue, time.Minute); c.Reason == trainjob.ReasonSideObjectConflict {
		t.Errorf("JobSetReady=True still says %s", c.Reason)
	}
}
