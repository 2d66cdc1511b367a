package mlpolicy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/objectkeys"
	"github.com/trainyard/trainyard/pkg/stages/mergepatches"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/stages/plan/plantest"
)

// buildPlan is build returning the whole plan: the JobSet and the side objects.
func buildPlan(t *testing.T, tj *trainer.TrainJob, rt plan.Runtime) (*plan.Plan, error) {
	t.Helper()
	js, err := mergepatches.Merge(tj, rt)
	if err != nil {
		t.Fatalf("Merge: %v", err)
	}
	p := &plan.Plan{Runtime: rt, JobSet: js}
	return p, Apply(tj, p, DefaultPlugins(SecretNames{}))
}

func mustBuildPlan(t *testing.T, tj *trainer.TrainJob, rt plan.Runtime) *plan.Plan {
	t.Helper()
	p, err := buildPlan(t, tj, rt)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	return p
}

func mpiPolicy(impl trainer.MPIImplementation, mountPath string, launcherAsNode bool) *trainer.MLPolicy {
	return &trainer.MLPolicy{NumNodes: ptr.To[int32](1), MLPolicySource: trainer.MLPolicySource{MPI: &trainer.MPIMLPolicySource{
		NumProcPerNode:    ptr.To[int32](1),
		MPIImplementation: ptr.To(impl),
		SSHAuthMountPath:  ptr.To(mountPath),
		RunLauncherAsNode: ptr.To(launcherAsNode),
	}}}
}

// case5Runtime is the runtime of docs/compatibility.md#upstream-test-cases Case 5: the
// skeleton with a "launcher" replicatedJob (no ancestor, container "node" running
// mpirun) inserted before "node".
func case5Runtime(policy *trainer.MLPolicy) plan.Runtime {
	rt := plantest.SkeletonRuntime(policy)
	launcher := rt.Spec.Template.Spec.ReplicatedJobs[2].DeepCopy()
	launcher.Name = trainer.ReplicatedJobLauncher
	launcher.Template.Labels = nil
	launcher.Template.Spec.Template.Spec.Containers[0].Command = []string{"mpirun"}
	launcher.Template.Spec.Template.Spec.Containers[0].Args = []string{"echo.sh"}
	jobs := rt.Spec.Template.Spec.ReplicatedJobs
	rt.Spec.Template.Spec.ReplicatedJobs = append(jobs[:2:2], *launcher, jobs[2])
	return rt
}

var wantSSHVolume = corev1.Volume{Name: "mpi-ssh-auth", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
	SecretName:  "test-job-mpi-ssh-auth" + testSecretSuffix,
	DefaultMode: ptr.To[int32](256),
	Items: []corev1.KeyToPath{
		{Key: "ssh-privatekey", Path: "id_rsa", Mode: ptr.To[int32](416)},
		{Key: "ssh-publickey", Path: "id_rsa.pub", Mode: ptr.To[int32](420)},
		{Key: "ssh-publickey", Path: "authorized_keys", Mode: ptr.To[int32](420)},
	},
}}}

var wantHostfileVolume = corev1.Volume{Name: "mpi-hostfile", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
	LocalObjectReference: corev1.LocalObjectReference{Name: "test-job-mpi-hostfile"},
	Items:                []corev1.KeyToPath{{Key: "hostfile", Path: "hostfile", Mode: ptr.To[int32](292)}},
}}}

func ompiEnv(slots string) []corev1.EnvVar {
	return []corev1.EnvVar{
		env("OMPI_MCA_orte_default_hostfile", "/etc/mpi/hostfile"),
		env("OMPI_MCA_orte_keep_fqdn_hostnames", "true"),
		env("OMPI_MCA_orte_set_default_slots", slots),
		env("OMPI_MCA_plm_rsh_args", "-o ConnectionAttempts=10"),
	}
}

func podOf(t *testing.T, js *jobsetv1alpha2.JobSet, rj string) *corev1.PodSpec {
	t.Helper()
	r := plan.ReplicatedJob(js, rj)
	if r == nil {
		t.Fatalf("no replicatedJob %q", rj)
	}
	return plan.PodSpec(r)
}

