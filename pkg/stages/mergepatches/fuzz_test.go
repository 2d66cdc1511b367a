package mergepatches_test

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/trainyard/trainyard/pkg/stages/mergepatches"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/stages/plan/plantest"
)

// FuzzMerge merges arbitrary runtime + TrainJob pairs (YAML documents decoded into the
// API types, so the fuzzer explores their structure: runtimePatches, trainer,
// initializer, the runtime's JobSet template), seeded with plantest.FuzzInputs (the
// upstream runtimes with their example TrainJobs, and hand-written edge cases). For each
// pair, Merge must:
//
//   - leave the TrainJob and the runtime spec (shared with the informer cache) as they
//     were;
//   - fail only with an input error (plan.IsInputError: a condition on the TrainJob),
//     never with an error the stage would retry forever;
//   - else return a JobSet the status stage can apply (plantest.CheckPlan) whose
//     replicatedJobs are the runtime's, in the runtime's order, each with at least one
//     pod, and the same JobSet when run again.
func FuzzMerge(f *testing.F) {
	for _, in := range plantest.FuzzInputs(f) {
		f.Add(in.Runtime, in.TrainJob)
	}
	f.Fuzz(func(t *testing.T, runtime, trainJob []byte) {
		tj, rt, ok := plantest.DecodeFuzzInput(runtime, trainJob)
		if !ok {
			return
		}
		tjBefore, specBefore := tj.DeepCopy(), rt.Spec.DeepCopy()
		js, err := mergepatches.Merge(tj, rt)
		if !equality.Semantic.DeepEqual(tj, tjBefore) {
			t.Fatal("Merge modified the TrainJob")
		}
		if !equality.Semantic.DeepEqual(rt.Spec, specBefore) {
			t.Fatal("Merge modified the runtime spec (shared with the informer cache)")
		}
		if err != nil {
			if !plan.IsInputError(err) {
				t.Fatalf("Merge: %v: not an input error, so the stage would retry it forever", err)
			}
			return
		}
		if err := plantest.CheckPlan(tj, &plan.Plan{Runtime: rt, JobSet: js}); err != nil {
			t.Fatalf("merged JobSet: %v", err)
		}
		var want, got []string
		for _, rj := range rt.Spec.Template.Spec.ReplicatedJobs {
			want = append(want, rj.Name)
		}
		for i := range js.Spec.ReplicatedJobs {
			rj := &js.Spec.ReplicatedJobs[i]
			got = append(got, rj.Name)
			if plan.Count(rj) < 1 {
				t.Errorf("replicatedJob %q: %d pods, want at least 1 before the ML policy", rj.Name, plan.Count(rj))
			}
		}
		if !slices.Equal(want, got) {
			t.Errorf("replicatedJobs %v, want the runtime's %v", got, want)
		}
		again, err := mergepatches.Merge(tj, rt)
		if err != nil || !equality.Semantic.DeepEqual(js, again) {
			t.Fatalf("a second Merge of the same inputs differs (err %v)", err)
		}
	})
}
