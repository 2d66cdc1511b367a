package engine

import (
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
)

type testPlan struct{ Image string }

func TestPlans(t *testing.T) {
	k := key("tj")
	type op struct {
		put        bool // Put; otherwise Get
		delete     bool
		uid        types.UID
		generation int64
		plan       *testPlan // Put: the plan; Get: the plan expected, nil for none
		want       bool      // Put: stored; Get: found
	}
	cases := map[string]struct {
		ops     []op
		wantLen int
	}{
		"absent": {
			ops: []op{{uid: "u1", generation: 1, want: false}},
		},
		"same uid and generation": {
			ops: []op{
				{put: true, uid: "u1", generation: 1, plan: &testPlan{"v1"}, want: true},
				{uid: "u1", generation: 1, plan: &testPlan{"v1"}, want: true},
			},
			wantLen: 1,
		},
		"newer generation makes it stale": {
			ops: []op{
				{put: true, uid: "u1", generation: 1, plan: &testPlan{"v1"}, want: true},
				{uid: "u1", generation: 2, want: false},
			},
			wantLen: 1,
		},
		"re-created TrainJob (other uid) makes it stale": {
			ops: []op{
				{put: true, uid: "u1", generation: 1, plan: &testPlan{"v1"}, want: true},
				{uid: "u2", generation: 1, want: false},
			},
			wantLen: 1,
		},
		"newer generation replaces": {
			ops: []op{
				{put: true, uid: "u1", generation: 1, plan: &testPlan{"v1"}, want: true},
				{put: true, uid: "u1", generation: 2, plan: &testPlan{"v2"}, want: true},
				{uid: "u1", generation: 2, plan: &testPlan{"v2"}, want: true},
				{uid: "u1", generation: 1, want: false},
			},
			wantLen: 1,
		},
		"same generation replaces": {
			ops: []op{
				{put: true, uid: "u1", generation: 3, plan: &testPlan{"a"}, want: true},
				{put: true, uid: "u1", generation: 3, plan: &testPlan{"b"}, want: true},
				{uid: "u1", generation: 3, plan: &testPlan{"b"}, want: true},
			},
			wantLen: 1,
		},
		"a slow stage cannot overwrite a newer generation": {
			ops: []op{
				{put: true, uid: "u1", generation: 2, plan: &testPlan{"v2"}, want: true},
				{put: true, uid: "u1", generation: 1, plan: &testPlan{"v1"}, want: false},
				{uid: "u1", generation: 2, plan: &testPlan{"v2"}, want: true},
			},
			wantLen: 1,
		},
		"another uid replaces whatever its generation": {
			ops: []op{
				{put: true, uid: "u1", generation: 5, plan: &testPlan{"old"}, want: true},
				{put: true, uid: "u2", generation: 1, plan: &testPlan{"new"}, want: true},
				{uid: "u2", generation: 1, plan: &testPlan{"new"}, want: true},
			},
			wantLen: 1,
		},
		"delete": {
			ops: []op{
				{put: true, uid: "u1", generation: 1, plan: &testPlan{"v1"}, want: true},
				{delete: true},
				{uid: "u1", generation: 1, want: false},
			},
			wantLen: 0,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var plans Plans[testPlan]
			for i, o := range tc.ops {
				switch {
				case o.delete:
					plans.Delete(k)
				case o.put:
					if got := plans.Put(k, o.uid, o.generation, o.plan); got != o.want {
						t.Errorf("op %d: Put(%s, %d) = %v, want %v", i, o.uid, o.generation, got, o.want)
					}
				default:
					got, ok := plans.Get(k, o.uid, o.generation)
					if ok != o.want {
						t.Errorf("op %d: Get(%s, %d) found = %v, want %v", i, o.uid, o.generation, ok, o.want)
					}
					if diff := cmp.Diff(o.plan, got); diff != "" {
						t.Errorf("op %d: Get(%s, %d) plan (-want,+got):\n%s", i, o.uid, o.generation, diff)
					}
				}
			}
			if got := plans.Len(); got != tc.wantLen {
				t.Errorf("Len() = %d, want %d", got, tc.wantLen)
			}
		})
	}
}

// TestPlansConcurrent is for the race detector: writers, readers and
// deleters on overlapping keys. Every plan read must match its stamp.
func TestPlansConcurrent(t *testing.T) {
	var plans Plans[testPlan]
	const goroutines, rounds, keys = 8, 500, 16
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range rounds {
				k := key(fmt.Sprint("tj-", i%keys))
				uid := types.UID(fmt.Sprint("uid-", g%2))
				gen := int64(i % 3)
				switch i % 4 {
				case 0, 1:
					plans.Put(k, uid, gen, &testPlan{Image: fmt.Sprint(uid, "/", gen)})
				case 2:
					if p, ok := plans.Get(k, uid, gen); ok && p.Image != fmt.Sprint(uid, "/", gen) {
						t.Errorf("Get(%v, %s, %d) returned a plan stamped %q", k, uid, gen, p.Image)
					}
				case 3:
					if i%8 == 3 {
						plans.Delete(k)
					}
					_ = plans.Len()
				}
			}
		})
	}
	wg.Wait()
	if n := plans.Len(); n > keys {
		t.Errorf("Len() = %d, want at most %d", n, keys)
	}
}
