package mlpolicy

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/mergepatches"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/stages/plan/plantest"
)

func testProgressURL(namespace, name string) string {
	return "https://trainyard-webhook.trainyard-system.svc:10443/apis/trainer.kubeflow.org/v1alpha1/namespaces/" + namespace + "/trainjobs/" + name + "/status"
}

// withTrainerStatus is DefaultPlugins followed by TrainerStatus, as stages.Plugins lists
// them with the progress server on.
func withTrainerStatus() []Plugin {
	return append(DefaultPlugins(SecretNames{}), TrainerStatus(testProgressURL))
}

// The env, mount and volume the plugin adds for TrainJob default/test-job.
var (
	wantProgressEnv = []corev1.EnvVar{
		env("KUBEFLOW_TRAINER_SERVER_URL", "https://trainyard-webhook.trainyard-system.svc:10443/apis/trainer.kubeflow.org/v1alpha1/namespaces/default/trainjobs/test-job/status"),
		env("KUBEFLOW_TRAINER_SERVER_CA_CERT", "/var/run/secrets/kubeflow/trainer/ca.crt"),
		env("KUBEFLOW_TRAINER_SERVER_TOKEN", "/var/run/secrets/kubeflow/trainer/token"),
	}
	wantProgressMount  = corev1.VolumeMount{Name: "kubeflow-trainer-token", MountPath: "/var/run/secrets/kubeflow/trainer", ReadOnly: true}
	wantProgressVolume = corev1.Volume{
		Name: "kubeflow-trainer-token",
		VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
				Audience:          "trainer.kubeflow.org/v1alpha1/namespaces/default/trainjobs/test-job/status",
				ExpirationSeconds: ptr.To[int64](3600),
				Path:              "token",
			}},
			{ConfigMap: &corev1.ConfigMapProjection{
				LocalObjectReference: corev1.LocalObjectReference{Name: "trainyard-status-server-ca"},
				Items:                []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}},
			}},
		}}},
	}
)

// buildWith runs Merge, then Apply with plugins.
func buildWith(t *testing.T, tj *trainer.TrainJob, rt plan.Runtime, plugins []Plugin) *plan.Plan {
	t.Helper()
	js, err := mergepatches.Merge(tj, rt)
	if err != nil {
		t.Fatalf("Merge: %v", err)
	}
	p := &plan.Plan{Runtime: rt, JobSet: js}
	if err := Apply(tj, p, plugins); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	return p
}

// envNamed returns the env var called name, or nil.
func envNamed(env []corev1.EnvVar, name string) *corev1.EnvVar {
	for i := range env {
		if env[i].Name == name {
			return &env[i]
		}
	}
	return nil
}

// checkInjected fails unless exactly the replicatedJob called injected (and no other)
// carries the progress env, mount and volume, each once, in every regular container;
// init containers never do.
func checkInjected(t *testing.T, js *jobsetv1alpha2.JobSet, injected string) {
	t.Helper()
	for i := range js.Spec.ReplicatedJobs {
		rj := &js.Spec.ReplicatedJobs[i]
		pod := plan.PodSpec(rj)
		want := rj.Name == injected
		for _, c := range pod.InitContainers {
			if envNamed(c.Env, "KUBEFLOW_TRAINER_SERVER_URL") != nil {
				t.Errorf("%s: init container %s got the progress env", rj.Name, c.Name)
			}
		}
		for _, c := range pod.Containers {
			for _, w := range wantProgressEnv {
				got := envNamed(c.Env, w.Name)
				switch {
				case !want && got != nil:
					t.Errorf("%s/%s: %s set, want it only in %s", rj.Name, c.Name, w.Name, injected)
				case want && (got == nil || *got != w):
					t.Errorf("%s/%s: %s = %+v, want %+v", rj.Name, c.Name, w.Name, got, w)
				}
			}
			mounts := 0
			for _, m := range c.VolumeMounts {
				if m.MountPath == wantProgressMount.MountPath {
					mounts++
					if m != wantProgressMount {
						t.Errorf("%s/%s: mount %+v, want %+v", rj.Name, c.Name, m, wantProgressMount)
					}
				}
			}
			if want && mounts != 1 || !want && mounts != 0 {
				t.Errorf("%s/%s: %d mounts at %s, want %v", rj.Name, c.Name, mounts, wantProgressMount.MountPath, want)
			}
		}
		volumes := 0
		for _, v := range pod.Volumes {
			if v.Name == wantProgressVolume.Name {
				volumes++
				if diff := cmp.Diff(wantProgressVolume, v); diff != "" {
					t.Errorf("%s: volume (-want +got):\n%s", rj.Name, diff)
				}
			}
		}
		if want && volumes != 1 || !want && volumes != 0 {
			t.Errorf("%s: %d volumes %s, want injected=%v", rj.Name, volumes, wantProgressVolume.Name, want)
		}
	}
}