func containerOf(t *testing.T, js *jobsetv1alpha2.JobSet, rj string) *corev1.Container {
	t.Helper()
	c := plan.Container(podOf(t, js, rj).Containers, trainer.ContainerNode)
	if c == nil {
		t.Fatalf("replicatedJob %q has no node container", rj)
	}
	return c
}

// hostfileOf returns the hostfile ConfigMap's content, checking the ConfigMap's identity.
func hostfileOf(t *testing.T, p *plan.Plan) string {
	t.Helper()
	if len(p.Objects) != 1 {
		t.Fatalf("plan objects = %d, want the hostfile ConfigMap only", len(p.Objects))
	}
	cm := p.Objects[0]
	checkOwnedObject(t, cm, "v1", "ConfigMap", "test-job-mpi-hostfile")
	data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	if len(data) != 1 {
		t.Errorf("ConfigMap data keys = %v, want [hostfile]", data)
	}
	return data["hostfile"]
}

func checkOwnedObject(t *testing.T, obj *unstructured.Unstructured, apiVersion, kind, name string) {
	t.Helper()
	if obj.GetAPIVersion() != apiVersion || obj.GetKind() != kind || obj.GetName() != name || obj.GetNamespace() != plantest.TrainJobNamespace {
		t.Errorf("object %s %s %s/%s, want %s %s %s/%s", obj.GetAPIVersion(), obj.GetKind(), obj.GetNamespace(), obj.GetName(),
			apiVersion, kind, plantest.TrainJobNamespace, name)
	}
	refs := obj.GetOwnerReferences()
	if len(refs) != 1 || refs[0].UID != plantest.TrainJobUID || refs[0].Kind != "TrainJob" ||
		refs[0].APIVersion != "trainer.kubeflow.org/v1alpha1" || !ptr.Deref(refs[0].Controller, false) || !ptr.Deref(refs[0].BlockOwnerDeletion, false) {
		t.Errorf("%s ownerReferences = %+v, want the TrainJob as controller", kind, refs)
	}
	// The label the controller's side-object informers select on.
	if got := obj.GetLabels()[objectkeys.LabelTrainJobName]; len(refs) == 1 && got != refs[0].Name {
		t.Errorf("%s label %s = %q, want the TrainJob's name %q", kind, objectkeys.LabelTrainJobName, got, refs[0].Name)
	}
}

// sshSecretOf returns the create-only Secret, generated, checking its fixed fields.
func sshSecretOf(t *testing.T, p *plan.Plan) *unstructured.Unstructured {
	t.Helper()
	if len(p.CreateOnly) != 1 {
		t.Fatalf("plan create-only objects = %d, want the SSH Secret only", len(p.CreateOnly))
	}
	o := p.CreateOnly[0]
	checkOwnedObject(t, o.Object, "v1", "Secret", "test-job-mpi-ssh-auth"+testSecretSuffix)
	if _, ok := o.Object.Object["data"]; ok {
		t.Error("the planned Secret holds data; the key must be generated only at creation")
	}
	if got := o.Object.Object["type"]; got != "kubernetes.io/ssh-auth" {
		t.Errorf("Secret type = %v, want kubernetes.io/ssh-auth", got)
	}
	if got := o.Object.Object["immutable"]; got != true {
		t.Errorf("Secret immutable = %v, want true", got)
	}
	secret := o.Object.DeepCopy()
	if err := o.Generate(secret); err != nil {
		t.Fatalf("Generate: %v", err)
	}
	return secret
}

