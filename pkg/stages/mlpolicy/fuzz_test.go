package mlpolicy_test

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/trainyard/trainyard/pkg/progress/wire"
	"github.com/trainyard/trainyard/pkg/stages"
	"github.com/trainyard/trainyard/pkg/stages/mergepatches"
	"github.com/trainyard/trainyard/pkg/stages/mlpolicy"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/stages/plan/plantest"
	"github.com/trainyard/trainyard/pkg/stages/status"
)

// progressURL is a progress server URL as progress.URLFunc builds them.
func progressURL(namespace, name string) string {
	return "https://trainyard-status.trainyard-system.svc:10443" + wire.Path(namespace, name)
}

// FuzzMLPolicy applies the ML policies to arbitrary runtime + TrainJob pairs (YAML
// documents decoded into the API types), seeded with plantest.FuzzInputs: the pair is
// merged (mergepatches.Merge; pairs that do not merge are FuzzMerge's), then
// mlpolicy.Apply runs over mlpolicy.DefaultPlugins, or, when withProgress is set, over
// stages.Plugins with a progress URL (the TrainerStatus injection of KEP-2779). Apply
// must:
//
//   - leave the TrainJob and the runtime spec as they were;
//   - fail only with an input error (plan.IsInputError), never one the stage retries
//     forever;
//   - else leave a plan the status stage can apply (plantest.CheckPlan: the JobSet's
//     counts in sync, owner references, side objects owned and unique, the apply
//     request encodes), and the same plan (status.DesiredOf's hash) when run again on
//     a fresh merge.
func FuzzMLPolicy(f *testing.F) {
	for i, in := range plantest.FuzzInputs(f) {
		f.Add(in.Runtime, in.TrainJob, i%2 == 1)
	}
	f.Fuzz(func(t *testing.T, runtime, trainJob []byte, withProgress bool) {
		tj, rt, ok := plantest.DecodeFuzzInput(runtime, trainJob)
		if !ok {
			return
		}
		plugins := mlpolicy.DefaultPlugins(mlpolicy.SecretNames{})
		if withProgress {
			plugins = stages.Plugins(stages.Options{ProgressURL: progressURL})
		}
		apply := func() (p *plan.Plan, merged bool, err error) {
			js, err := mergepatches.Merge(tj, rt)
			if err != nil {
				return nil, false, nil
			}
			p = &plan.Plan{Runtime: rt, JobSet: js, Stage: 2} // as the merge patches stage leaves it
			return p, true, mlpolicy.Apply(tj, p, plugins)
		}
		tjBefore, specBefore := tj.DeepCopy(), rt.Spec.DeepCopy()
		p, merged, err := apply()
		if !merged {
			return
		}
		if !equality.Semantic.DeepEqual(tj, tjBefore) {
			t.Fatal("Apply modified the TrainJob")
		}
		if !equality.Semantic.DeepEqual(rt.Spec, specBefore) {
			t.Fatal("Apply modified the runtime spec (shared with the informer cache)")
		}
		if err != nil {
			if !plan.IsInputError(err) {
				t.Fatalf("Apply: %v: not an input error, so the stage would retry it forever", err)
			}
			return
		}
		if err := plantest.CheckPlan(tj, p); err != nil {
			t.Fatalf("plan after the ML policy: %v", err)
		}
		again, _, err := apply()
		if err != nil {
			t.Fatalf("a second Apply of the same inputs fails: %v", err)
		}
		d1, err1 := status.DesiredOf(p)
		d2, err2 := status.DesiredOf(again)
		if err1 != nil || err2 != nil {
			t.Fatalf("DesiredOf: %v, %v", err1, err2)
		}
		if d1.Hash != d2.Hash {
			t.Fatalf("a second Apply of the same inputs builds another plan (hash %s, then %s)", d1.Hash, d2.Hash)
		}
	})
}
