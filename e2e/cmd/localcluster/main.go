// Command localcluster builds, starts, inspects and stops Trainyard's local
// Kubernetes control plane (package github.com/trainyard/trainyard/e2e/cluster).
//
//	localcluster build                 build or verify the cached binaries
//	localcluster up [--detach] [flags] start a cluster; without --detach, run until SIGINT/SIGTERM
//	localcluster status                show the recorded cluster and whether it serves
//	localcluster down                  stop the recorded cluster, even if its starter died
//	localcluster tool NAME             build one cached tool alone (promtool, prometheus, helm), print its path
//	localcluster scrape --metrics-address=ADDR
//	                                   have the recorded cluster's Prometheus scrape the controller at ADDR as the chart's ServiceMonitor would
//
// All state lives in --state-dir (default <repo>/_output/cluster): the admin
// kubeconfig, state.json and logs/<component>.log.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/trainyard/trainyard/e2e/cluster"
	ctrlproc "github.com/trainyard/trainyard/e2e/controller"
	"github.com/trainyard/trainyard/e2e/images"
	"github.com/trainyard/trainyard/e2e/monitoring"
)

const usage = `usage: localcluster <build|up|down|status|tool> [flags]

  build    build the pinned binaries into the cache, or reuse them
  up       start a cluster; stays in the foreground until interrupted, or
           returns once it is ready with --detach
  status   print the recorded cluster, its processes and its health
  down     stop the recorded cluster and remove its data; works after a crash
  tool     build one tool of the cache alone (promtool, prometheus, helm) and
           print the path of its binary
  scrape   have the recorded cluster's Prometheus (up --prometheus) scrape the
           controller process as the chart's ServiceMonitor would, with its rules

Run "localcluster <command> -h" for the flags of a command.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "build":
		err = runBuild(ctx, args)
	case "up":
		err = runUp(ctx, args)
	case "down":
		err = runDown(args)
	case "tool":
		err = runTool(ctx, args)
	case "scrape":
		err = runScrape(ctx, args)
	case "status":
		err = runStatus(ctx, args)
	case "-h", "--help", "help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "localcluster:", err)
		os.Exit(1)
	}
}

// common holds the flags every command has.
type common struct {
	stateDir, logDir, cacheDir, kubeVersion string
	kueue, realNode, routedServices, helm   bool
	prometheus                              bool
}

func (c *common) register(flags *flag.FlagSet) {
	flags.StringVar(&c.stateDir, "state-dir", "", "folder of the kubeconfig, state.json and logs (default <repo>/"+cluster.DefaultStateDir+")")
	flags.StringVar(&c.logDir, "log-dir", "", "folder of the component logs (default <state-dir>/logs)")
	flags.StringVar(&c.cacheDir, "cache-dir", "", "binary cache root (default $"+cluster.EnvCacheDir+" or $HOME/.cache/trainyard)")
	flags.StringVar(&c.kubeVersion, "kube-version", cluster.DefaultKubeVersion,
		"Kubernetes minor version to build (build) or run (up): "+cluster.KubeVersion136+" or "+cluster.KubeVersion137)
	flags.BoolVar(&c.kueue, "kueue", false, "also build (build) or run (up) the Kueue controller manager, its CRDs and webhooks, with the TrainJob integration")
	flags.BoolVar(&c.realNode, "real-node", false, "also build (build) or run (up) a real node: kubelet, containerd, runc, CNI and CoreDNS, with the runtimes' images "+
		"served on 127.0.0.1 (needs root and "+strings.Join(cluster.RealNodeHostPackages, ", ")+"; the fake nodes are then tainted "+cluster.TaintFakeNode.Key+")")
	flags.BoolVar(&c.helm, "helm", false, "(build) also build the helm CLI (v3.22.0) the e2e Helm leg installs the chart with")
	flags.BoolVar(&c.prometheus, "prometheus", false, "also build (build) or run (up) Prometheus (3.16.0) and promtool, scraping nothing until configured")
	flags.BoolVar(&c.routedServices, "routed-services", false, "with --real-node (up): route Services as a real cluster does, kube-proxy in nftables mode on the real node's bridge, "+
		"the API server reachable from pods at "+cluster.KubernetesServiceIP+" (needs "+strings.Join(cluster.RoutedServicesHostPackages, ", ")+"; one such cluster per machine)")
}

func (c *common) options() (cluster.Options, error) {
	opts := cluster.Options{
		StateDir: c.stateDir, LogDir: c.logDir,
		Build:          cluster.BuildOptions{CacheDir: c.cacheDir, Kueue: c.kueue, KubeVersion: c.kubeVersion, RealNode: c.realNode, Helm: c.helm, Prometheus: c.prometheus},
		Prometheus:     c.prometheus,
		Kueue:          c.kueue,
		RealNode:       c.realNode,
		RoutedServices: c.routedServices,
		Images:         images.Publisher(images.Options{CacheDir: c.cacheDir}),
		KubeVersion:    c.kubeVersion,
		Progress:       os.Stderr,
	}
	if opts.StateDir == "" {
		root, err := cluster.FindRepoRoot()
		if err != nil {
			return opts, err
		}
		opts.StateDir = filepath.Join(root, cluster.DefaultStateDir)
	}
	return opts, nil
}

func runBuild(ctx context.Context, args []string) error {
	var c common
	flags := flag.NewFlagSet("build", flag.ExitOnError)
	c.register(flags)
	_ = flags.Parse(args)
	opts, err := c.options()
	if err != nil {
		return err
	}
	start := time.Now()
	opts.Build.Progress = os.Stderr
	if _, err := cluster.BuildAll(ctx, opts); err != nil {
		return err
	}
	what := "binaries"
	if opts.RealNode {
		what = "binaries and images"
	}
	fmt.Fprintf(os.Stderr, "%s ready in %s (%s CPU, builds included)\n", what, time.Since(start).Round(100*time.Millisecond), cpuUsed().Round(time.Second))
	return nil
}

// cpuUsed is the user and system CPU time of this process and of every child
// it has reaped (go builds, image builds and what they ran), or 0 when the
// kernel does not say.
func cpuUsed() time.Duration {
	var total time.Duration
	for _, who := range []int{syscall.RUSAGE_SELF, syscall.RUSAGE_CHILDREN} {
		var ru syscall.Rusage
		if syscall.Getrusage(who, &ru) != nil {
			return 0
		}
		total += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return total
}

func runUp(ctx context.Context, args []string) error {
	var (
		c                     common
		detach                bool
		cpu, memory, gates    string
		nodes, gpus, pods     int
		apiServerPort         int
		timeout, startTimeout time.Duration
	)
	flags := flag.NewFlagSet("up", flag.ExitOnError)
	c.register(flags)
	flags.BoolVar(&detach, "detach", false, "return once the cluster is ready and leave it running; stop it with `localcluster down`")
	flags.IntVar(&nodes, "nodes", 4, "number of fake nodes (0 for none)")
	flags.IntVar(&gpus, "gpus", 8, "nvidia.com/gpu and DRA devices per node")
	flags.StringVar(&cpu, "cpu", "32", "CPU capacity per node")
	flags.StringVar(&memory, "memory", "256Gi", "memory capacity per node")
	flags.IntVar(&pods, "pods", 110, "pod capacity per node")
	flags.IntVar(&apiServerPort, "apiserver-port", 0, "kube-apiserver port on 127.0.0.1 (0 picks a free one)")
	flags.StringVar(&gates, "feature-gates", "", "feature gates of the Kubernetes components (default: the version's, "+cluster.DefaultFeatureGates+" on "+cluster.DefaultKubeVersion+")")
	flags.DurationVar(&timeout, "timeout", 20*time.Minute, "overall bound for building and starting")
	flags.DurationVar(&startTimeout, "start-timeout", 90*time.Second, "bound for each component to become ready")
	_ = flags.Parse(args)

	opts, err := c.options()
	if err != nil {
		return err
	}
	if opts.NodeShape.CPU, err = resource.ParseQuantity(cpu); err != nil {
		return fmt.Errorf("--cpu: %w", err)
	}
	if opts.NodeShape.Memory, err = resource.ParseQuantity(memory); err != nil {
		return fmt.Errorf("--memory: %w", err)
	}
	opts.Nodes, opts.NodeShape.GPUs, opts.NodeShape.Pods = orNone(nodes), orNone(gpus), pods
	opts.APIServerPort, opts.FeatureGates, opts.Detach, opts.StartTimeout = apiServerPort, gates, detach, startTimeout

	upCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	cl, err := cluster.Up(upCtx, opts)
	if err != nil {
		return err
	}
	if cl.HasRealNode() {
		// `make run` serves progress reports at <host address>:10443 under the name
		// the controller injects into trainer pods.
		if err := cl.ExposeHostService(upCtx, ctrlproc.ControllerNamespace, ctrlproc.WebhookServiceName, 10443); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "cluster up in %s\n", time.Since(start).Round(100*time.Millisecond))
	fmt.Printf("export KUBECONFIG=%s\n", cl.Kubeconfig())
	if detach {
		fmt.Fprintf(os.Stderr, "running in the background; logs in %s; stop with: localcluster down\n", cl.LogDir())
		return nil
	}
	fmt.Fprintln(os.Stderr, "press Ctrl-C to stop")
	<-ctx.Done()
	fmt.Fprintln(os.Stderr, "stopping")
	return cl.Down()
}

// orNone maps the CLI's "0 means none" to Options' "negative means none".
func orNone(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

func runDown(args []string) error {
	var c common
	flags := flag.NewFlagSet("down", flag.ExitOnError)
	c.register(flags)
	_ = flags.Parse(args)
	opts, err := c.options()
	if err != nil {
		return err
	}
	if err := cluster.DownFromState(opts.StateDir, os.Stderr); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "cluster down")
	return nil
}

func runStatus(ctx context.Context, args []string) error {
	var c common
	flags := flag.NewFlagSet("status", flag.ExitOnError)
	c.register(flags)
	var hostAddress bool
	flags.BoolVar(&hostAddress, "host-address", false, "print only the address at which pods reach the host (the real node's bridge address; 127.0.0.1 without a real node)")
	_ = flags.Parse(args)
	opts, err := c.options()
	if err != nil {
		return err
	}
	s, err := cluster.ReadState(opts.StateDir)
	if errors.Is(err, fs.ErrNotExist) {
		if hostAddress {
			fmt.Println("127.0.0.1") // no real node: the host is 127.0.0.1 to everything
			return nil
		}
		fmt.Printf("no cluster recorded in %s\n", opts.StateDir)
		return nil
	}
	if err != nil {
		return err
	}
	if hostAddress {
		// For `make run`: where pods reach the host, 127.0.0.1 without a real node.
		if s.RealNode != nil {
			fmt.Println(s.RealNode.Gateway)
		} else {
			fmt.Println("127.0.0.1")
		}
		return nil
	}
	fmt.Printf("cluster started %s by pid %d (detached: %v)\nkubernetes: %s\nserver: %s\ndata:   %s\nlogs:   %s\n",
		s.StartedAt.Local().Format(time.RFC3339), s.OwnerPid, s.Detached, s.KubeVersion, s.Server, s.WorkDir, s.LogDir)
	if rn := s.RealNode; rn != nil {
		fmt.Printf("real node: %s, pods on %s (bridge %s), host and DNS at %s\n", cluster.RealNodeName, rn.Subnet, rn.Bridge, rn.Gateway)
	}
	live := map[int]bool{}
	for _, p := range s.Live() {
		live[p.Pid] = true
	}
	for _, p := range s.Processes {
		state := "dead"
		if live[p.Pid] {
			state = "running"
		}
		fmt.Printf("  %-24s pid %-7d %-8s ports %v\n", p.Name, p.Pid, state, p.Ports)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := cluster.Attach(ctx, s.Kubeconfig); err != nil {
		return fmt.Errorf("not serving: %w", err)
	}
	fmt.Printf("ready\nexport KUBECONFIG=%s\n", s.Kubeconfig)
	return nil
}

// tools are the binaries `localcluster tool` builds alone, with their sources.
var tools = map[string]cluster.Source{
	cluster.Promtool:   cluster.PrometheusSource,
	cluster.Prometheus: cluster.PrometheusSource,
	cluster.Helm:       cluster.HelmSource,
}

// runTool builds the source of one tool into the cache unless it is there, without the
// cluster's other sources (make test-chart needs promtool, not a control plane), and
// prints the path of its binary.
func runTool(ctx context.Context, args []string) error {
	var c common
	flags := flag.NewFlagSet("tool", flag.ExitOnError)
	c.register(flags)
	_ = flags.Parse(args)
	if flags.NArg() != 1 {
		return fmt.Errorf("tool: name one tool of %s", strings.Join(slices.Sorted(maps.Keys(tools)), ", "))
	}
	name := flags.Arg(0)
	src, ok := tools[name]
	if !ok {
		return fmt.Errorf("tool: unknown tool %q: want one of %s", name, strings.Join(slices.Sorted(maps.Keys(tools)), ", "))
	}
	bins, err := cluster.BuildSources(ctx, cluster.BuildOptions{CacheDir: c.cacheDir, Progress: os.Stderr}, src)
	if err != nil {
		return err
	}
	fmt.Println(bins.Path(name))
	return nil
}

// runScrape configures the Prometheus of the recorded cluster (up --prometheus) to
// scrape the controller process at --metrics-address with the chart's ServiceMonitor
// and rules (e2e/monitoring.ScrapeController), for `make run`, and prints Prometheus' URL.
func runScrape(ctx context.Context, args []string) error {
	var c common
	flags := flag.NewFlagSet("scrape", flag.ExitOnError)
	c.register(flags)
	var metricsAddr string
	flags.StringVar(&metricsAddr, "metrics-address", "127.0.0.1:8080", "host:port of the controller's /metrics (HTTPS with authentication, as the chart serves it)")
	_ = flags.Parse(args)
	opts, err := c.options()
	if err != nil {
		return err
	}
	local, err := cluster.Attach(ctx, filepath.Join(opts.StateDir, "kubeconfig"))
	if err != nil {
		return err
	}
	if local.PrometheusURL() == "" {
		return fmt.Errorf("the cluster in %s runs no Prometheus: make cluster-down, then make cluster-up (PROMETHEUS=1, the default)", opts.StateDir)
	}
	bins, err := cluster.BuildSources(ctx, cluster.BuildOptions{CacheDir: c.cacheDir, Progress: os.Stderr}, cluster.HelmSource)
	if err != nil {
		return err
	}
	root, err := cluster.FindRepoRoot()
	if err != nil {
		return err
	}
	chart, err := monitoring.RenderChart(ctx, bins.Path(cluster.Helm), root, monitoring.DefaultValues)
	if err != nil {
		return err
	}
	setup, err := monitoring.ScrapeController(ctx, local, chart, metricsAddr, "", 1)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "Prometheus at %s scrapes %s (job %s) as the chart's ServiceMonitor would, with the chart's rules\n", local.PrometheusURL(), metricsAddr, setup.Job)
	return nil
}