// checkSSHKeys checks that the Secret holds a P-521 key pair OpenSSH can use: the
// private key a PEM "EC PRIVATE KEY", the public key its authorized_keys line.
func checkSSHKeys(t *testing.T, secret *unstructured.Unstructured) (privatePEM string) {
	t.Helper()
	data, _, _ := unstructured.NestedStringMap(secret.Object, "data")
	if len(data) != 2 {
		t.Errorf("Secret data keys = %d, want ssh-privatekey and ssh-publickey", len(data))
	}
	priv, err := base64.StdEncoding.DecodeString(data["ssh-privatekey"])
	if err != nil {
		t.Fatalf("ssh-privatekey: %v", err)
	}
	pub, err := base64.StdEncoding.DecodeString(data["ssh-publickey"])
	if err != nil {
		t.Fatalf("ssh-publickey: %v", err)
	}
	block, rest := pem.Decode(priv)
	if block == nil || block.Type != "EC PRIVATE KEY" || len(rest) != 0 {
		t.Fatalf("ssh-privatekey is not one PEM EC PRIVATE KEY block: %q", priv)
	}
	key, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		t.Fatalf("ssh-privatekey: %v", err)
	}
	if key.Curve != elliptic.P521() {
		t.Errorf("key curve = %s, want P-521", key.Curve.Params().Name)
	}
	signer, err := ssh.ParsePrivateKey(priv)
	if err != nil {
		t.Fatalf("OpenSSH cannot read ssh-privatekey: %v", err)
	}
	authorized, _, _, rest2, err := ssh.ParseAuthorizedKey(pub)
	if err != nil || len(rest2) != 0 {
		t.Fatalf("ssh-publickey is not one authorized_keys line: %q (%v)", pub, err)
	}
	if !strings.HasPrefix(string(pub), "ecdsa-sha2-nistp521 AAAA") || !strings.HasSuffix(string(pub), "\n") {
		t.Errorf("ssh-publickey = %q, want \"ecdsa-sha2-nistp521 AAAA...\\n\"", pub)
	}
	if string(authorized.Marshal()) != string(signer.PublicKey().Marshal()) {
		t.Error("ssh-publickey is not the public half of ssh-privatekey")
	}
	if !key.PublicKey.Equal(&ecdsa.PublicKey{Curve: key.Curve, X: key.X, Y: key.Y}) {
		t.Error("inconsistent key")
	}
	return string(priv)
}

// Case 5 of docs/compatibility.md#upstream-test-cases: OpenMPI, launcher before node,
// runLauncherAsNode false.
func TestMPICase5(t *testing.T) {
	rt := case5Runtime(mpiPolicy(trainer.MPIImplementationOpenMPI, "/root/.ssh", false))
	tj := plantest.TrainJob(rt.Name, &trainer.Trainer{NumNodes: ptr.To[int32](2), NumProcPerNode: ptr.To[int32](8)})
	p := mustBuildPlan(t, tj, rt)
	js := p.JobSet

	checkSSHKeys(t, sshSecretOf(t, p))
	if got, want := hostfileOf(t, p), "test-job-node-0-0.test-job slots=8\ntest-job-node-0-1.test-job slots=8\n"; got != want {
		t.Errorf("hostfile = %q, want %q", got, want)
	}
	if diff := cmp.Diff(map[string]int32{"dataset-initializer": 1, "model-initializer": 1, "launcher": 1, "node": 2}, counts(t, js)); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}

	initializer := rt.Spec.Template.Spec.ReplicatedJobs[3].Template.Spec.Template.Spec.Volumes[0]
	if diff := cmp.Diff([]corev1.Volume{initializer, wantSSHVolume, wantHostfileVolume}, podOf(t, js, "launcher").Volumes); diff != "" {
		t.Errorf("launcher volumes (-want +got):\n%s", diff)
	}
	launcher := containerOf(t, js, "launcher")
	wantMounts := []corev1.VolumeMount{
		{Name: "initializer", MountPath: "/workspace/dataset"}, {Name: "initializer", MountPath: "/workspace/model"},
		{Name: "mpi-ssh-auth", MountPath: "/root/.ssh"}, {Name: "mpi-hostfile", MountPath: "/etc/mpi"},
	}
	if diff := cmp.Diff(wantMounts, launcher.VolumeMounts); diff != "" {
		t.Errorf("launcher mounts (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(ompiEnv("8"), launcher.Env); diff != "" {
		t.Errorf("launcher env (-want +got):\n%s", diff)
	}
	if launcher.Image != "test:runtime" || !cmp.Equal(launcher.Command, []string{"mpirun"}) || len(launcher.Ports) != 0 {
		t.Errorf("launcher image %q, command %v, ports %v: want the runtime's, no ports", launcher.Image, launcher.Command, launcher.Ports)
	}

	if diff := cmp.Diff([]corev1.Volume{initializer, wantSSHVolume}, podOf(t, js, "node").Volumes); diff != "" {
		t.Errorf("node volumes (-want +got):\n%s", diff)
	}
	node := containerOf(t, js, "node")
	if diff := cmp.Diff(append(wantMounts[:2:2], corev1.VolumeMount{Name: "mpi-ssh-auth", MountPath: "/root/.ssh"}), node.VolumeMounts); diff != "" {
		t.Errorf("node mounts (-want +got):\n%s", diff)
	}
	if len(node.Env) != 0 || len(node.Ports) != 0 {
		t.Errorf("node env %v, ports %v; MPI sets none on workers", node.Env, node.Ports)
	}
}

