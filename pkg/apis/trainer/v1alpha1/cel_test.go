package v1alpha1_test

import (
	"strings"
	"testing"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
)

const (
	trainJobHeader = `"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainJob"`
	runtimeHeader  = `"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"ClusterTrainingRuntime","metadata":{"name":"rt"}`
	nodeTemplate   = `"template":{"spec":{"replicatedJobs":[{"name":"node","template":{"spec":{"template":{"spec":{"containers":[{"name":"node","image":"x"}]}}}}}]}}`
)

func trainJob(name, spec string) string {
	return `{` + trainJobHeader + `,"metadata":{"name":"` + name + `","namespace":"ns"},"spec":{"runtimeRef":{"name":"torch-distributed"}` + spec + `}}`
}

func runtimeSpec(spec string) string {
	return `{` + runtimeHeader + `,"spec":{` + spec + `}}`
}

func patchWithPodSpec(manager, podSpec string) string {
	return `,"runtimePatches":[{"manager":"` + manager + `","trainingRuntimeSpec":{"template":{"spec":{"replicatedJobs":[{"name":"node","template":{"spec":{"template":{"spec":` + podSpec + `}}}}]}}}}]`
}

// TestCELRules exercises every CEL rule Trainyard's CRDs carry — upstream Trainer's and
// Trainyard's additions — on creates and updates. wantErr is a substring of the
// expected message; empty means the object must be accepted.
func TestCELRules(t *testing.T) {
	crds := loadCRDs(t)
	for _, tc := range []struct {
		name    string
		kind    string
		old     string // empty for a create
		obj     string
		wantErr string
	}{
		// TrainJob metadata (upstream).
		{name: "name is a DNS-1035 label", kind: trainer.TrainJobKind, obj: trainJob("my-job-1", "")},
		{name: "name starting with a digit", kind: trainer.TrainJobKind, obj: trainJob("1job", ""), wantErr: "metadata.name must match RFC 1035 DNS label format"},
		{name: "name with uppercase", kind: trainer.TrainJobKind, obj: trainJob("Job", ""), wantErr: "metadata.name must match RFC 1035 DNS label format"},
		{name: "name of 64 characters", kind: trainer.TrainJobKind, obj: trainJob(strings.Repeat("a", 64), ""), wantErr: "metadata.name must be no more than 63 characters"},

		// TrainJob spec (upstream).
		{name: "managedBy multikueue", kind: trainer.TrainJobKind, obj: trainJob("a", `,"managedBy":"kueue.x-k8s.io/multikueue"`)},
		{name: "managedBy unknown controller", kind: trainer.TrainJobKind, obj: trainJob("a", `,"managedBy":"example.com/other"`), wantErr: "ManagedBy must be trainer.kubeflow.org/trainjob-controller or kueue.x-k8s.io/multikueue if set"},
		{name: "numProcPerNode 0", kind: trainer.TrainJobKind, obj: trainJob("a", `,"trainer":{"numProcPerNode":0}`), wantErr: "numProcPerNode must be greater than or equal to 1"},
		{name: "numNodes 0 accepted", kind: trainer.TrainJobKind, obj: trainJob("a", `,"trainer":{"numNodes":0}`)},
		{name: "numNodes negative", kind: trainer.TrainJobKind, obj: trainJob("a", `,"trainer":{"numNodes":-1}`), wantErr: "should be greater than or equal to 0"},
		{name: "storageUri with scheme", kind: trainer.TrainJobKind, obj: trainJob("a", `,"initializer":{"dataset":{"storageUri":"hf://tatsu-lab/alpaca"}}`)},
		{name: "storageUri empty", kind: trainer.TrainJobKind, obj: trainJob("a", `,"initializer":{"model":{"storageUri":""}}`)},
		{name: "storageUri without scheme", kind: trainer.TrainJobKind, obj: trainJob("a", `,"initializer":{"dataset":{"storageUri":"tatsu-lab/alpaca"}}`), wantErr: "storageUri may be empty, or it must be a valid URI (scheme://...)"},
		{name: "activeDeadlineSeconds 0", kind: trainer.TrainJobKind, obj: trainJob("a", `,"activeDeadlineSeconds":0`), wantErr: "should be greater than or equal to 1"},

		// TrainJob immutability (upstream).
		{name: "runtimeRef changed", kind: trainer.TrainJobKind, old: trainJob("a", ""), obj: `{` + trainJobHeader + `,"metadata":{"name":"a","namespace":"ns"},"spec":{"runtimeRef":{"name":"other"}}}`, wantErr: "field is immutable"},
		{name: "trainer changed", kind: trainer.TrainJobKind, old: trainJob("a", `,"trainer":{"image":"a"}`), obj: trainJob("a", `,"trainer":{"image":"b"}`), wantErr: "field is immutable"},
		{name: "initializer changed", kind: trainer.TrainJobKind, old: trainJob("a", `,"initializer":{"dataset":{"storageUri":"hf://a"}}`), obj: trainJob("a", `,"initializer":{"dataset":{"storageUri":"hf://b"}}`), wantErr: "field is immutable"},
		{name: "managedBy changed", kind: trainer.TrainJobKind, old: trainJob("a", ""), obj: trainJob("a", `,"managedBy":"kueue.x-k8s.io/multikueue"`), wantErr: "field is immutable"},
		{name: "activeDeadlineSeconds changed", kind: trainer.TrainJobKind, old: trainJob("a", `,"activeDeadlineSeconds":10`), obj: trainJob("a", `,"activeDeadlineSeconds":20`), wantErr: "field is immutable"},
		{name: "suspend changed", kind: trainer.TrainJobKind, old: trainJob("a", `,"suspend":true`), obj: trainJob("a", `,"suspend":false`)},

		// runtimePatches: scheduler-owned fields are mutable, the rest immutable (upstream).
		{name: "patch nodeSelector changed", kind: trainer.TrainJobKind,
			old: trainJob("a", patchWithPodSpec("kueue.x-k8s.io/manager", `{"nodeSelector":{"type":"p5.48xlarge"}}`)),
			obj: trainJob("a", patchWithPodSpec("kueue.x-k8s.io/manager", `{"nodeSelector":{"type":"p5en.48xlarge"},"tolerations":[{"key":"k","operator":"Exists"}],"schedulingGates":[{"name":"g"}]}`))},
		{name: "patch serviceAccountName changed", kind: trainer.TrainJobKind,
			old: trainJob("a", patchWithPodSpec("example.io/team", `{"serviceAccountName":"a"}`)),
			obj: trainJob("a", patchWithPodSpec("example.io/team", `{"serviceAccountName":"b"}`)), wantErr: "field is immutable"},
		{name: "patch containers changed", kind: trainer.TrainJobKind,
			old: trainJob("a", patchWithPodSpec("example.io/team", `{"containers":[{"name":"sidecar","env":[{"name":"A","value":"1"}]}]}`)),
			obj: trainJob("a", patchWithPodSpec("example.io/team", `{"containers":[{"name":"sidecar","env":[{"name":"A","value":"2"}]}]}`)), wantErr: "field is immutable"},

		// Trainyard: PodSpecPatch.resourceClaims (KEP-2782).
		{name: "resourceClaims with a template", kind: trainer.TrainJobKind,
			obj: trainJob("a", patchWithPodSpec("example.io/team", `{"resourceClaims":[{"name":"gpus","resourceClaimTemplateName":"two-gpus"}],"containers":[{"name":"node","resources":{"claims":[{"name":"gpus"}]}}]}`))},
		{name: "resourceClaims with a claim", kind: trainer.TrainJobKind,
			obj: trainJob("a", patchWithPodSpec("example.io/team", `{"resourceClaims":[{"name":"shared","resourceClaimName":"nvlink-domain"}]}`))},
		{name: "resourceClaims with both", kind: trainer.TrainJobKind,
			obj:     trainJob("a", patchWithPodSpec("example.io/team", `{"resourceClaims":[{"name":"gpus","resourceClaimName":"c","resourceClaimTemplateName":"t"}]}`)),
			wantErr: "each resourceClaims entry must set exactly one of resourceClaimName or resourceClaimTemplateName"},
		{name: "resourceClaims with neither", kind: trainer.TrainJobKind,
			obj:     trainJob("a", patchWithPodSpec("example.io/team", `{"resourceClaims":[{"name":"gpus"}]}`)),
			wantErr: "each resourceClaims entry must set exactly one of resourceClaimName or resourceClaimTemplateName"},
		{name: "resourceClaims with an empty name", kind: trainer.TrainJobKind,
			obj:     trainJob("a", patchWithPodSpec("example.io/team", `{"resourceClaims":[{"name":"gpus","resourceClaimName":""}]}`)),
			wantErr: "each resourceClaims entry must set exactly one of resourceClaimName or resourceClaimTemplateName"},
		{name: "resourceClaims changed", kind: trainer.TrainJobKind,
			old:     trainJob("a", patchWithPodSpec("example.io/team", `{"resourceClaims":[{"name":"gpus","resourceClaimTemplateName":"two-gpus"}]}`)),
			obj:     trainJob("a", patchWithPodSpec("example.io/team", `{"resourceClaims":[{"name":"gpus","resourceClaimTemplateName":"four-gpus"}]}`)),
			wantErr: "field is immutable"},

		// Runtimes: mlPolicy (upstream).
		{name: "torch runtime", kind: trainer.ClusterTrainingRuntimeKind, obj: runtimeSpec(`"mlPolicy":{"numNodes":1,"torch":{}},` + nodeTemplate)},
		{name: "two ML policies", kind: trainer.ClusterTrainingRuntimeKind, obj: runtimeSpec(`"mlPolicy":{"torch":{},"jax":{}},` + nodeTemplate), wantErr: "Only one of the policy can be configured"},
		{name: "mpi numProcPerNode 0", kind: trainer.ClusterTrainingRuntimeKind, obj: runtimeSpec(`"mlPolicy":{"mpi":{"numProcPerNode":0}},` + nodeTemplate), wantErr: "NumProcPerNode in mpiPolicy must be >= 1"},
		{name: "mpi Intel implementation", kind: trainer.ClusterTrainingRuntimeKind, obj: runtimeSpec(`"mlPolicy":{"mpi":{"mpiImplementation":"Intel"}},` + nodeTemplate), wantErr: "Unsupported value"},
		{name: "flux numProcPerNode 0", kind: trainer.ClusterTrainingRuntimeKind, obj: runtimeSpec(`"mlPolicy":{"flux":{"numProcPerNode":0}},` + nodeTemplate), wantErr: "NumProcPerNode in fluxPolicy must be >= 1"},
		{name: "envInjection into node", kind: trainer.ClusterTrainingRuntimeKind,
			obj:     runtimeSpec(`"mlPolicy":{"torch":{"envInjection":{"targets":[{"jobName":"node","containerNames":["node"]}]}}},` + nodeTemplate),
			wantErr: "containerNames must not include the main node container because PET_* envs are always injected into it"},
		{name: "envInjection into a sidecar", kind: trainer.ClusterTrainingRuntimeKind,
			obj: runtimeSpec(`"mlPolicy":{"torch":{"envInjection":{"targets":[{"jobName":"node","containerNames":["sidecar"]}]}}},` + nodeTemplate)},
		{name: "empty spec", kind: trainer.ClusterTrainingRuntimeKind, obj: `{` + runtimeHeader + `,"spec":{}}`, wantErr: "should have at least 1 properties"},

		// Runtimes: podGroupPolicy oneOf (Trainyard, extended to kaiScheduler and workload).
		{name: "coscheduling only", kind: trainer.ClusterTrainingRuntimeKind, obj: runtimeSpec(`"podGroupPolicy":{"coscheduling":{}},` + nodeTemplate)},
		{name: "kaiScheduler with a queue", kind: trainer.ClusterTrainingRuntimeKind, obj: runtimeSpec(`"podGroupPolicy":{"kaiScheduler":{"queue":"team-a"}},` + nodeTemplate)},
		{name: "workload only", kind: trainer.ClusterTrainingRuntimeKind, obj: runtimeSpec(`"podGroupPolicy":{"workload":{}},` + nodeTemplate)},
		{name: "coscheduling and volcano", kind: trainer.ClusterTrainingRuntimeKind, obj: runtimeSpec(`"podGroupPolicy":{"coscheduling":{},"volcano":{}},` + nodeTemplate), wantErr: "only one of coscheduling, volcano, kaiScheduler or workload can be set in podGroupPolicy"},
		{name: "kaiScheduler and workload", kind: trainer.ClusterTrainingRuntimeKind, obj: runtimeSpec(`"podGroupPolicy":{"kaiScheduler":{"queue":"q"},"workload":{}},` + nodeTemplate), wantErr: "only one of coscheduling, volcano, kaiScheduler or workload can be set in podGroupPolicy"},
		{name: "kaiScheduler without a queue", kind: trainer.ClusterTrainingRuntimeKind, obj: runtimeSpec(`"podGroupPolicy":{"kaiScheduler":{}},` + nodeTemplate), wantErr: "queue: Required value"},
		{name: "kaiScheduler queue not a label value", kind: trainer.ClusterTrainingRuntimeKind, obj: runtimeSpec(`"podGroupPolicy":{"kaiScheduler":{"queue":"team a"}},` + nodeTemplate), wantErr: "should match"},
		{name: "volcano mode unknown", kind: trainer.ClusterTrainingRuntimeKind, obj: runtimeSpec(`"podGroupPolicy":{"volcano":{"networkTopology":{"mode":"strict"}}},` + nodeTemplate), wantErr: "Unsupported value"},

		// Runtimes: JobSet's own rules carried by the embedded JobSetSpec.
		{name: "startupPolicy InOrder with dependsOn", kind: trainer.ClusterTrainingRuntimeKind,
			obj:     runtimeSpec(`"template":{"spec":{"startupPolicy":{"startupPolicyOrder":"InOrder"},"replicatedJobs":[{"name":"a","template":{}},{"name":"node","dependsOn":[{"name":"a","status":"Complete"}],"template":{}}]}}`),
			wantErr: "StartupPolicy and DependsOn APIs are mutually exclusive"},
		{name: "JobSet successPolicy changed", kind: trainer.ClusterTrainingRuntimeKind,
			old:     runtimeSpec(`"template":{"spec":{"successPolicy":{"operator":"All"},"replicatedJobs":[{"name":"node","template":{}}]}}`),
			obj:     runtimeSpec(`"template":{"spec":{"successPolicy":{"operator":"Any"},"replicatedJobs":[{"name":"node","template":{}}]}}`),
			wantErr: "Value is immutable"},

		// KEP-2899 (kubeflow/trainer #4052): TTL and run policy; the templates set neither.
		{name: "ttlSecondsAfterFinished 0 accepted", kind: trainer.TrainJobKind, obj: trainJob("a", `,"ttlSecondsAfterFinished":0`)},
		{name: "ttlSecondsAfterFinished negative", kind: trainer.TrainJobKind, obj: trainJob("a", `,"ttlSecondsAfterFinished":-1`), wantErr: "should be greater than or equal to 0"},
		{name: "ttlSecondsAfterFinished changed (mutable)", kind: trainer.TrainJobKind, old: trainJob("a", `,"ttlSecondsAfterFinished":60`), obj: trainJob("a", `,"ttlSecondsAfterFinished":5`)},
		{name: "runPolicy accepted", kind: trainer.ClusterTrainingRuntimeKind,
			obj: runtimeSpec(`"runPolicy":{"activeDeadlineSeconds":3600,"ttlSecondsAfterFinished":0},"template":{"spec":{"replicatedJobs":[{"name":"node","template":{}}]}}`)},
		{name: "runPolicy activeDeadlineSeconds 0", kind: trainer.TrainingRuntimeKind,
			obj: runtimeSpec(`"runPolicy":{"activeDeadlineSeconds":0},"template":{"spec":{"replicatedJobs":[{"name":"node","template":{}}]}}`), wantErr: "should be greater than or equal to 1"},
		{name: "runPolicy ttlSecondsAfterFinished negative", kind: trainer.TrainingRuntimeKind,
			obj: runtimeSpec(`"runPolicy":{"ttlSecondsAfterFinished":-1},"template":{"spec":{"replicatedJobs":[{"name":"node","template":{}}]}}`), wantErr: "should be greater than or equal to 0"},
		{name: "JobSet template ttlSecondsAfterFinished", kind: trainer.ClusterTrainingRuntimeKind,
			obj:     runtimeSpec(`"template":{"spec":{"ttlSecondsAfterFinished":60,"replicatedJobs":[{"name":"node","template":{}}]}}`),
			wantErr: "template.spec.ttlSecondsAfterFinished must not be set: the TrainJob owns its cleanup; set spec.runPolicy.ttlSecondsAfterFinished"},
		{name: "Job template activeDeadlineSeconds", kind: trainer.TrainingRuntimeKind,
			obj:     runtimeSpec(`"template":{"spec":{"replicatedJobs":[{"name":"a","template":{}},{"name":"node","template":{"spec":{"activeDeadlineSeconds":60,"template":{}}}}]}}`),
			wantErr: "template.spec.replicatedJobs[].template.spec must set neither activeDeadlineSeconds nor ttlSecondsAfterFinished"},
		{name: "Job template ttlSecondsAfterFinished", kind: trainer.ClusterTrainingRuntimeKind,
			obj:     runtimeSpec(`"template":{"spec":{"replicatedJobs":[{"name":"node","template":{"spec":{"ttlSecondsAfterFinished":0,"template":{}}}}]}}`),
			wantErr: "set spec.runPolicy.activeDeadlineSeconds or spec.runPolicy.ttlSecondsAfterFinished on the runtime instead"},

		// Status (upstream): trainerStatus needs lastUpdatedTime.
		{name: "trainerStatus without lastUpdatedTime", kind: trainer.TrainJobKind,
			obj: `{` + trainJobHeader + `,"metadata":{"name":"a","namespace":"ns"},"spec":{"runtimeRef":{"name":"r"}},"status":{"trainerStatus":{"progressPercentage":10}}}`, wantErr: "lastUpdatedTime is required when trainerStatus is present"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := crds[tc.kind]
			var old map[string]any
			if tc.old != "" {
				old = decodeMap(t, []byte(tc.old))
				if _, errs := c.admit(old, nil); len(errs) > 0 {
					t.Fatalf("old object rejected: %v", errs.ToAggregate())
				}
			}
			pruned, errs := c.admit(decodeMap(t, []byte(tc.obj)), old)
			if len(pruned) > 0 {
				t.Errorf("pruned fields %v: the test input uses fields the CRD does not have", pruned)
			}
			switch {
			case tc.wantErr == "" && len(errs) > 0:
				t.Errorf("rejected, want accepted: %v", errs.ToAggregate())
			case tc.wantErr != "" && len(errs) == 0:
				t.Errorf("accepted, want an error containing %q", tc.wantErr)
			case tc.wantErr != "" && !strings.Contains(errs.ToAggregate().Error(), tc.wantErr):
				t.Errorf("error %q does not contain %q", errs.ToAggregate(), tc.wantErr)
			}
		})
	}
}
