package trainjob

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard/trainyard/e2e/cluster"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/objectkeys"
)

// createMPIRuntime creates a TrainingRuntime shaped like upstream's
// deepspeed-distributed (docs/compatibility.md#shipped-runtimes): an sshd "node"
// replicatedJob with a readiness probe, and the trainer "launcher" that dependsOn node
// Ready and decides success. Workers run for nodeRuns, the launcher for launcherRuns
// (kwok delays).
func (e *env) createMPIRuntime(t *testing.T, name string, nodeRuns, launcherRuns time.Duration, mutate func(*trainer.TrainingRuntime)) {
	t.Helper()
	pod := func(runs time.Duration, c corev1.Container) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{cluster.AnnotationCompleteDelay: runs.String()}},
			Spec: corev1.PodSpec{
				SecurityContext: &corev1.PodSecurityContext{FSGroup: ptr.To[int64](1000)},
				Containers:      []corev1.Container{c},
			},
		}
	}
	worker := corev1.Container{
		Name: trainer.ContainerNode, Image: "ghcr.io/kubeflow/trainer/deepspeed-runtime",
		Command: []string{"/usr/sbin/sshd"}, Args: []string{"-De", "-f", "/home/mpiuser/.sshd_config"},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(2222)}}},
	}
	launcher := corev1.Container{Name: trainer.ContainerNode, Image: "ghcr.io/kubeflow/trainer/deepspeed-runtime"}
	rt := &trainer.TrainingRuntime{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: trainer.TrainingRuntimeSpec{
			MLPolicy: &trainer.MLPolicy{NumNodes: ptr.To[int32](1), MLPolicySource: trainer.MLPolicySource{MPI: &trainer.MPIMLPolicySource{
				NumProcPerNode:    ptr.To[int32](1),
				MPIImplementation: ptr.To(trainer.MPIImplementationOpenMPI),
				SSHAuthMountPath:  ptr.To("/home/mpiuser/.ssh"),
				RunLauncherAsNode: ptr.To(true),
			}}},
			Template: trainer.JobSetTemplateSpec{Spec: jobsetv1alpha2.JobSetSpec{
				Network:       &jobsetv1alpha2.Network{PublishNotReadyAddresses: ptr.To(true)},
				SuccessPolicy: &jobsetv1alpha2.SuccessPolicy{Operator: jobsetv1alpha2.OperatorAll, TargetReplicatedJobs: []string{"launcher"}},
				ReplicatedJobs: []jobsetv1alpha2.ReplicatedJob{
					{Name: "node", Template: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{
						BackoffLimit: ptr.To[int32](0), Template: pod(nodeRuns, worker)}}},
					{Name: "launcher",
						DependsOn: []jobsetv1alpha2.DependsOn{{Name: "node", Status: jobsetv1alpha2.DependencyReady}},
						Template: batchv1.JobTemplateSpec{
							ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{trainer.LabelTrainJobAncestor: trainer.AncestorTrainer}},
							Spec:       batchv1.JobSpec{BackoffLimit: ptr.To[int32](0), Template: pod(launcherRuns, launcher)},
						}},
				},
			}},
		},
	}
	if mutate != nil {
		mutate(rt)
	}
	if _, err := e.trainers.TrainerV1alpha1().TrainingRuntimes(e.ns).Create(context.Background(), rt, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating TrainingRuntime %s: %v", name, err)
	}
}

// podsOf returns the pods of one replicatedJob of a JobSet.
func (e *env) podsOf(ctx context.Context, jobSet, replicatedJob string) ([]corev1.Pod, error) {
	pods, err := e.c.Client().CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: fmt.Sprintf("%s=%s,%s=%s",
		jobsetv1alpha2.JobSetNameKey, jobSet, jobsetv1alpha2.ReplicatedJobNameKey, replicatedJob)})
	if err != nil {
		return nil, err
	}
	return pods.Items, nil
}

func podReady(p *corev1.Pod) (bool, time.Time) {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return true, c.LastTransitionTime.Time
		}
	}
	return false, time.Time{}
}

