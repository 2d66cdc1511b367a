package admission

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	utiltesting "github.com/trainyard/trainyard/pkg/util/testing"
)

func TestValidateRuntimeSpec(t *testing.T) {
	const rjs = "spec.template.spec.replicatedJobs"
	cases := map[string]struct {
		spec      *trainer.TrainingRuntimeSpec
		wantErrs  []string
		wantInMsg string
	}{
		"skeleton":                   {spec: skeleton(torchPolicy)},
		"no mlPolicy":                {spec: skeleton(nil)},
		"mpi":                        {spec: withLauncher(skeleton(mpiPolicy(false)))},
		"mpi launcher only, as node": {spec: without(withLauncher(skeleton(mpiPolicy(true))), "node")},
		"flux":                       {spec: skeleton(fluxPolicy)},
		"trainer replicas 2": {
			spec: func() *trainer.TrainingRuntimeSpec {
				spec := skeleton(torchPolicy)
				rjob(spec, "node").Replicas = 2
				return spec
			}(),
			wantErrs:  []string{"FieldValueInvalid: " + rjs + "[name=node].replicas"},
			wantInMsg: "always must be 1",
		},
		"unlabelled replicatedJob may have replicas 2": {
			spec: func() *trainer.TrainingRuntimeSpec {
				spec := withLauncher(skeleton(torchPolicy))
				rjob(spec, "launcher").Replicas = 2
				return spec
			}(),
		},
		"initializer without its container": {
			spec: func() *trainer.TrainingRuntimeSpec {
				spec := skeleton(torchPolicy)
				rjob(spec, "dataset-initializer").Template.Spec.Template.Spec.Containers[0].Name = "fetch"
				return spec
			}(),
			wantErrs:  []string{"FieldValueInvalid: " + rjs + "[name=dataset-initializer].template.spec.template.spec.containers"},
			wantInMsg: "must contain the required container for the ancestor: dataset-initializer",
		},
		"no trainer step": {
			spec: func() *trainer.TrainingRuntimeSpec {
				spec := skeleton(torchPolicy)
				node := rjob(spec, "node")
				node.Name, node.Template.Labels = "worker", nil
				return spec
			}(),
			wantErrs:  []string{"FieldValueInvalid: " + rjs},
			wantInMsg: "no replicatedJob is the trainer step",
		},
		"mpi without launcher nor node": {
			spec:      without(skeleton(mpiPolicy(false)), "node"),
			wantErrs:  []string{"FieldValueInvalid: " + rjs, "FieldValueInvalid: " + rjs},
			wantInMsg: "set mlPolicy.mpi.runLauncherAsNode to true",
		},
		"flux with flux-installer": {
			spec: func() *trainer.TrainingRuntimeSpec {
				spec := skeleton(fluxPolicy)
				rjob(spec, "node").Template.Spec.Template.Spec.InitContainers = []corev1.Container{{Name: "flux-installer"}}
				return spec
			}(),
			wantErrs:  []string{"FieldValueInvalid: " + rjs + "[name=node].template.spec.template.spec.initContainers[name=flux-installer]"},
			wantInMsg: "InitContainer 'flux-installer' is reserved",
		},
		"flux without node": {
			spec: func() *trainer.TrainingRuntimeSpec {
				spec := skeleton(fluxPolicy)
				node := rjob(spec, "node")
				node.Name = "trainer"
				return spec
			}(),
			wantErrs:  []string{"FieldValueInvalid: " + rjs},
			wantInMsg: `mlPolicy.flux runs a Flux broker in the "node" container`,
		},
		"torch envInjection target missing": {
			spec: func() *trainer.TrainingRuntimeSpec {
				spec := skeleton(policy(trainer.MLPolicySource{Torch: &trainer.TorchMLPolicySource{EnvInjection: &trainer.EnvInjection{
					Targets: []trainer.EnvInjectionTarget{{JobName: "node", ContainerNames: []string{"sidecar"}}}}}}))
				return spec
			}(),
			wantErrs:  []string{"FieldValueInvalid: spec.mlPolicy.torch.envInjection.targets[jobName=node].containerNames[0]"},
			wantInMsg: `envInjection target podSet "node" container "sidecar" not found in runtime template`,
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			errs := ValidateRuntimeSpec(c.spec, (&Deps{}).plugins())
			if diff := cmp.Diff(c.wantErrs, fields(errs)); diff != "" {
				t.Errorf("errors (-want +got):\n%s\n%v", diff, errs)
			}
			if c.wantInMsg != "" && !strings.Contains(errs.ToAggregate().Error(), c.wantInMsg) {
				t.Errorf("message %q does not contain %q", errs.ToAggregate(), c.wantInMsg)
			}
		})
	}
}

