package admission

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	utiltesting "github.com/trainyard/trainyard/pkg/util/testing"
)

func policy(s trainer.MLPolicySource) *trainer.MLPolicy { return &trainer.MLPolicy{MLPolicySource: s} }

var (
	torchPolicy = policy(trainer.MLPolicySource{Torch: &trainer.TorchMLPolicySource{}})
	jaxPolicy   = policy(trainer.MLPolicySource{JAX: &trainer.JAXMLPolicySource{}})
)

// The rules of a TrainJob's CREATE are proven by the shared rule table (TestRuleTable);
// these are the cases it cannot hold: objects of another namespace.
func TestValidateTrainJobRuntimeOfAnotherNamespace(t *testing.T) {
	deps := fixture{runtimes: []runtime.Object{utiltesting.MakeTrainingRuntime("other", "test-runtime")}}.deps(t)
	tj := trainJob("test-runtime", nil)
	tj.Spec.RuntimeRef.Kind = ptr.To(trainer.TrainingRuntimeKind)

	warnings, errs := deps.ValidateTrainJob(nil, tj)

	want := `TrainingRuntime "test-runtime" referenced by spec.runtimeRef not found in namespace "default"`
	if len(errs) != 0 || len(warnings) != 1 || !strings.Contains(warnings[0], want) {
		t.Errorf("warnings, errors = %q, %v; want admitted with one warning containing %q", warnings, errs, want)
	}
}

func TestValidateTrainJobUpdate(t *testing.T) {
	const rt = "test-runtime"
	base := func(suspend bool, patches ...trainer.RuntimePatch) *trainer.TrainJob {
		tj := trainJob(rt, nil)
		tj.Spec.Suspend = ptr.To(suspend)
		tj.Spec.RuntimePatches = patches
		return tj
	}
	stamp := metav1.NewTime(testNow.Truncate(time.Second))
	kueue := func(pool string) trainer.RuntimePatch {
		p := podPatch("kueue.x-k8s.io/manager", "node", trainer.PodSpecPatch{NodeSelector: map[string]string{"pool": pool}})
		p.Time = &stamp
		return p
	}
	jobSet := func(active int32) *jobsetv1alpha2.JobSet {
		return utiltesting.MakeJobSet("default", "test-job").ControlledBy(base(false)).
			ReplicatedJobStatus("node", 0, 0, 0, active, 0).Obj()
	}
	runtimes := []runtime.Object{ctr(rt, skeleton(torchPolicy), nil)}
	cases := map[string]struct {
		fixture  fixture
		old, tj  *trainer.TrainJob
		wantErrs []string
		wantMsg  string
	}{
		"patches changed while running": {
			fixture:  fixture{runtimes: runtimes},
			old:      base(false, kueue("a")),
			tj:       base(false, kueue("b")),
			wantErrs: []string{"FieldValueForbidden: spec.runtimePatches"},
			wantMsg:  "RuntimePatches can only be modified when the TrainJob is suspended before or after the update",
		},
		"patches changed while suspended, JobSet inactive": {
			fixture: fixture{runtimes: runtimes, jobSets: []*jobsetv1alpha2.JobSet{jobSet(0)}},
			old:     base(true, kueue("a")),
			tj:      base(true, kueue("b")),
		},
		"patches changed while suspended, JobSet still active": {
			fixture:  fixture{runtimes: runtimes, jobSets: []*jobsetv1alpha2.JobSet{jobSet(3)}},
			old:      base(true, kueue("a")),
			tj:       base(true, kueue("b")),
			wantErrs: []string{"FieldValueForbidden: spec.runtimePatches"},
			wantMsg:  "RuntimePatches cannot be modified when the JobSet's ReplicatedJob node is still active",
		},
		"patches added in the update that unsuspends": {
			fixture: fixture{runtimes: runtimes},
			old:     base(true),
			tj:      base(false, kueue("a")),
		},
		"patches kept while running": {
			fixture: fixture{runtimes: runtimes},
			old:     base(false, kueue("a")),
			tj:      base(true, kueue("a")),
		},
		"a foreign active JobSet is not the TrainJob's": {
			fixture: fixture{runtimes: runtimes, jobSets: []*jobsetv1alpha2.JobSet{
				utiltesting.MakeJobSet("default", "test-job").ReplicatedJobStatus("node", 0, 0, 0, 2, 0).Obj()}},
			old: base(true, kueue("a")),
			tj:  base(true, kueue("b")),
		},
		"unchanged spec with its runtime gone is admitted": {
			old: base(false, kueue("a")),
			tj:  base(false, kueue("a")),
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, errs := c.fixture.deps(t).ValidateTrainJob(c.old, c.tj)
			if diff := cmp.Diff(c.wantErrs, fields(errs)); diff != "" {
				t.Errorf("errors (-want +got):\n%s\n%v", diff, errs)
			}
			if c.wantMsg != "" && !strings.Contains(errs.ToAggregate().Error(), c.wantMsg) {
				t.Errorf("message %q does not contain %q", errs.ToAggregate(), c.wantMsg)
			}
		})
	}
}

