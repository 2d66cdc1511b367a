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
	trainerlisters "github.com/trainyard/trainyard/pkg/clientset/listers/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/httpserver"
	"github.com/trainyard/trainyard/pkg/metrics"
	"github.com/trainyard/trainyard/pkg/trainjob"
)

// serverCheck is a readiness check of one of the controller's HTTPS servers (admission,
// progress): ready once it listens (so its caches have synced) with a certificate.
type serverCheck struct {
	name  string
	ready func() bool
}

// The health probe server's bounds (package httpserver). Its clients are the kubelet's
// probes: one request per probe on a connection of its own (the kubelet's prober disables
// keep-alive), sent at once with a header of a few hundred bytes (Host, User-Agent
// kube-probe, Accept, a probe's httpHeaders), answered by a handler that reads flags and
// does not block, within the probe's timeoutSeconds (1 s by default, 5 s in the chart,
// failureThreshold 3). But the port is reachable from any pod (the chart's NetworkPolicy
// admits any source: the kubelet dials from its node's address), so a client must not be able to hold what the
// probes need: memory, file descriptors, or every accepted slot for longer than a probe
// waits.
const (
	// probeMaxConns is how many connections are open at once (~30 KiB each with
	// probeMaxHeaderBytes: goroutine, buffers, header: ~2 MiB in all, and 64 file
	// descriptors); more wait in the kernel's accept queue, in order. The kubelet needs
	// one a probe (liveness, readiness, startup).
	probeMaxConns = 64
	// probeMaxKeepAliveConns is how many are kept open between requests (a human's or a
	// script's client reusing its connection); beyond it every answer closes its
	// connection, so that once the cap is reached each held slot frees at its next
	// answer.
	probeMaxKeepAliveConns = 8
	// probeMaxHeaderBytes bounds a request's header (net/http adds 4 KiB of slack: a
	// header beyond ~12 KiB is answered 431); a probe's is a few hundred bytes.
	probeMaxHeaderBytes = 8 << 10
	// probeReadTimeout bounds a request's header and whole request (probes have no
	// body) from the connection's first read: a silent client, one trickling its
	// header, or one announcing a body it never sends, is cut after it.
	probeReadTimeout = 500 * time.Millisecond
	// probeIdleTimeout is how long a kept-alive connection waits for its next request.
	probeIdleTimeout = 500 * time.Millisecond
	// probeWriteTimeout bounds a request from its header to its answer: a few hundred
	// bytes, which fit in the socket's buffer even when the client reads nothing.
	probeWriteTimeout = time.Second
)

// probeLimits are the health server's bounds; the durations are why a probe gets
// through while probeMaxConns connections are held by hostile clients.
//
// A slot is held without an answer for at most probeReadTimeout (500 ms) by a client
// that sends slowly or nothing (header or body), and idle for at most probeIdleTimeout
// (500 ms) by one kept alive; once more than probeMaxKeepAliveConns are open, every
// answer closes its connection. So every slot but the ≤ probeMaxKeepAliveConns kept
// alive (which, idle then trickling, last ≤ 1 s) frees within 500 ms of its taking, and
// the kernel's accept queue hands it to the oldest waiting connection. A probe that
// dials while the cap is held is answered within 500 ms (+ the handler's microseconds)
// when fewer than probeMaxConns connections wait ahead of it: within the kubelet's
// default 1 s. The cap and timeouts cannot do better than the queue's order: a client
// keeping Q more connections queued ahead of the probe (reconnecting as soon as it is
// cut) delays it ~(Q/probeMaxConns + 1) × 500 ms — beyond 1 s from Q ≥ 64, beyond the
// chart's 5 s from Q ≥ ~580 — and once the accept queue (somaxconn) is full the
// kernel drops the probe's SYN, which the kubelet's kernel retransmits only after 1 s.
// Against such a flood the bound is the NetworkPolicy (an ipBlock of the nodes'
// addresses), not this server; here it costs the process ≤ 2 MiB and 64 descriptors
// instead of 1 MiB a connection, and the attacker a steady churn of connections.
//
// The timeouts are short for a kubelet, not for a process: the header is in the
// socket's buffer when the connection is accepted, and 500 ms spans five CFS periods
// of a CPU-throttled container.
var probeLimits = httpserver.Limits{
	ReadHeaderTimeout: probeReadTimeout, ReadTimeout: probeReadTimeout, WriteTimeout: probeWriteTimeout,
	IdleTimeout: probeIdleTimeout, MaxHeaderBytes: probeMaxHeaderBytes,
	MaxConns: probeMaxConns, MaxKeepAliveConns: probeMaxKeepAliveConns,
}

// healthServer serves /healthz (the process is alive) and /readyz (caches synced and
// every server in servers ready) on addr within probeLimits. With leader election,
// followers are ready too — they keep warm caches for a fast failover and serve
// admission and progress reports — and /readyz?verbose reports whether this replica
// leads. Once stopping is set (SIGTERM), /readyz fails, so that a Service's clients stop
// choosing this replica while it still serves (shutdownDelay). Errors: probeLimits
// rejected by httpserver.New.
func healthServer(addr string, synced func() bool, servers []serverCheck, leading, stopping *atomic.Bool, leaderElect bool) (*httpserver.Server, error) {
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
	srv, err := httpserver.New(mux, addr, nil, probeLimits)
	if err != nil {
		return nil, fmt.Errorf("health probe server: %w", err)
	}
	return srv, nil
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

// trainJobCounter counts cached TrainJobs by runtime and phase, and lists the cached
// runtimes, for trainyard_trainjobs and trainyard_trainjobs_by_runtime. A cache that
// cannot be listed exports nothing rather than a wrong zero.
func trainJobCounter(trainJobs trainerlisters.TrainJobLister, runtimes trainerlisters.TrainingRuntimeLister,
	clusterRuntimes trainerlisters.ClusterTrainingRuntimeLister) func() *metrics.TrainJobCounts {
	return func() *metrics.TrainJobCounts {
		jobs, err := trainJobs.List(labels.Everything())
		if err != nil {
			return nil
		}
		rts, err := runtimes.List(labels.Everything())
		if err != nil {
			return nil
		}
		crts, err := clusterRuntimes.List(labels.Everything())
		if err != nil {
			return nil
		}
		counts := &metrics.TrainJobCounts{
			ByRuntime: map[metrics.Runtime]map[string]int{},
			Runtimes:  make([]metrics.Runtime, 0, len(rts)+len(crts)),
		}
		for _, rt := range rts {
			counts.Runtimes = append(counts.Runtimes, metrics.Runtime{Kind: metrics.RuntimeKindTrainingRuntime, Name: rt.Name})
		}
		for _, rt := range crts {
			counts.Runtimes = append(counts.Runtimes, metrics.Runtime{Kind: metrics.RuntimeKindClusterTrainingRuntime, Name: rt.Name})
		}
		for _, tj := range jobs {
			// An unsupported kind or group counts as RuntimeKindOther.
			kind, _ := trainjob.RuntimeKind(tj)
			rt := metrics.Runtime{Kind: kind, Name: tj.Spec.RuntimeRef.Name}
			if counts.ByRuntime[rt] == nil {
				counts.ByRuntime[rt] = map[string]int{}
			}
			counts.ByRuntime[rt][phaseOf(tj)]++
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