// TestMPITrainJobRunsToComplete: an MPI TrainJob on a deepspeed-like runtime gets its
// SSH auth Secret and hostfile ConfigMap, owned by the TrainJob and mounted in the
// launcher and worker pods. The Secret is written once: neither a controller restart
// (which rebuilds the plan) nor the resume (which re-applies the JobSet) changes it.
// The launcher starts only once every worker is Ready (the runtime's dependsOn), and
// the TrainJob reaches Complete.
func TestMPITrainJobRunsToComplete(t *testing.T) {
	e := newEnv(t)
	// The restart below counts the controller's writes for all TrainJobs: let earlier
	// tests' namespaces finish terminating so this TrainJob is the only one.
	e.waitAloneInCluster(t)
	ctrl := startController(t, e.c, noAdmission) // counts the pipeline's writes only

	e.createMPIRuntime(t, "deepspeed", time.Minute, 5*time.Second, nil)
	e.createTrainJob(t, trainJob("mpi", trainer.TrainingRuntimeKind, "deepspeed").withNumNodes(3).suspended())
	ctx := context.Background()

	// Suspended: the JobSet and its side objects exist, no pod does.
	js := e.waitJobSet(t, "mpi")
	sshSecret := sshSecretOf(js) // mpi-mpi-ssh-auth-<suffix> (mlpolicy.SecretNames)
	if !strings.HasPrefix(sshSecret, "mpi-mpi-ssh-auth-") {
		t.Fatalf("the pods mount SSH Secret %q, want mpi-mpi-ssh-auth-<suffix>", sshSecret)
	}
	secret, err := e.c.Client().CoreV1().Secrets(e.ns).Get(ctx, sshSecret, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("SSH auth Secret: %v", err)
	}
	if secret.Type != corev1.SecretTypeSSHAuth || !ptr.Deref(secret.Immutable, false) ||
		!strings.Contains(string(secret.Data["ssh-privatekey"]), "BEGIN EC PRIVATE KEY") ||
		!strings.HasPrefix(string(secret.Data["ssh-publickey"]), "ecdsa-sha2-nistp521 ") {
		t.Errorf("Secret: type %s, immutable %v, keys %d; want an immutable ssh-auth Secret with a P-521 key pair",
			secret.Type, ptr.Deref(secret.Immutable, false), len(secret.Data))
	}
	hostfile, err := e.c.Client().CoreV1().ConfigMaps(e.ns).Get(ctx, "mpi-mpi-hostfile", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("hostfile ConfigMap: %v", err)
	}
	wantHostfile := "mpi-node-0-0.mpi slots=1\nmpi-node-0-1.mpi slots=1\nmpi-launcher-0-0.mpi slots=1\n"
	if got := hostfile.Data["hostfile"]; got != wantHostfile {
		t.Errorf("hostfile = %q, want %q", got, wantHostfile)
	}
	for _, obj := range []metav1.Object{secret, hostfile} {
		if ref := metav1.GetControllerOf(obj); ref == nil || ref.Kind != "TrainJob" || ref.Name != "mpi" {
			t.Errorf("%s controller reference = %+v, want TrainJob mpi", obj.GetName(), ref)
		}
	}

	// A restart rebuilds the plan but finds it applied: no JobSet apply and no create,
	// only status patches if the JobSet's status moved on meanwhile.
	e.waitCondition(t, "mpi", trainer.TrainJobSuspended, metav1.ConditionTrue, time.Minute)
	statusChanges := e.countStatusChanges(t, "mpi") // counts the current status once
	ctrl.stop(t)
	restarted := startController(t, e.c, noAdmission)
	time.Sleep(3 * time.Second)
	if w := restarted.writes(t); w["POST"] != 0 || w["PUT"] != 0 || w["DELETE"] != 0 || w["PATCH"] > statusChanges()-1 {
		t.Errorf("a restarted controller with nothing to do wrote %v; want no writes but status patches (%d status changes)", w, statusChanges()-1)
	}

	// Resume: the JobSet is applied again, the Secret is left as it is.
	patch := []byte(`{"spec":{"suspend":false}}`)
	if _, err := e.trainers.TrainerV1alpha1().TrainJobs(e.ns).Patch(ctx, "mpi", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	cluster.Eventually(t, time.Minute, "JobSet resumed", func(ctx context.Context) (bool, string) {
		got, err := e.jobsets.JobsetV1alpha2().JobSets(e.ns).Get(ctx, "mpi", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return !ptr.Deref(got.Spec.Suspend, true), fmt.Sprintf("suspend %v", got.Spec.Suspend)
	})
	again, err := e.c.Client().CoreV1().Secrets(e.ns).Get(ctx, secret.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if again.ResourceVersion != secret.ResourceVersion || string(again.Data["ssh-publickey"]) != string(secret.Data["ssh-publickey"]) {
		t.Error("the SSH auth Secret changed when the JobSet was re-applied")
	}
	if now := e.waitJobSet(t, "mpi"); now.Annotations["trainyard.dev/jobset-hash"] == js.Annotations["trainyard.dev/jobset-hash"] {
		t.Error("the resumed JobSet carries the suspended one's hash: it was not re-applied")
	}

	// Until the launcher exists, check that no launcher Job appears while a worker is
	// not Ready yet.
	var launcherJob *batchv1.Job
	cluster.Eventually(t, 2*time.Minute, "the launcher Job, created after the workers are Ready", func(ctx context.Context) (bool, string) {
		workers, err := e.podsOf(ctx, "mpi", "node")
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		for i := range workers {
			if ok, _ := podReady(&workers[i]); ok {
				ready++
			}
		}
		job, err := e.c.Client().BatchV1().Jobs(e.ns).Get(ctx, "mpi-launcher-0", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, fmt.Sprintf("no launcher Job yet; %d of %d worker pods Ready", ready, len(workers))
		}
		if err != nil {
			return false, err.Error()
		}
		if ready < 2 {
			t.Fatalf("launcher Job exists while only %d of 2 worker pods are Ready", ready)
		}
		launcherJob = job
		return true, ""
	})
	workers, err := e.podsOf(ctx, "mpi", "node")
	if err != nil {
		t.Fatal(err)
	}
	if len(workers) != 2 {
		t.Fatalf("%d worker pods, want 2 (numNodes 3, the launcher is the third node)", len(workers))
	}
	for i := range workers {
		// Second granularity: equal is fine, earlier is not.
		if ok, at := podReady(&workers[i]); !ok || launcherJob.CreationTimestamp.Time.Before(at.Truncate(time.Second)) {
			t.Errorf("launcher Job created %s, before worker %s was Ready (%v at %s)", launcherJob.CreationTimestamp, workers[i].Name, ok, at)
		}
	}

	// Mounted where the runtime says, in the real pods.
	var launchers []corev1.Pod
	cluster.Eventually(t, time.Minute, "the launcher pod", func(ctx context.Context) (bool, string) {
		launchers, err = e.podsOf(ctx, "mpi", "launcher")
		if err != nil {
			return false, err.Error()
		}
		return len(launchers) == 1, fmt.Sprintf("%d launcher pods", len(launchers))
	})
	checkMounts := func(pod *corev1.Pod, want map[string]string) {
		t.Helper()
		volumes := map[string]string{}
		for _, v := range pod.Spec.Volumes {
			switch {
			case v.Secret != nil:
				volumes[v.Name] = v.Secret.SecretName
			case v.ConfigMap != nil:
				volumes[v.Name] = v.ConfigMap.Name
			}
		}
		mounts := map[string]string{}
		for _, m := range pod.Spec.Containers[0].VolumeMounts {
			mounts[m.MountPath] = volumes[m.Name]
		}
		for path, source := range want {
			if mounts[path] != source {
				t.Errorf("pod %s mounts %q at %s, want %q (mounts %v)", pod.Name, mounts[path], path, source, pod.Spec.Containers[0].VolumeMounts)
			}
		}
	}
	for i := range workers {
		checkMounts(&workers[i], map[string]string{"/home/mpiuser/.ssh": sshSecret})
	}
	checkMounts(&launchers[0], map[string]string{"/home/mpiuser/.ssh": sshSecret, "/etc/mpi": "mpi-mpi-hostfile"})
	env := map[string]string{}
	for _, v := range launchers[0].Spec.Containers[0].Env {
		env[v.Name] = v.Value
	}
	if env["OMPI_MCA_orte_default_hostfile"] != "/etc/mpi/hostfile" || env["OMPI_MCA_orte_set_default_slots"] != "1" {
		t.Errorf("launcher env %v, want the OMPI_MCA_* variables", env)
	}

	complete := e.waitCondition(t, "mpi", trainer.TrainJobComplete, metav1.ConditionTrue, 2*time.Minute)
	if complete.Reason != "AllJobsCompleted" {
		t.Errorf("Complete reason = %q, want the JobSet's AllJobsCompleted", complete.Reason)
	}
}

// TestMPIRuntimeWithoutLauncher: an MPI runtime without a launcher gets a condition
// naming the field and the fix, and nothing is created: no JobSet, ConfigMap or Secret.
func TestMPIRuntimeWithoutLauncher(t *testing.T) {
	e := newEnv(t)
	// Admission refuses such a runtime, and TrainJobs of it (TestAdmission); without
	// admission (turned off, or objects created before it was on) the controller must
	// still explain the TrainJob's wait.
	startController(t, e.c, noAdmission)
	e.createMPIRuntime(t, "no-launcher", time.Second, time.Second, func(rt *trainer.TrainingRuntime) {
		jobs := rt.Spec.Template.Spec.ReplicatedJobs
		jobs[0].Template.Labels = jobs[1].Template.Labels // the workers become the trainer
		rt.Spec.Template.Spec.ReplicatedJobs = jobs[:1]
		rt.Spec.Template.Spec.SuccessPolicy = nil
	})
	e.createTrainJob(t, trainJob("headless", trainer.TrainingRuntimeKind, "no-launcher"))

	cond := e.waitCondition(t, "headless", "JobSetReady", metav1.ConditionFalse, time.Minute)
	if !strings.Contains(cond.Message, "spec.template.spec.replicatedJobs") || !strings.Contains(cond.Message, `"launcher"`) {
		t.Errorf("JobSetReady = %s/%q, want a message naming the replicatedJobs field and the launcher", cond.Reason, cond.Message)
	}
	ctx := context.Background()
	if _, err := e.jobsets.JobsetV1alpha2().JobSets(e.ns).Get(ctx, "headless", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("JobSet: %v, want NotFound", err)
	}
	if list, err := e.c.Client().CoreV1().Secrets(e.ns).List(ctx, metav1.ListOptions{LabelSelector: objectkeys.LabelTrainJobName + "=headless"}); err != nil || len(list.Items) != 0 {
		t.Errorf("Secrets of the TrainJob: %v, %v; want none", list, err)
	}
	if _, err := e.c.Client().CoreV1().ConfigMaps(e.ns).Get(ctx, "headless-mpi-hostfile", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("ConfigMap: %v, want NotFound", err)
	}
}