// The upstream MPI runtimes (docs/compatibility.md#shipped-runtimes): launcher after
// node, the launcher the trainer, runLauncherAsNode, slots 1, keys under
// /home/mpiuser/.ssh.
func TestMPIUpstreamRuntimes(t *testing.T) {
	for _, file := range []string{"runtimes/deepspeed_distributed.yaml", "runtimes/mlx_distributed.yaml"} {
		rt := plantest.UpstreamRuntimeFile(t, file)
		cases := map[string]struct {
			trainer      *trainer.Trainer
			wantNodes    int32
			wantSlots    string
			wantHostfile []string
		}{
			"numNodes 4": {
				trainer:   &trainer.Trainer{NumNodes: ptr.To[int32](4)},
				wantNodes: 3, wantSlots: "1",
				wantHostfile: []string{"test-job-node-0-0.test-job slots=1", "test-job-node-0-1.test-job slots=1",
					"test-job-node-0-2.test-job slots=1", "test-job-launcher-0-0.test-job slots=1"},
			},
			"no spec.trainer: one node and the launcher": {
				wantNodes: 1, wantSlots: "1",
				wantHostfile: []string{"test-job-node-0-0.test-job slots=1", "test-job-launcher-0-0.test-job slots=1"},
			},
			"numNodes 1 keeps one node (max(numNodes-1, 1))": {
				trainer:   &trainer.Trainer{NumNodes: ptr.To[int32](1)},
				wantNodes: 1, wantSlots: "1",
				wantHostfile: []string{"test-job-node-0-0.test-job slots=1", "test-job-launcher-0-0.test-job slots=1"},
			},
			"4 GPUs per node: slots 4": {
				trainer: &trainer.Trainer{NumNodes: ptr.To[int32](2),
					ResourcesPerNode: &corev1.ResourceRequirements{Limits: quantities("nvidia.com/gpu", "4")}},
				wantNodes: 1, wantSlots: "4",
				wantHostfile: []string{"test-job-node-0-0.test-job slots=4", "test-job-launcher-0-0.test-job slots=4"},
			},
			"numProcPerNode wins over GPUs": {
				trainer: &trainer.Trainer{NumNodes: ptr.To[int32](2), NumProcPerNode: ptr.To[int32](2),
					ResourcesPerNode: &corev1.ResourceRequirements{Limits: quantities("nvidia.com/gpu", "4")}},
				wantNodes: 1, wantSlots: "2",
				wantHostfile: []string{"test-job-node-0-0.test-job slots=2", "test-job-launcher-0-0.test-job slots=2"},
			},
		}
		for name, tc := range cases {
			t.Run(file+"/"+name, func(t *testing.T) {
				tj := plantest.TrainJob(rt.Name, tc.trainer)
				p := mustBuildPlan(t, tj, rt)
				js := p.JobSet
				checkSSHKeys(t, sshSecretOf(t, p))
				if got, want := hostfileOf(t, p), strings.Join(tc.wantHostfile, "\n")+"\n"; got != want {
					t.Errorf("hostfile = %q, want %q", got, want)
				}
				if diff := cmp.Diff(map[string]int32{"node": tc.wantNodes, "launcher": 1}, counts(t, js)); diff != "" {
					t.Errorf("counts (-want +got):\n%s", diff)
				}
				// The runtime's ordering and success rules pass through unchanged.
				wantDependsOn := []jobsetv1alpha2.DependsOn{{Name: "node", Status: jobsetv1alpha2.DependencyReady}}
				if diff := cmp.Diff(wantDependsOn, plan.ReplicatedJob(js, "launcher").DependsOn); diff != "" {
					t.Errorf("launcher dependsOn (-want +got):\n%s", diff)
				}
				if sp := js.Spec.SuccessPolicy; sp == nil || !cmp.Equal(sp.TargetReplicatedJobs, []string{"launcher"}) {
					t.Errorf("successPolicy = %+v, want targetReplicatedJobs [launcher]", sp)
				}

				mount := corev1.VolumeMount{Name: "mpi-ssh-auth", MountPath: "/home/mpiuser/.ssh"}
				if diff := cmp.Diff([]corev1.Volume{wantSSHVolume, wantHostfileVolume}, podOf(t, js, "launcher").Volumes); diff != "" {
					t.Errorf("launcher volumes (-want +got):\n%s", diff)
				}
				launcher := containerOf(t, js, "launcher")
				if diff := cmp.Diff([]corev1.VolumeMount{mount, {Name: "mpi-hostfile", MountPath: "/etc/mpi"}}, launcher.VolumeMounts); diff != "" {
					t.Errorf("launcher mounts (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(ompiEnv(tc.wantSlots), launcher.Env); diff != "" {
					t.Errorf("launcher env (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff([]corev1.Volume{wantSSHVolume}, podOf(t, js, "node").Volumes); diff != "" {
					t.Errorf("node volumes (-want +got):\n%s", diff)
				}
				node := containerOf(t, js, "node")
				if diff := cmp.Diff([]corev1.VolumeMount{mount}, node.VolumeMounts); diff != "" {
					t.Errorf("node mounts (-want +got):\n%s", diff)
				}
				if len(node.Env) != 0 || !cmp.Equal(node.Command, []string{"/usr/sbin/sshd"}) {
					t.Errorf("node env %v, command %v: want no env and the runtime's sshd", node.Env, node.Command)
				}
			})
		}
	}
}

// The launcher is also a node (runLauncherAsNode) and comes first: the plugin-level
// variant of docs/compatibility.md#upstream-test-cases Case 5.
func TestMPILauncherAsNodeFirst(t *testing.T) {
	rt := case5Runtime(mpiPolicy(trainer.MPIImplementationOpenMPI, "/root/.ssh", true))
	p := mustBuildPlan(t, plantest.TrainJob(rt.Name, &trainer.Trainer{NumNodes: ptr.To[int32](10)}), rt)
	want := []string{"test-job-launcher-0-0.test-job slots=1"}
	for i := range 9 {
		want = append(want, "test-job-node-0-"+string(rune('0'+i))+".test-job slots=1")
	}
	if got := hostfileOf(t, p); got != strings.Join(want, "\n")+"\n" {
		t.Errorf("hostfile = %q, want %q", got, strings.Join(want, "\n")+"\n")
	}
	if n := counts(t, p.JobSet)["node"]; n != 9 {
		t.Errorf("node count = %d, want 9", n)
	}
}

// Hostfile lines and launcher env per mpiImplementation; a network subdomain and
// replicas are honoured.
func TestMPIImplementations(t *testing.T) {
	cases := map[string]struct {
		impl         trainer.MPIImplementation
		wantHostfile string
		wantEnv      []corev1.EnvVar
	}{
		"OpenMPI": {impl: trainer.MPIImplementationOpenMPI,
			wantHostfile: "test-job-node-0-0.net slots=3\ntest-job-node-0-1.net slots=3\ntest-job-node-1-0.net slots=3\ntest-job-node-1-1.net slots=3\n",
			wantEnv:      ompiEnv("3")},
		"empty is OpenMPI": {impl: "",
			wantHostfile: "test-job-node-0-0.net slots=3\ntest-job-node-0-1.net slots=3\ntest-job-node-1-0.net slots=3\ntest-job-node-1-1.net slots=3\n",
			wantEnv:      ompiEnv("3")},
		"Intel": {impl: trainer.MPIImplementationIntel,
			wantHostfile: "test-job-node-0-0.net:3\ntest-job-node-0-1.net:3\ntest-job-node-1-0.net:3\ntest-job-node-1-1.net:3\n",
			wantEnv: []corev1.EnvVar{
				env("I_MPI_HYDRA_HOST_FILE", "/etc/mpi/hostfile"),
				env("I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS", "-o ConnectionAttempts=10"),
				env("I_MPI_PERHOST", "3"),
			}},
		"MPICH": {impl: trainer.MPIImplementationMPICH,
			wantHostfile: "test-job-node-0-0.net:3\ntest-job-node-0-1.net:3\ntest-job-node-1-0.net:3\ntest-job-node-1-1.net:3\n",
			wantEnv: []corev1.EnvVar{
				env("HYDRA_HOST_FILE", "/etc/mpi/hostfile"),
				env("HYDRA_LAUNCH_EXTRA_ARGS", "-o ConnectionAttempts=10"),
			}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rt := case5Runtime(mpiPolicy(tc.impl, "/root/.ssh", false))
			rt.Spec.Template.Spec.Network = &jobsetv1alpha2.Network{Subdomain: "net"}
			node := &rt.Spec.Template.Spec.ReplicatedJobs[3]
			node.Template.Labels = nil // two replicas: the node job must not be an ancestor
			node.Replicas = 2
			tj := plantest.TrainJob(rt.Name, &trainer.Trainer{NumNodes: ptr.To[int32](2), NumProcPerNode: ptr.To[int32](3)})
			p := mustBuildPlan(t, tj, rt)
			if got := hostfileOf(t, p); got != tc.wantHostfile {
				t.Errorf("hostfile = %q, want %q", got, tc.wantHostfile)
			}
			if diff := cmp.Diff(tc.wantEnv, containerOf(t, p.JobSet, "launcher").Env); diff != "" {
				t.Errorf("launcher env (-want +got):\n%s", diff)
			}
		})
	}
}

// A rebuild plans the same objects: the key is generated only at creation, so the
// desired state's hash does not change; each creation gets a fresh key.
func TestMPIRebuildIsStable(t *testing.T) {
	rt := plantest.UpstreamRuntimeFile(t, "runtimes/deepspeed_distributed.yaml")
	tj := plantest.TrainJob(rt.Name, &trainer.Trainer{NumNodes: ptr.To[int32](3)})
	first, second := mustBuildPlan(t, tj, rt), mustBuildPlan(t, tj, rt)
	if diff := cmp.Diff(first.JobSet, second.JobSet); diff != "" {
		t.Errorf("JobSet differs between builds (-first +second):\n%s", diff)
	}
	if diff := cmp.Diff(first.Objects, second.Objects); diff != "" {
		t.Errorf("objects differ between builds (-first +second):\n%s", diff)
	}
	if diff := cmp.Diff(first.CreateOnly[0].Object, second.CreateOnly[0].Object); diff != "" {
		t.Errorf("create-only objects differ between builds (-first +second):\n%s", diff)
	}
	key1 := checkSSHKeys(t, sshSecretOf(t, first))
	key2 := checkSSHKeys(t, sshSecretOf(t, first))
	if key1 == key2 {
		t.Error("two creations generated the same key")
	}
	copied := first.DeepCopy()
	if diff := cmp.Diff(first.CreateOnly[0].Object, copied.CreateOnly[0].Object); diff != "" || copied.CreateOnly[0].Generate == nil {
		t.Errorf("Plan.DeepCopy lost the create-only object (-orig +copy):\n%s", diff)
	}
}

// Inputs MPI cannot run fail with an error naming the field and the fix, before
// anything is planned.
func TestMPIInvalidInput(t *testing.T) {
	withoutJob := func(rt plan.Runtime, name string) plan.Runtime {
		var kept []jobsetv1alpha2.ReplicatedJob
		for _, rj := range rt.Spec.Template.Spec.ReplicatedJobs {
			if rj.Name != name {
				kept = append(kept, rj)
			}
		}
		rt.Spec.Template.Spec.ReplicatedJobs = kept
		return rt
	}
	cases := map[string]struct {
		runtime    plan.Runtime
		trainer    *trainer.Trainer
		wantObject string
		wantField  string
		wantInMsg  string
	}{
		"no launcher": {
			runtime:    withoutJob(case5Runtime(mpiPolicy(trainer.MPIImplementationOpenMPI, "/root/.ssh", false)), "launcher"),
			wantObject: "TrainingRuntime/test-runtime", wantField: "spec.template.spec.replicatedJobs",
			wantInMsg: `needs a replicatedJob named "launcher"`,
		},
		"launcher as the only node, numNodes 2": {
			runtime:   withoutJob(case5Runtime(mpiPolicy(trainer.MPIImplementationOpenMPI, "/root/.ssh", true)), "node"),
			trainer:   &trainer.Trainer{NumNodes: ptr.To[int32](2)},
			wantField: "spec.trainer.numNodes", wantInMsg: "must be 1",
		},
		"no node and the launcher is not a node": {
			runtime:    withoutJob(case5Runtime(mpiPolicy(trainer.MPIImplementationOpenMPI, "/root/.ssh", false)), "node"),
			wantObject: "TrainingRuntime/test-runtime", wantField: "spec.template.spec.replicatedJobs",
			wantInMsg: "set mlPolicy.mpi.runLauncherAsNode to true",
		},
		"reserved OMPI env": {
			runtime: case5Runtime(mpiPolicy(trainer.MPIImplementationOpenMPI, "/root/.ssh", false)),
			trainer: &trainer.Trainer{Env: []corev1.EnvVar{
				env("OMPI_MCA_plm_rsh_args", "x"), env("FOO", "bar"), env("OMPI_MCA_orte_default_hostfile", "y"),
			}},
			wantField: "spec.trainer.env", wantInMsg: "OMPI_MCA_orte_default_hostfile, OMPI_MCA_plm_rsh_args",
		},
		"reserved Intel env": {
			runtime:   case5Runtime(mpiPolicy(trainer.MPIImplementationIntel, "/root/.ssh", false)),
			trainer:   &trainer.Trainer{Env: []corev1.EnvVar{env("I_MPI_PERHOST", "2")}},
			wantField: "spec.trainer.env", wantInMsg: "I_MPI_PERHOST",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p, err := buildPlan(t, plantest.TrainJob(tc.runtime.Name, tc.trainer), tc.runtime)
			var invalid *plan.InvalidInputError
			if !errors.As(err, &invalid) {
				t.Fatalf("Apply() = %v, want *plan.InvalidInputError", err)
			}
			if invalid.Object != tc.wantObject || invalid.Field != tc.wantField || !strings.Contains(invalid.Message, tc.wantInMsg) {
				t.Errorf("error = {%q %q %q}, want object %q, field %q, message containing %q",
					invalid.Object, invalid.Field, invalid.Message, tc.wantObject, tc.wantField, tc.wantInMsg)
			}
			if len(p.Objects) != 0 || len(p.CreateOnly) != 0 {
				t.Errorf("planned %d objects and %d create-only objects; want none", len(p.Objects), len(p.CreateOnly))
			}
		})
	}

	t.Run("launcher as the only node, numNodes 1 is fine", func(t *testing.T) {
		rt := withoutJob(case5Runtime(mpiPolicy(trainer.MPIImplementationOpenMPI, "/root/.ssh", true)), "node")
		p := mustBuildPlan(t, plantest.TrainJob(rt.Name, &trainer.Trainer{NumNodes: ptr.To[int32](1)}), rt)
		if got := hostfileOf(t, p); got != "test-job-launcher-0-0.test-job slots=1\n" {
			t.Errorf("hostfile = %q, want the launcher only", got)
		}
	})
	t.Run("unknown implementation", func(t *testing.T) {
		rt := case5Runtime(mpiPolicy("OpenMPI5", "/root/.ssh", false))
		_, err := buildPlan(t, plantest.TrainJob(rt.Name, nil), rt)
		var unsupported *plan.UnsupportedError
		if !errors.As(err, &unsupported) || !strings.Contains(err.Error(), `mpiImplementation "OpenMPI5"`) {
			t.Errorf("Apply() = %v, want *plan.UnsupportedError naming the implementation", err)
		}
	})
}

