// Command bench is Trainyard's scale benchmark (issue 9) on the local control
// plane: it starts a cluster of its own, creates N TrainJobs on the upstream
// torch-distributed runtime as one burst, and writes result.json, report.md
// and plot.svg under --out (default bench/results/<mode>-n<N>).
//
//	go run ./cmd/bench --mode=admission --n=2000
//	go run ./cmd/bench --mode=lifecycle --n=500
//	go run ./cmd/bench --mode=admission --n=10000 --baseline=../bench/results/admission-n2000/result.json
//	go run ./cmd/bench --mode=progress --n=1000 --duration=60s --admission-n=500
//	go run ./cmd/bench --mode=peer --sizes=2000,10000 --lifecycle-n=500 --rounds=2
//	go run ./cmd/bench --mode=peer --kueue-n=2000 --quota=200 --lifecycle-n=-1 --rounds=1
//	go run ./cmd/bench --mode=writes --n=500 --rounds=3
//	go run ./cmd/bench --mode=kueue --n=2000 --quota=200
//	go run ./cmd/bench --mode=ttl --n=50000 --timeout=60m
//
// `make bench` runs the admission and lifecycle modes with the defaults;
// `make bench-progress` the progress mode (issue 14); `make bench-peer` the
// peer mode (issue 17): the admission and lifecycle loads against Trainyard and
// upstream Kubeflow Trainer v2.3.0 in turn, on one control plane, into
// bench/results/peer-<date>; `make bench-peer-kueue` the peer mode's Kueue load
// alone (issue 27), into bench/results/peer-kueue-<date>; `make bench-kueue` the kueue mode (issue 16): N
// TrainJobs through real Kueue with quota for some at a time, into
// bench/results/kueue-n<N>-<date>; `make bench-ttl` the ttl mode (issue 40): N
// finished TrainJobs given ttlSecondsAfterFinished, the controller's memory and CPU
// with and without them pending, and the deletions' lateness, into
// bench/results/ttl-n<N>-<date>.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/trainyard/trainyard/e2e/bench"
	"github.com/trainyard/trainyard/e2e/cluster"
)

// options is the command line: the run's Config, peer mode's, and the flags that
// are neither.
type options struct {
	cfg           bench.Config
	peer          bench.PeerConfig
	numNodes      int
	out, baseline string
	qps           float64
	burst         int
	tolerance     float64
	// set holds the names of the flags given.
	set map[string]bool
}

func main() {
	o := parseFlags()
	root, err := cluster.FindRepoRoot()
	if err != nil {
		fail(err)
	}
	o.cfg.RepoRoot = root
	if o.out == "" {
		o.out = filepath.Join(root, "bench", "results", fmt.Sprintf("%s-n%d", o.cfg.Mode, o.cfg.N))
		if o.cfg.Mode == bench.ModeKueue || o.cfg.Mode == bench.ModeTTL {
			o.out += "-" + time.Now().UTC().Format("2006-01-02")
		}
	}
	o.cfg.OutDir = o.out
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch o.cfg.Mode {
	case bench.ModeWrites:
		runWrites(ctx, o, root)
	case bench.ModePeer:
		runPeer(ctx, o, root)
	default:
		run(ctx, o)
	}
}

