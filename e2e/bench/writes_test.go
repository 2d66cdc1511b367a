package bench

import (
	"strings"
	"testing"
)

func TestWritesSummaryTakesTheMedianPerMethodAndPhase(t *testing.T) {
	phase := func(seconds, cpu float64) WritesPhase {
		return WritesPhase{Writes: 500, Seconds: seconds, APIServerCPUPer1000: cpu, WatchEvents: 1, ObjectBytes: 4000, ManagedFieldsBytes: 1500}
	}
	runs := []WritesRun{
		{Method: MethodApply, Round: 1, First: phase(9, 7), Change: phase(1, 1)},
		{Method: MethodCreate, Round: 1, First: phase(100, 100), Change: phase(2, 2)},
		{Method: MethodApply, Round: 2, First: phase(3, 5), Change: phase(2, 2)},
		{Method: MethodApply, Round: 3, First: phase(4, 6), Change: phase(3, 3)},
	}
	got := summarize(runs)
	if a := got[MethodApply+"/first"]; a.Seconds != 4 || a.APIServerCPUPer1000 != 6 {
		t.Errorf("apply/first = %+v, want the medians over its three rounds: 4 s, 6 s/1000", a)
	}
	if c := got[MethodCreate+"/change"]; c.Seconds != 2 {
		t.Errorf("create/change = %+v, want its one round's 2 s", c)
	}
	if _, ok := got[MethodCreateThenApply+"/first"]; ok {
		t.Errorf("a method that did not run has a summary: %+v", got)
	}
}

func TestWritesReportShowsOwnershipPerMethod(t *testing.T) {
	res := &WritesResult{
		N: 500, Rounds: 1, Parallelism: 32,
		Summary: map[string]WritesPhase{MethodApply + "/first": {Seconds: 2, LatencyP50: 0.01, ObjectBytes: 4000, ManagedFieldsBytes: 1500, Managers: []string{"Apply by trainyard"}}},
		Ownership: map[string][]OwnershipCheck{
			MethodApply:           {{Check: "a label Trainyard drops is removed", Holds: true}},
			MethodCreate:          {{Check: "a label Trainyard drops is removed", Holds: true}},
			MethodCreateThenApply: {{Check: "a label Trainyard drops is removed", Detail: "label still set"}},
		},
	}
	report := WritesReport(res)
	for _, s := range []string{
		"| apply | first | 2.00 | 10.0 |",
		"| 4000 | 1500 | Apply by trainyard |",
		"| a label Trainyard drops is removed | yes | yes | **no**: label still set | – |",
	} {
		if !strings.Contains(report, s) {
			t.Errorf("report lacks %q:\n%s", s, report)
		}
	}
}