// Every branch of docs/compatibility.md#trainjob-defaulting.
func TestDefaultRuntimePatchTimes(t *testing.T) {
	now := metav1.NewTime(testNow.Truncate(time.Second))
	user := metav1.NewTime(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	older := metav1.NewTime(time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC))
	patch := func(manager, pool string, at *metav1.Time) trainer.RuntimePatch {
		p := podPatch(manager, "node", trainer.PodSpecPatch{NodeSelector: map[string]string{"pool": pool}})
		p.Time = at
		return p
	}
	tjWith := func(patches ...trainer.RuntimePatch) *trainer.TrainJob {
		tj := trainJob("rt", nil)
		tj.Spec.RuntimePatches = patches
		return tj
	}
	add := func(i string, at metav1.Time) PatchOperation {
		return PatchOperation{Op: "add", Path: "/spec/runtimePatches/" + i + "/time", Value: at}
	}
	cases := map[string]struct {
		old, tj *trainer.TrainJob
		want    []PatchOperation
	}{
		"create: unset gets now, set is kept": {
			tj:   tjWith(patch("a.io/x", "a", nil), patch("b.io/x", "a", &user)),
			want: []PatchOperation{add("0", now)},
		},
		"create: no patches": {tj: tjWith()},
		"update: unchanged keeps the old time": {
			old: tjWith(patch("a.io/x", "a", &older)),
			tj:  tjWith(patch("a.io/x", "a", &older)),
		},
		"update: unchanged with a user time gets the old time back": {
			old:  tjWith(patch("a.io/x", "a", &older)),
			tj:   tjWith(patch("a.io/x", "a", &user)),
			want: []PatchOperation{add("0", older)},
		},
		"update: unchanged whose old patch had no time loses the user's": {
			old:  tjWith(patch("a.io/x", "a", nil)),
			tj:   tjWith(patch("a.io/x", "a", &user)),
			want: []PatchOperation{{Op: "remove", Path: "/spec/runtimePatches/0/time"}},
		},
		"update: changed gets now, the user's time discarded": {
			old:  tjWith(patch("a.io/x", "a", &older)),
			tj:   tjWith(patch("a.io/x", "b", &user)),
			want: []PatchOperation{add("0", now)},
		},
		"update: new manager keeps the user's time or gets now": {
			old:  tjWith(patch("a.io/x", "a", &older)),
			tj:   tjWith(patch("a.io/x", "a", &older), patch("b.io/x", "a", &user), patch("c.io/x", "a", nil)),
			want: []PatchOperation{add("2", now)},
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got := DefaultRuntimePatchTimes(c.old, c.tj, testNow)
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("patch (-want +got):\n%s", diff)
			}
		})
	}
}