func TestTrainerStatus(t *testing.T) {
	sidecar := plantest.Container("sidecar")
	cases := map[string]struct {
		rt      func(t *testing.T) plan.Runtime
		trainer *trainer.Trainer
		// injected is the replicatedJob that must get the env, mount and volume.
		injected string
		// check looks at the rest.
		check func(t *testing.T, js *jobsetv1alpha2.JobSet)
		// runtimeHasNames: the runtime itself has the env, mount and volume names, so
		// they are there without the plugin too.
		runtimeHasNames bool
	}{
		"upstream torch runtime: the node replicatedJob": {
			rt: func(t *testing.T) plan.Runtime {
				return plantest.UpstreamRuntimeFile(t, "runtimes/torch_distributed.yaml")
			},
			trainer:  &trainer.Trainer{NumNodes: ptr.To[int32](2)},
			injected: "node",
			check: func(t *testing.T, js *jobsetv1alpha2.JobSet) {
				// The framework's env is still there, before the progress env.
				c := nodeContainer(t, js)
				if envNamed(c.Env, "PET_NNODES") == nil {
					t.Errorf("PET_NNODES missing: %v", c.Env)
				}
				if n := len(c.Env); n < 3 || c.Env[n-3].Name != "KUBEFLOW_TRAINER_SERVER_URL" {
					t.Errorf("want the progress env appended last: %v", c.Env)
				}
			},
		},
		"upstream MPI runtime (deepspeed): the launcher, which has the trainer ancestor": {
			rt: func(t *testing.T) plan.Runtime {
				return plantest.UpstreamRuntimeFile(t, "runtimes/deepspeed_distributed.yaml")
			},
			trainer:  &trainer.Trainer{NumNodes: ptr.To[int32](2)},
			injected: "launcher",
			check: func(t *testing.T, js *jobsetv1alpha2.JobSet) {
				// MPI's own volume and mount stay.
				pod := plan.PodSpec(plan.ReplicatedJob(js, "launcher"))
				if len(pod.Volumes) < 2 {
					t.Errorf("launcher volumes %v: want MPI's and the progress volume", pod.Volumes)
				}
			},
		},
		"MPI runtime whose node replicatedJob has the trainer ancestor (docs/compatibility.md#upstream-test-cases Case 5)": {
			rt: func(*testing.T) plan.Runtime {
				return case5Runtime(mpiPolicy(trainer.MPIImplementationOpenMPI, "/root/.ssh", false))
			},
			injected: "node",
		},
		"every regular container of the trainer pod, no init container": {
			rt: func(*testing.T) plan.Runtime {
				rt := plantest.SkeletonRuntime(torchPolicy(1))
				pod := plan.PodSpec(&rt.Spec.Template.Spec.ReplicatedJobs[2])
				pod.Containers = append(pod.Containers, sidecar)
				pod.InitContainers = []corev1.Container{plantest.Container("setup")}
				return rt
			},
			injected: "node",
			check: func(t *testing.T, js *jobsetv1alpha2.JobSet) {
				if n := len(plan.PodSpec(plan.ReplicatedJob(js, "node")).Containers); n != 2 {
					t.Errorf("node has %d containers, want 2", n)
				}
			},
		},
		"env, mount and volume of the same names from the runtime and the TrainJob are replaced": {
			rt: func(*testing.T) plan.Runtime {
				rt := plantest.SkeletonRuntime(torchPolicy(1))
				pod := plan.PodSpec(&rt.Spec.Template.Spec.ReplicatedJobs[2])
				pod.Containers[0].Env = append(pod.Containers[0].Env, env("KUBEFLOW_TRAINER_SERVER_TOKEN", "/elsewhere"))
				pod.Containers[0].VolumeMounts = append(pod.Containers[0].VolumeMounts,
					corev1.VolumeMount{Name: "mine", MountPath: "/var/run/secrets/kubeflow/trainer"})
				pod.Volumes = append(pod.Volumes, corev1.Volume{Name: "kubeflow-trainer-token",
					VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
				return rt
			},
			trainer: &trainer.Trainer{Env: []corev1.EnvVar{
				env("KUBEFLOW_TRAINER_SERVER_URL", "https://attacker.example/"),
				env("MY_VAR", "kept"),
			}},
			injected:        "node",
			runtimeHasNames: true,
			check: func(t *testing.T, js *jobsetv1alpha2.JobSet) {
				c := nodeContainer(t, js)
				if got := envNamed(c.Env, "MY_VAR"); got == nil || got.Value != "kept" {
					t.Errorf("MY_VAR = %+v, want kept", got)
				}
				for _, name := range []string{"KUBEFLOW_TRAINER_SERVER_URL", "KUBEFLOW_TRAINER_SERVER_TOKEN"} {
					n := 0
					for _, e := range c.Env {
						if e.Name == name {
							n++
						}
					}
					if n != 1 {
						t.Errorf("%s appears %d times, want once: %v", name, n, c.Env)
					}
				}
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rt := tc.rt(t)
			tj := plantest.TrainJob(rt.Name, tc.trainer)
			p := buildWith(t, tj, rt, withTrainerStatus())
			checkInjected(t, p.JobSet, tc.injected)
			if tc.check != nil {
				tc.check(t, p.JobSet)
			}

			// Idempotent: the plugin again on its own output changes nothing.
			again := p.DeepCopy()
			if err := TrainerStatus(testProgressURL).Apply(tj, again); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(p.JobSet, again.JobSet); diff != "" {
				t.Errorf("applied twice (-once +twice):\n%s", diff)
			}

			// Without the plugin (gate off): nothing, and otherwise the same JobSet.
			off := buildWith(t, tj, rt, DefaultPlugins(SecretNames{}))
			if !tc.runtimeHasNames {
				checkInjected(t, off.JobSet, "")
			}
			if diff := cmp.Diff(off.Objects, p.Objects); diff != "" {
				t.Errorf("side objects differ with the plugin (-off +on):\n%s", diff)
			}
		})
	}
}

// A runtime without a trainer replicatedJob gets nothing, as upstream.
func TestTrainerStatusWithoutTrainer(t *testing.T) {
	rt := plantest.SkeletonRuntime(nil)
	delete(rt.Spec.Template.Spec.ReplicatedJobs[2].Template.Labels, trainer.LabelTrainJobAncestor)
	js, err := mergepatches.Merge(plantest.TrainJob(rt.Name, nil), rt)
	if err != nil {
		t.Fatal(err)
	}
	p := &plan.Plan{Runtime: rt, JobSet: js}
	before := p.JobSet.DeepCopy()
	if err := TrainerStatus(testProgressURL).Apply(plantest.TrainJob(rt.Name, nil), p); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, p.JobSet); diff != "" {
		t.Errorf("JobSet changed (-before +after):\n%s", diff)
	}
}

// The plugin rejects nothing: every upstream runtime and TrainJob that admission and the
// ML policy stage accept without it, they accept with it, with the same findings.
func TestTrainerStatusValidatesNothing(t *testing.T) {
	for _, r := range plantest.UpstreamRuntimes(t) {
		t.Run(r.Doc, func(t *testing.T) {
			rt := r.Runtime
			if diff := cmp.Diff(ValidateRuntime(rt.Spec, DefaultPlugins(SecretNames{})), ValidateRuntime(rt.Spec, withTrainerStatus())); diff != "" {
				t.Errorf("ValidateRuntime differs with the plugin (-without +with):\n%s", diff)
			}
			tj := plantest.TrainJob(rt.Name, &trainer.Trainer{NumNodes: ptr.To[int32](2),
				Env: []corev1.EnvVar{env("KUBEFLOW_TRAINER_SERVER_URL", "x")}})
			js, err := mergepatches.Merge(tj, rt)
			if err != nil {
				t.Skipf("Merge: %v", err)
			}
			p := &plan.Plan{Runtime: rt, JobSet: js}
			if diff := cmp.Diff(ValidateTrainJob(tj, p, DefaultPlugins(SecretNames{})), ValidateTrainJob(tj, p, withTrainerStatus())); diff != "" {
				t.Errorf("ValidateTrainJob differs with the plugin (-without +with):\n%s", diff)
			}
			errWithout := Apply(tj, p.DeepCopy(), DefaultPlugins(SecretNames{}))
			errWith := Apply(tj, p.DeepCopy(), withTrainerStatus())
			if (errWithout == nil) != (errWith == nil) {
				t.Errorf("Apply: %v without the plugin, %v with it", errWithout, errWith)
			}
		})
	}
}