func TestValidateRuntime(t *testing.T) {
	bad := func() *trainer.TrainingRuntimeSpec {
		spec := skeleton(torchPolicy)
		rjob(spec, "node").Replicas = 3
		return spec
	}
	good := skeleton(torchPolicy)
	meta := func(labels map[string]string) *metav1.ObjectMeta {
		return &metav1.ObjectMeta{Namespace: "default", Name: "rt", Labels: labels}
	}
	t.Run("TrainingRuntime update is validated (upstream never does)", func(t *testing.T) {
		_, errs := fixture{}.deps(t).ValidateRuntime(trainer.TrainingRuntimeKind, meta(nil), good, bad())
		if diff := cmp.Diff([]string{"FieldValueInvalid: spec.template.spec.replicatedJobs[name=node].replicas"}, fields(errs)); diff != "" {
			t.Errorf("errors (-want +got):\n%s", diff)
		}
	})
	t.Run("an update that leaves spec unchanged is not re-validated", func(t *testing.T) {
		if _, errs := (fixture{}).deps(t).ValidateRuntime(trainer.TrainingRuntimeKind, meta(nil), bad(), bad()); len(errs) != 0 {
			t.Errorf("errors = %v, want none", errs)
		}
	})
	t.Run("webhook-validation disabled", func(t *testing.T) {
		if _, errs := (fixture{}).deps(t).ValidateRuntime(trainer.TrainingRuntimeKind,
			meta(map[string]string{LabelWebhookValidation: "disabled"}), nil, bad()); len(errs) != 0 {
			t.Errorf("errors = %v, want none", errs)
		}
	})

	// TrainJobs of the runtime: one started (it has its JobSet), one waiting whose
	// patch names a replicatedJob the runtime lacks, one finished.
	started := utiltesting.MakeTrainJob("default", "started").Obj()
	started.Spec.RuntimeRef = trainer.RuntimeRef{Name: "rt", Kind: ptr.To(trainer.TrainingRuntimeKind)}
	waiting := started.DeepCopy()
	waiting.Name, waiting.UID = "waiting", "waiting-uid"
	waiting.Spec.RuntimePatches = []trainer.RuntimePatch{podPatch("example.io/x", "worker", trainer.PodSpecPatch{})}
	finished := waiting.DeepCopy()
	finished.Name, finished.UID = "finished", "finished-uid"
	finished.Status.Conditions = []metav1.Condition{{Type: trainer.TrainJobComplete, Status: metav1.ConditionTrue}}
	f := fixture{
		trainJobs: []*trainer.TrainJob{started, waiting, finished},
		jobSets:   []*jobsetv1alpha2.JobSet{utiltesting.MakeJobSet("default", "started").ControlledBy(started).Obj()},
	}
	edited := skeleton(torchPolicy)
	rjob(edited, "node").Template.Spec.Template.Spec.Containers[0].Image = "new"
	t.Run("edit: started TrainJobs keep their snapshot, misfit patches", func(t *testing.T) {
		warnings, errs := f.deps(t).ValidateRuntime(trainer.TrainingRuntimeKind, meta(nil), good, edited)
		if len(errs) != 0 {
			t.Fatalf("errors = %v", errs)
		}
		want := []string{
			"1 started TrainJob(s) keep the runtime they were built from and will not see this edit (runtime snapshot): default/started",
			"the runtimePatches of 1 TrainJob(s) name a replicatedJob or container this runtime lacks; they get JobSetReady=False until fixed: default/waiting",
		}
		if diff := cmp.Diff(want, warnings); diff != "" {
			t.Errorf("warnings (-want +got):\n%s", diff)
		}
	})
	t.Run("create: only the misfit patches", func(t *testing.T) {
		warnings, _ := f.deps(t).ValidateRuntime(trainer.TrainingRuntimeKind, meta(nil), nil, edited)
		if len(warnings) != 1 || !strings.Contains(warnings[0], "default/waiting") {
			t.Errorf("warnings = %q, want the misfit patch of default/waiting", warnings)
		}
	})
}

func TestValidateClusterTrainingRuntime(t *testing.T) {
	deprecated := map[string]string{trainer.LabelSupport: trainer.SupportDeprecated}
	wantDeprecated := `ClusterTrainingRuntime "rt" is deprecated and will be removed in a future release of Kubeflow Trainer. ` +
		"See runtime deprecation policy: https://trainer.kubeflow.org/en/latest/operator-guides/runtime.html#runtime-deprecation-policy"
	t.Run("deprecated: warned on create", func(t *testing.T) {
		warnings, errs := fixture{}.deps(t).ValidateClusterTrainingRuntime(nil, ctr("rt", skeleton(torchPolicy), deprecated))
		if len(errs) != 0 || len(warnings) != 1 || warnings[0] != wantDeprecated {
			t.Errorf("warnings, errors = %q, %v; want %q", warnings, errs, wantDeprecated)
		}
	})
	t.Run("deprecated: not on update (upstream)", func(t *testing.T) {
		old := ctr("rt", skeleton(torchPolicy), deprecated)
		obj := ctr("rt", skeleton(jaxPolicy), deprecated)
		if warnings, errs := (fixture{}).deps(t).ValidateClusterTrainingRuntime(old, obj); len(errs)+len(warnings) != 0 {
			t.Errorf("warnings, errors = %q, %v; want none", warnings, errs)
		}
	})
	t.Run("update validated", func(t *testing.T) {
		spec := skeleton(torchPolicy)
		rjob(spec, "model-initializer").Replicas = 0
		_, errs := fixture{}.deps(t).ValidateClusterTrainingRuntime(ctr("rt", skeleton(torchPolicy), nil), ctr("rt", spec, nil))
		if diff := cmp.Diff([]string{"FieldValueInvalid: spec.template.spec.replicatedJobs[name=model-initializer].replicas"}, fields(errs)); diff != "" {
			t.Errorf("errors (-want +got):\n%s", diff)
		}
	})
}
