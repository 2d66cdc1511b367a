package app

import (
	"context"
	"fmt"
	"net/http"
	"net/http/pprof"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/informers"
	"github.com/trainyard/trainyard/pkg/metrics"
)

// serverCheck is a readiness check of one of the controller's HTTPS servers (admission,
// progress): ready once it listens (so its caches have synced) with a certificate.
type serverCheck struct {
	name  string
	ready func() bool
}

// healthServer serves /healthz (the process is alive) and /readyz (caches synced and
// every server in servers ready). With leader election, followers are ready too — they
// keep warm caches for a fast failover and serve admission and progress reports — and
// /readyz?verbose reports whether this replica leads. Once stopping is set (SIGTERM),
// /readyz fails, so that a Service's clients stop choosing this replica while it still
// serves (shutdownDelay).
func healthServer(addr string, synced func() bool, servers []serverCheck, leading, stopping *atomic.Bool, leaderElect bool) *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if stopping.Load() {
			http.Error(w, "[-]shutdown: stopping; serving what is in flight for shutdownDelay", http.StatusServiceUnavailable)
			return
		}
		if !synced() {
			http.Error(w, "[-]informers: caches not synced", http.StatusServiceUnavailable)
			return
		}
		for _, s := range servers {
			if !s.ready() {
				http.Error(w, "[-]"+s.name+": not serving yet (caches syncing or no serving certificate)", http.StatusServiceUnavailable)
				return
			}
		}
		if _, verbose := r.URL.Query()["verbose"]; verbose {
			fmt.Fprintln(w, "[+]informers ok")
			for _, s := range servers {
				fmt.Fprintln(w, "[+]"+s.name+" ok")
			}
			switch {
			case !leaderElect:
				fmt.Fprintln(w, "[+]leader-election disabled")
			case leading.Load():
				fmt.Fprintln(w, "[+]leader-election leading")
			default:
				fmt.Fprintln(w, "[+]leader-election following")
			}
		}
		fmt.Fprintln(w, "ok")
	})
	return &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
}

func shutdownServers(logger klog.Logger, servers []*http.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, srv := range servers {
		if err := srv.Shutdown(ctx); err != nil {
			logger.Error(err, "Shutting down HTTP server", "address", srv.Addr)
		}
	}
}

// phaseCounter counts cached TrainJobs by phase for trainyard_trainjobs.
func phaseCounter(inf *informers.Informers) func() map[string]int {
	return func() map[string]int {
		jobs, err := inf.TrainJobLister.List(labels.Everything())
		if err != nil {
			return nil
		}
		counts := make(map[string]int, 6)
		for _, tj := range jobs {
			counts[phaseOf(tj)]++
		}
		return counts
	}
}

func phaseOf(tj *trainer.TrainJob) string {
	conds := tj.Status.Conditions
	switch {
	case meta.IsStatusConditionTrue(conds, trainer.TrainJobComplete):
		return metrics.PhaseComplete
	case meta.IsStatusConditionTrue(conds, trainer.TrainJobFailed):
		return metrics.PhaseFailed
	case meta.IsStatusConditionTrue(conds, trainer.TrainJobSuspended):
		return metrics.PhaseSuspended
	case len(tj.Status.JobsStatus) > 0:
		return metrics.PhaseRunning
	}
	return metrics.PhasePending
}

// registerProfiling serves net/http/pprof's handlers under /debug/pprof/ on mux
// (not on http.DefaultServeMux, which nothing here serves).
func registerProfiling(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}
