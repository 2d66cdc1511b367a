package bench

// The writes mode's result (result.json) and report (report.md): each method's phases,
// their medians over the rounds, and the ownership checks.

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// WritesResult is result.json of the writes mode.
type WritesResult struct {
	StartedAt   time.Time `json:"started_at"`
	CPUs        int       `json:"cpus"`
	N           int       `json:"n"`
	Rounds      int       `json:"rounds"`
	Parallelism int       `json:"parallelism"`
	// Runs is every method's phases, in the order they ran.
	Runs []WritesRun `json:"runs"`
	// Summary is per method and phase ("apply/first"), the median over rounds.
	Summary map[string]WritesPhase `json:"summary"`
	// Ownership is, per method, what the later-update checks found (ownershipChecks).
	Ownership map[string][]OwnershipCheck `json:"ownership"`
}

// WritesRun is one method in one round.
type WritesRun struct {
	Method string      `json:"method"`
	Round  int         `json:"round"`
	First  WritesPhase `json:"first"`
	Change WritesPhase `json:"change"`
}

// WritesPhase is N writes of one kind.
type WritesPhase struct {
	Writes int `json:"writes"`
	Errors int `json:"errors"`
	// Seconds is the phase's wall time; LatencyP50/P99 (s) are per request, with
	// Parallelism in flight.
	Seconds    float64 `json:"seconds"`
	LatencyP50 float64 `json:"latency_p50"`
	LatencyP99 float64 `json:"latency_p99"`
	// APIServerCPUPer1000 and EtcdCPUPer1000 are CPU seconds per 1,000 writes, from
	// /proc/<pid>/stat.
	APIServerCPUPer1000 float64 `json:"apiserver_cpu_per_1000"`
	EtcdCPUPer1000      float64 `json:"etcd_cpu_per_1000"`
	// WatchEvents is the watch events a watch of the namespace received per write.
	WatchEvents float64 `json:"watch_events_per_write"`
	// ObjectBytes and ManagedFieldsBytes are the mean JSON size of a stored JobSet
	// (read back after the phase) and of its metadata.managedFields.
	ObjectBytes        int `json:"object_bytes"`
	ManagedFieldsBytes int `json:"managed_fields_bytes"`
	// Managers lists the managedFields entries of one JobSet, "manager/operation".
	Managers []string `json:"managers"`
}

// OwnershipCheck is one property of the later-update path.
type OwnershipCheck struct {
	Check string `json:"check"`
	Holds bool   `json:"holds"`
	// Detail says what was found when it does not hold.
	Detail string `json:"detail,omitempty"`
}

// summarize returns, per method and phase, the median of each figure over the rounds.
func summarize(runs []WritesRun) map[string]WritesPhase {
	out := map[string]WritesPhase{}
	for _, method := range WriteMethods {
		for _, phase := range []string{"first", "change"} {
			var ps []WritesPhase
			for _, r := range runs {
				if r.Method == method {
					ps = append(ps, map[string]WritesPhase{"first": r.First, "change": r.Change}[phase])
				}
			}
			if len(ps) == 0 {
				continue
			}
			med := func(f func(WritesPhase) float64) float64 {
				xs := make([]float64, len(ps))
				for i, p := range ps {
					xs[i] = f(p)
				}
				sort.Float64s(xs)
				return xs[len(xs)/2]
			}
			last := ps[len(ps)-1]
			out[method+"/"+phase] = WritesPhase{
				Writes:              last.Writes,
				Seconds:             med(func(p WritesPhase) float64 { return p.Seconds }),
				LatencyP50:          med(func(p WritesPhase) float64 { return p.LatencyP50 }),
				LatencyP99:          med(func(p WritesPhase) float64 { return p.LatencyP99 }),
				APIServerCPUPer1000: med(func(p WritesPhase) float64 { return p.APIServerCPUPer1000 }),
				EtcdCPUPer1000:      med(func(p WritesPhase) float64 { return p.EtcdCPUPer1000 }),
				WatchEvents:         med(func(p WritesPhase) float64 { return p.WatchEvents }),
				ObjectBytes:         last.ObjectBytes,
				ManagedFieldsBytes:  last.ManagedFieldsBytes,
				Managers:            last.Managers,
			}
		}
	}
	return out
}

// WritesReport renders res as markdown.
func WritesReport(res *WritesResult) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("# JobSet writes: what each costs the API server (issue 17)\n\n")
	w("%s · %d CPUs · %d JobSets per method and round, %d rounds interleaved, %d writes in flight; medians over rounds\n\n",
		res.StartedAt.Format(time.RFC3339), res.CPUs, res.N, res.Rounds, res.Parallelism)
	w("| method | phase | wall s | p50 ms | p99 ms | apiserver CPU s/1000 | etcd CPU s/1000 | watch events/write | object bytes | managedFields bytes | managers |\n")
	w("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, method := range WriteMethods {
		for _, phase := range []string{"first", "change"} {
			p, ok := res.Summary[method+"/"+phase]
			if !ok {
				continue
			}
			w("| %s | %s | %.2f | %.1f | %.1f | %.2f | %.2f | %.2f | %d | %d | %s |\n", method, phase, p.Seconds,
				p.LatencyP50*1000, p.LatencyP99*1000, p.APIServerCPUPer1000, p.EtcdCPUPer1000, p.WatchEvents,
				p.ObjectBytes, p.ManagedFieldsBytes, strings.Join(p.Managers, "; "))
		}
	}
	w("\n## Every round\n\n| round | method | first: wall s, apiserver s/1000 | change: wall s, apiserver s/1000 |\n|---|---|---|---|\n")
	for _, r := range res.Runs {
		w("| %d | %s | %.2f, %.2f | %.2f, %.2f |\n", r.Round, r.Method, r.First.Seconds, r.First.APIServerCPUPer1000, r.Change.Seconds, r.Change.APIServerCPUPer1000)
	}
	w("\n## Later updates: field ownership\n\n| check |")
	for _, m := range WriteMethods {
		w(" %s |", m)
	}
	w("\n|---|")
	for range WriteMethods {
		w("---|")
	}
	w("\n")
	if len(res.Ownership) > 0 {
		for i, c := range res.Ownership[WriteMethods[0]] {
			w("| %s |", c.Check)
			for _, m := range WriteMethods {
				if i >= len(res.Ownership[m]) {
					w(" – |")
					continue
				}
				got := res.Ownership[m][i]
				if got.Holds {
					w(" yes |")
				} else {
					w(" **no**: %s |", got.Detail)
				}
			}
			w("\n")
		}
	}
	return b.String()
}