// parseFlags parses the command line, with progress mode's defaults for --n and
// --num-nodes when they are not given.
func parseFlags() *options {
	o := &options{cfg: bench.Config{Progress: os.Stderr}}
	flag.StringVar(&o.cfg.Mode, "mode", bench.ModeAdmission, `"admission" (TrainJob → JobSet, JobSet controller off), "lifecycle" (to Complete, everything on) "progress" (pods Running and reporting their progress, issue 14) "peer" (Trainyard and upstream side by side, issue 17) "writes" (what each way of writing a JobSet costs the API server, no controller; issue 17), "kueue" (through real Kueue with a quota, to Complete; issue 16) or "ttl" (N finished TrainJobs given a ttlSecondsAfterFinished: the controller with and without the TTLs pending, and each deletion's lateness; issue 40)`)
	flag.IntVar(&o.cfg.N, "n", 2000, "TrainJobs in the burst; progress mode: TrainJobs reporting (default there 1000); writes mode: JobSets per method and round (default there 500)")
	flag.IntVar(&o.cfg.Parallelism, "parallelism", 32, "creates in flight, for the burst and the raw-create limit")
	flag.IntVar(&o.numNodes, "num-nodes", 2, "spec.trainer.numNodes of each TrainJob (default in progress mode 4: pods per TrainJob)")
	flag.DurationVar(&o.cfg.ReportInterval, "report-interval", time.Second, "progress mode: how often every pod reports")
	flag.DurationVar(&o.cfg.ReportDuration, "duration", time.Minute, "progress mode: how long the pods report")
	flag.IntVar(&o.cfg.AdmissionN, "admission-n", 500, "progress mode: TrainJobs of each admission burst, without and with reports")
	flag.IntVar(&o.cfg.Namespaces, "namespaces", 10, "progress mode: namespaces the reporting TrainJobs are spread over (the write limits are per namespace and per replica)")
	flag.Float64Var(&o.qps, "controller-qps", 2000, "the controller's --kube-api-qps")
	flag.IntVar(&o.burst, "controller-burst", 4000, "the controller's --kube-api-burst")
	flag.DurationVar(&o.cfg.Timeout, "timeout", 20*time.Minute, "how long to wait for every admission or completion")
	flag.DurationVar(&o.cfg.CPUProfile, "cpu-profile", 0, "take a CPU profile of the controller this long from the burst's start into <out>/cpu.pprof (0: none)")
	flag.Func("controller-arg", "an extra controller flag, e.g. --controller-arg=--stage-workers=status=32 (repeatable)", func(v string) error {
		o.cfg.ControllerArgs = append(o.cfg.ControllerArgs, v)
		return nil
	})
	flag.IntVar(&o.cfg.Quota, "quota", bench.DefaultKueueQuota, "kueue mode: the ClusterQueue's quota, in TrainJobs at a time (numNodes pods each)")
	flag.DurationVar(&o.cfg.IdleWindow, "idle-window", bench.DefaultTTLIdleWindow, "ttl mode: how long the idle controller is sampled, without and with the TTLs pending")
	flag.Func("controller-env", "an extra environment variable of the controller process only, e.g. --controller-env=GOMEMLIMIT=64MiB (repeatable)", func(v string) error {
		if !strings.Contains(v, "=") {
			return fmt.Errorf("%q is not NAME=value", v)
		}
		o.cfg.ControllerEnv = append(o.cfg.ControllerEnv, v)
		return nil
	})
	flag.StringVar(&o.out, "out", "", "output folder (default <repo>/bench/results/<mode>-n<N>)")
	flag.StringVar(&o.baseline, "baseline", "", "a result.json to compare admission throughput with (issue 9: 10,000 within 20% of 2,000)")
	flag.Float64Var(&o.tolerance, "baseline-tolerance", 0.2, "how far below the baseline's throughput still meets the target (0.2: within 20%)")
	flag.BoolVar(&o.cfg.Restart, "restart", false, "admission mode: once the controller is idle, stop it and start it again with every TrainJob and JobSet present; time to ready, writes (target 0), peak RSS during the relist (issue 17)")
	flag.BoolVar(&o.cfg.Webhooks, "webhooks", false, "register the controller's admission webhooks, so the burst's creates are reviewed (issue 13)")
	flag.Func("sizes", "peer mode: the admission loads, comma-separated (default 2000,10000)", func(v string) error {
		for f := range strings.SplitSeq(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				return err
			}
			o.peer.Sizes = append(o.peer.Sizes, n)
		}
		return nil
	})
	flag.IntVar(&o.peer.LifecycleN, "lifecycle-n", bench.DefaultPeerLifecycleN, "peer mode: TrainJobs of the lifecycle load (negative: none)")
	flag.IntVar(&o.peer.Rounds, "rounds", bench.DefaultPeerRounds, "peer mode: runs of each load per controller, alternating (2: Trainyard, upstream, Trainyard, upstream); writes mode: runs of each method, interleaved (default there 3)")
	flag.StringVar(&o.peer.Note, "note", "", "peer mode: a note at the head of the report, e.g. that this is a smoke run")
	flag.IntVar(&o.peer.KueueN, "kueue-n", 0, "peer mode: TrainJobs of the Kueue load, through real Kueue with --quota of them at a time, to Complete (issue 27; 0: none); with no --sizes, the only load besides --lifecycle-n")
	flag.Parse()
	o.set = map[string]bool{}
	flag.Visit(func(f *flag.Flag) { o.set[f.Name] = true })
	if o.cfg.Mode == bench.ModeProgress {
		if !o.set["n"] {
			o.cfg.N = 1000
		}
		if !o.set["num-nodes"] {
			o.numNodes = 4
		}
	}
	o.cfg.NumNodes, o.cfg.QPS, o.cfg.Burst = int32(o.numNodes), float32(o.qps), int32(o.burst)
	return o
}

// runWrites runs the writes mode into bench/results/writes-<date> unless --out is
// given, 500 JobSets per method and 3 rounds unless --n and --rounds are, and prints
// its report.
func runWrites(ctx context.Context, o *options, root string) {
	out := o.out
	if !o.set["out"] {
		out = filepath.Join(root, "bench", "results", "writes-"+time.Now().UTC().Format("2006-01-02"))
	}
	wc := bench.WritesConfig{RepoRoot: root, OutDir: out, N: o.cfg.N, Rounds: o.peer.Rounds, Parallelism: o.cfg.Parallelism, Progress: os.Stderr}
	if !o.set["n"] {
		wc.N = 500
	}
	if !o.set["rounds"] {
		wc.Rounds = 3
	}
	res, err := bench.RunWrites(ctx, wc)
	if err != nil {
		fail(err)
	}
	fmt.Print(bench.WritesReport(res))
	fmt.Printf("\nresults in %s\n", out)
}

// runPeer runs peer mode into bench/results/peer-<date> unless --out is given, and
// prints its report.
func runPeer(ctx context.Context, o *options, root string) {
	cfg := o.cfg
	if !o.set["out"] {
		name := "peer-"
		if o.peer.KueueN > 0 && len(o.peer.Sizes) == 0 && o.peer.LifecycleN < 0 {
			name = "peer-kueue-"
		}
		cfg.OutDir = filepath.Join(root, "bench", "results", name+time.Now().UTC().Format("2006-01-02"))
	}
	peer := o.peer
	peer.Config = cfg
	res, err := bench.RunPeer(ctx, peer)
	if err != nil {
		fail(err)
	}
	fmt.Print(bench.PeerReport(res))
	fmt.Printf("\nresults in %s\n", cfg.OutDir)
}

// run runs the admission, lifecycle, progress, kueue or ttl mode, compares its throughput
// with --baseline's (rewriting result.json and report.md), and prints its report.
func run(ctx context.Context, o *options) {
	res, err := bench.Run(ctx, o.cfg)
	if err != nil {
		fail(err)
	}
	if o.baseline != "" {
		base, err := bench.ReadResult(o.baseline)
		if err != nil {
			fail(err)
		}
		bench.CompareThroughput(res, base, o.tolerance)
		if err := bench.WriteOutputs(o.out, res); err != nil {
			fail(err)
		}
	}
	fmt.Print(bench.Report(res))
	fmt.Printf("\nresults in %s\n", o.out)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}