// JAX and XGBoost start a fixed number of processes per node; a numProcPerNode they
// would silently ignore is rejected (see docs/compatibility.md), 1 is accepted.
func TestNumProcPerNodeForbidden(t *testing.T) {
	for _, file := range []string{"runtimes/jax_distributed.yaml", "runtimes/xgboost_distributed.yaml"} {
		rt := plantest.UpstreamRuntimeFile(t, file)
		t.Run(file, func(t *testing.T) {
			_, err := build(t, plantest.TrainJob(rt.Name, &trainer.Trainer{NumProcPerNode: ptr.To[int32](4)}), rt)
			var invalid *plan.InvalidInputError
			if !errors.As(err, &invalid) || invalid.Field != "spec.trainer.numProcPerNode" ||
				!strings.Contains(invalid.Message, "remove spec.trainer.numProcPerNode") {
				t.Errorf("Apply() = %#v, want *plan.InvalidInputError at spec.trainer.numProcPerNode saying how to fix it", err)
			}
			mustBuild(t, plantest.TrainJob(rt.Name, &trainer.Trainer{NumProcPerNode: ptr.To[int32](1)}), rt)
		})
	}
}

// A hostfile that would not fit in its ConfigMap is refused before it is built (found
// while building FuzzMLPolicy): spec.trainer.numNodes up to 2^31-1, times the runtime's
// replicas, made the plugin build a hostfile of up to ~100 GB and the controller run out
// of memory for every TrainJob. The largest hostfile that fits is still built.
func TestMPIHostfileTooLarge(t *testing.T) {
	for name, tc := range map[string]struct {
		numNodes int32
		// launcherReplicas are the runtime's replicas of "launcher", a host with
		// runLauncherAsNode (the trainer's replicas are always 1).
		launcherReplicas int32
		wantErr          bool
	}{
		"20,000 hosts fit":                    {numNodes: 20_000, launcherReplicas: 1},
		"numNodes 2^31-1":                     {numNodes: 1<<31 - 1, launcherReplicas: 1, wantErr: true},
		"40,000 hosts":                        {numNodes: 40_000, launcherReplicas: 1, wantErr: true},
		"launcher replicas 2^31-1":            {numNodes: 1, launcherReplicas: 1<<31 - 1, wantErr: true},
		"both 2^31-1, no overflow":            {numNodes: 1<<31 - 1, launcherReplicas: 1<<31 - 1, wantErr: true},
		"launcher replicas and numNodes fit":  {numNodes: 10_000, launcherReplicas: 10_000},
		"launcher replicas and numNodes over": {numNodes: 20_000, launcherReplicas: 20_000, wantErr: true},
	} {
		t.Run(name, func(t *testing.T) {
			rt := case5Runtime(mpiPolicy(trainer.MPIImplementationOpenMPI, "/root/.ssh", true))
			rt.Spec.Template.Spec.ReplicatedJobs[2].Replicas = tc.launcherReplicas
			tj := plantest.TrainJob(rt.Name, &trainer.Trainer{NumNodes: ptr.To(tc.numNodes)})
			p, err := buildPlan(t, tj, rt)
			if !tc.wantErr {
				if err != nil {
					t.Fatalf("Apply: %v", err)
				}
				if got := len(hostfileOf(t, p)); got > corev1.MaxSecretSize {
					t.Fatalf("hostfile of %d bytes, over a ConfigMap's %d", got, corev1.MaxSecretSize)
				}
				return
			}
			var invalid *plan.InvalidInputError
			if !errors.As(err, &invalid) || invalid.Field != "spec.trainer.numNodes" || !strings.Contains(invalid.Message, "bytes a ConfigMap holds") {
				t.Fatalf("Apply: %v, want an InvalidInputError at spec.trainer.numNodes about the ConfigMap's size", err)
			}
		})
	}
}

// SetMPISlots (the DRA stage's GPUs per host) refuses slots whose digits would push a
// hostfile that fits past its ConfigMap's size.
func TestSetMPISlotsHostfileTooLarge(t *testing.T) {
	rt := case5Runtime(mpiPolicy(trainer.MPIImplementationOpenMPI, "/root/.ssh", false))
	tj := plantest.TrainJob(rt.Name, &trainer.Trainer{NumNodes: ptr.To[int32](26_000)})
	p := mustBuildPlan(t, tj, rt) // 26,000 lines of 39 bytes at most
	if err := SetMPISlots(tj, p, 8); err != nil {
		t.Fatalf("SetMPISlots(8): %v", err)
	}
	before := hostfileOf(t, p)
	var invalid *plan.InvalidInputError
	if err := SetMPISlots(tj, p, 1_000_000); !errors.As(err, &invalid) || invalid.Field != "spec.trainer.numNodes" {
		t.Fatalf("SetMPISlots(1000000): %v, want an InvalidInputError at spec.trainer.numNodes", err)
	}
	if hostfileOf(t, p) != before {
		t.Error("the refused SetMPISlots changed the hostfile")
	}
}
