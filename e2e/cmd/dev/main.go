// Command dev runs Trainyard's main job on the local control plane: it installs the
// torch-distributed runtime (upstream Kubeflow Trainer's, from the upstream folder beside the checkout, or
// Trainyard's example), starts the controller, creates a TrainJob and prints its
// progress — the controller's stage timeline, the JobSet, the pods and the final
// condition — until the TrainJob completes or fails.
//
// `make dev` brings the cluster up first (make cluster-up) and runs this with its
// kubeconfig; the cluster is left running for inspection.
//
// With --kueue (`make dev KUEUE=1`, on a cluster started with KUEUE=1) the TrainJob
// goes through Kueue: a ResourceFlavor, a ClusterQueue with quota for exactly this
// TrainJob and a LocalQueue "dev" in namespace default are created, the TrainJob is
// submitted to it, and Kueue's steps are printed beside Trainyard's (suspended at
// creation, Workload pending, admitted, resumed).
//
// With --optimize (`make dev OPTIMIZE=1`, on a cluster with a real node) it runs a
// hyperparameter search instead: the OptimizationJob of examples/digits-search, 8
// trials of the digits model, 2 at a time, searching the learning rate and the
// hidden size; it prints each trial's parameters and final loss, and the winner.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	jobsetclient "sigs.k8s.io/jobset/client-go/clientset/versioned"
	"sigs.k8s.io/yaml"

	"github.com/trainyard/trainyard/e2e/cluster"
	ctrlproc "github.com/trainyard/trainyard/e2e/controller"
	"github.com/trainyard/trainyard/e2e/monitoring"
	"github.com/trainyard/trainyard/e2e/training"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerclient "github.com/trainyard/trainyard/pkg/clientset/clientset/versioned"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "_output/cluster/kubeconfig", "kubeconfig of the local control plane")
	root := flag.String("repo", ".", "the Trainyard checkout")
	timeout := flag.Duration("timeout", 5*time.Minute, "how long to wait for the TrainJob to finish")
	withKueue := flag.Bool("kueue", false, "submit the TrainJob through Kueue (the cluster must run it: make cluster-up KUEUE=1)")
	optimize := flag.Bool("optimize", false, "run the hyperparameter search of examples/digits-search instead of one TrainJob (needs the real node)")
	flag.Parse()
	if *optimize && *withKueue {
		fmt.Fprintln(os.Stderr, "dev: --optimize and --kueue do not go together: run one, then the other")
		os.Exit(2)
	}
	if *optimize && *timeout == 5*time.Minute {
		*timeout = 20 * time.Minute // 8 trials, 2 at a time, on 2 cores
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *root, *kubeconfig, *timeout, *withKueue, *optimize); err != nil {
		fmt.Fprintln(os.Stderr, "dev:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, root, kubeconfig string, timeout time.Duration, withKueue, optimize bool) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("loading %s (is the cluster up? make cluster-up): %w", kubeconfig, err)
	}
	kube := kubernetes.NewForConfigOrDie(cfg)
	trainers := trainerclient.NewForConfigOrDie(cfg)
	jobsets := jobsetclient.NewForConfigOrDie(cfg)
	start := time.Now()
	say := func(format string, args ...any) {
		fmt.Printf("[%6.2fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}

	runtimeFile, origin := runtimeManifest(root)
	if err := applyRuntime(ctx, trainers, runtimeFile); err != nil {
		return err
	}
	say("ClusterTrainingRuntime torch-distributed installed (%s)", origin)

	// With a real node (make cluster-up's default) the TrainJob trains for real: the
	// progress server listens on the host's bridge address, which its Service name
	// resolves to for pods. On fake nodes alone the example TrainJob runs on kwok.
	local, err := cluster.Attach(ctx, kubeconfig)
	if err != nil {
		return err
	}
	if optimize {
		if !local.HasRealNode() {
			return errors.New("--optimize trains for real and the cluster has no real node: make cluster-down, then make dev OPTIMIZE=1")
		}
		return search(ctx, root, kubeconfig, local, trainers, timeout, say)
	}
	tj, statusAddr, err := exampleTrainJob(ctx, root, local, say)
	if err != nil {
		return err
	}
	tj.Name = fmt.Sprintf("%s-%d", tj.Name, time.Now().Unix()%100000)
	tj.Namespace = "default"

	ctrl, logs, err := startController(ctx, root, kubeconfig, statusAddr)
	if err != nil {
		return err
	}
	defer func() {
		_ = ctrl.Process.Signal(syscall.SIGTERM)
		_ = ctrl.Wait()
	}()
	job, err := scrapeController(ctx, root, local, say)
	if err != nil {
		return err
	}
	var kueueState func(context.Context) string
	if withKueue {
		dyn := dynamic.NewForConfigOrDie(cfg)
		if err := setupKueue(ctx, dyn, tj); err != nil {
			return err
		}
		say("Kueue: ResourceFlavor %s, ClusterQueue %s with quota for this TrainJob, LocalQueue %s/%s", kueueName, kueueName, tj.Namespace, kueueName)
		metav1.SetMetaDataLabel(&tj.ObjectMeta, cluster.KueueQueueNameLabel, kueueName)
		kueueState = func(ctx context.Context) string { return describeKueue(ctx, dyn, trainers, tj.Namespace, tj.Name) }
	}
	if _, err := trainers.TrainerV1alpha1().TrainJobs(tj.Namespace).Create(ctx, tj, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating TrainJob: %w", err)
	}
	say("TrainJob %s/%s created: runtime %s, numNodes %d", tj.Namespace, tj.Name, tj.Spec.RuntimeRef.Name, *tj.Spec.Trainer.NumNodes)
	go printStageTimeline(logs, tj.Namespace, tj.Name, say)
	if local.HasRealNode() {
		go printTrainerLog(ctx, kube, tj.Namespace, tj.Name, say)
	}

	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := follow(ctx, kube, trainers, jobsets, tj.Namespace, tj.Name, kueueState, say); err != nil {
		return err
	}
	if job == "" {
		say("no dashboard picture: the cluster runs no Prometheus (PROMETHEUS=0)")
		return nil
	}
	// The picture is the run's record, not its result: a failure to draw is said, and
	// the run still succeeded.
	if _, err := drawDashboard(ctx, root, local.PrometheusURL(), job, start, say); err != nil {
		say("no dashboard picture: %v", err)
	}
	return nil
}

// search runs the digits search on the real node: the progress server on the host's
// bridge address (the trials report their loss there), the controller, then runSearch.
func search(ctx context.Context, root, kubeconfig string, local *cluster.Cluster, trainers trainerclient.Interface, timeout time.Duration, say func(string, ...any)) error {
	if err := local.ExposeHostService(ctx, ctrlproc.ControllerNamespace, ctrlproc.WebhookServiceName, 10443); err != nil {
		return err
	}
	ctrl, logs, err := startController(ctx, root, kubeconfig, local.HostAddress()+":10443")
	if err != nil {
		return err
	}
	go func() { _, _ = io.Copy(io.Discard, logs) }() // the log file keeps it; the pipe must not block the controller
	defer func() {
		_ = ctrl.Process.Signal(syscall.SIGTERM)
		_ = ctrl.Wait()
	}()
	if _, err := scrapeController(ctx, root, local, say); err != nil {
		return err
	}
	say("real node %s: every trial trains PyTorch DDP on scikit-learn's digits (%s)", cluster.RealNodeName, training.DigitsScript)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return runSearch(ctx, root, trainers, "default", fmt.Sprintf("digits-search-%d", time.Now().Unix()%100000), say)
}

// exampleTrainJob returns the TrainJob to run and the address the controller's
// progress server is to listen on: with a real node, the DDP digits TrainJob and the
// host's bridge address (the Service pods resolve created); else the example
// TrainJob on kwok's fake nodes and 127.0.0.1.
func exampleTrainJob(ctx context.Context, root string, local *cluster.Cluster, say func(string, ...any)) (*trainer.TrainJob, string, error) {
	statusAddr := "127.0.0.1:10443"
	var tj *trainer.TrainJob
	var err error
	if local.HasRealNode() {
		statusAddr = local.HostAddress() + ":10443"
		if err := local.ExposeHostService(ctx, ctrlproc.ControllerNamespace, ctrlproc.WebhookServiceName, 10443); err != nil {
			return nil, "", err
		}
		if tj, err = training.DigitsTrainJob(root, "default", "ddp-digits", training.DigitsOptions{}); err != nil {
			return nil, "", err
		}
		say("real node %s: the TrainJob trains PyTorch DDP on scikit-learn's digits (%s)", cluster.RealNodeName, training.DigitsScript)
	} else {
		if tj, err = readTrainJob(filepath.Join(root, "examples", "trainjob.yaml")); err != nil {
			return nil, "", err
		}
		say("no real node (make cluster-up REAL_NODE=1 has one): the TrainJob's pods are kwok's fakes")
	}
	return tj, statusAddr, nil
}

// kueueName names the ResourceFlavor, ClusterQueue and LocalQueue of --kueue.
const kueueName = "dev"

// setupKueue creates (or keeps) a ResourceFlavor, a ClusterQueue with quota for
// exactly tj's requests (numNodes × resourcesPerNode) and a LocalQueue in tj's
// namespace, all named kueueName.
func setupKueue(ctx context.Context, dyn dynamic.Interface, tj *trainer.TrainJob) error {
	nodes := int64(1)
	if tj.Spec.Trainer != nil && tj.Spec.Trainer.NumNodes != nil {
		nodes = int64(*tj.Spec.Trainer.NumNodes)
	}
	var covered, quotas []any
	if tj.Spec.Trainer != nil && tj.Spec.Trainer.ResourcesPerNode != nil {
		for _, name := range slices.Sorted(maps.Keys(tj.Spec.Trainer.ResourcesPerNode.Requests)) {
			q := tj.Spec.Trainer.ResourcesPerNode.Requests[name]
			total := q.DeepCopy()
			total.Mul(nodes)
			covered = append(covered, string(name))
			quotas = append(quotas, map[string]any{"name": string(name), "nominalQuota": total.String()})
		}
	}
	objects := []struct {
		gvr  schema.GroupVersionResource
		ns   string
		kind string
		spec map[string]any
	}{
		{cluster.KueueResourceFlavorGVR, "", "ResourceFlavor", map[string]any{}},
		{cluster.KueueClusterQueueGVR, "", "ClusterQueue", map[string]any{
			"namespaceSelector": map[string]any{},
			"resourceGroups": []any{map[string]any{
				"coveredResources": covered,
				"flavors":          []any{map[string]any{"name": kueueName, "resources": quotas}},
			}},
		}},
		{cluster.KueueLocalQueueGVR, tj.Namespace, "LocalQueue", map[string]any{"clusterQueue": kueueName}},
	}
	for _, o := range objects {
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": o.gvr.GroupVersion().String(), "kind": o.kind,
			"metadata": map[string]any{"name": kueueName}, "spec": o.spec,
		}}
		if _, err := dyn.Resource(o.gvr).Namespace(o.ns).Create(ctx, obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
				return fmt.Errorf("creating %s %s: %w (the cluster runs no Kueue: make cluster-down, then make dev KUEUE=1)", o.kind, kueueName, err)
			}
			return fmt.Errorf("creating %s %s: %w", o.kind, kueueName, err)
		}
	}
	return nil
}

// describeKueue says what Kueue has done with the TrainJob: whether it is suspended,
// and its Workload's admission conditions.
func describeKueue(ctx context.Context, dyn dynamic.Interface, trainers trainerclient.Interface, ns, name string) string {
	tj, err := trainers.TrainerV1alpha1().TrainJobs(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	state := fmt.Sprintf("TrainJob suspend=%v", tj.Spec.Suspend != nil && *tj.Spec.Suspend)
	list, err := dyn.Resource(cluster.KueueWorkloadGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return state
	}
	for _, wl := range list.Items {
		if !slices.ContainsFunc(wl.GetOwnerReferences(), func(r metav1.OwnerReference) bool { return r.UID == tj.UID }) {
			continue
		}
		conds, _, _ := unstructured.NestedSlice(wl.Object, "status", "conditions")
		var parts []string
		for _, c := range conds {
			m, _ := c.(map[string]any)
			parts = append(parts, fmt.Sprintf("%v=%v", m["type"], m["status"]))
		}
		state += fmt.Sprintf(", Workload %s [%s]", wl.GetName(), strings.Join(parts, ", "))
	}
	return state
}

// runtimeManifest prefers upstream's torch-distributed runtime beside the repository.
func runtimeManifest(root string) (path, origin string) {
	upstream := filepath.Join(root, "..", "shared", "upstream", "runtimes", "torch_distributed.yaml")
	if _, err := os.Stat(upstream); err == nil {
		return upstream, "upstream Kubeflow Trainer, unmodified"
	}
	return filepath.Join(root, "examples", "torch-distributed-runtime.yaml"), "Trainyard's example"
}

func applyRuntime(ctx context.Context, trainers trainerclient.Interface, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	rt := &trainer.ClusterTrainingRuntime{}
	if err := yaml.UnmarshalStrict(data, rt); err != nil {
		return fmt.Errorf("decoding %s: %w", path, err)
	}
	_, err = trainers.TrainerV1alpha1().ClusterTrainingRuntimes().Create(ctx, rt, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ClusterTrainingRuntime %s: %w", rt.Name, err)
	}
	return nil
}

func readTrainJob(path string) (*trainer.TrainJob, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	tj := &trainer.TrainJob{}
	if err := yaml.UnmarshalStrict(data, tj); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", path, err)
	}
	return tj, nil
}

// metricsAddr is where the controller serves /metrics, as under `make run`: HTTPS with
// authentication, as the chart serves it, for the cluster's Prometheus.
const metricsAddr = "127.0.0.1:8080"

// scrapeController has the cluster's Prometheus (PROMETHEUS=1, the default) scrape the
// controller as the chart's ServiceMonitor would, with the chart's rules
// (e2e/monitoring), and returns the job label of its series (the metrics Service's
// name, which Prometheus Operator's relabeling sets, not the scrape job's name);
// nothing and "" without one.
func scrapeController(ctx context.Context, root string, local *cluster.Cluster, say func(string, ...any)) (string, error) {
	if local.PrometheusURL() == "" {
		return "", nil
	}
	bins, err := cluster.BuildSources(ctx, cluster.BuildOptions{Progress: os.Stderr}, cluster.HelmSource)
	if err != nil {
		return "", err
	}
	chart, err := monitoring.RenderChart(ctx, bins.Path(cluster.Helm), root, monitoring.DefaultValues)
	if err != nil {
		return "", err
	}
	setup, err := monitoring.ScrapeController(ctx, local, chart, metricsAddr, "", 1)
	if err != nil {
		return "", err
	}
	say("Prometheus %s scrapes the controller at %s (scrape job %s, job label %s) with the chart's ServiceMonitor and rules", local.PrometheusURL(), metricsAddr, setup.Job, monitoring.MetricsService)
	return monitoring.MetricsService, nil
}

// startController builds and starts the controller with per-sync logging (-v=4), its
// log teed to _output/dev/trainyard.log; it returns the process and a reader of the log.
func startController(ctx context.Context, root, kubeconfig, statusAddr string) (*exec.Cmd, io.Reader, error) {
	bin := filepath.Join(root, "_output", "bin", "trainyard")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/trainyard")
	build.Dir, build.Stdout, build.Stderr = root, os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		return nil, nil, fmt.Errorf("building the controller: %w", err)
	}
	logPath := filepath.Join(root, "_output", "dev", "trainyard.log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, nil, err
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, nil, err
	}
	r, w := io.Pipe()
	// As `make run` and the e2e tests: the admission webhooks registered with the API
	// server over 127.0.0.1 (the controller removes them when it stops), the progress
	// server at statusAddr, whose port is the port of the URL injected into trainer pods.
	cmd := exec.Command(bin, "--kubeconfig="+kubeconfig, "--metrics-bind-address="+metricsAddr, "--metrics-secure=true",
		"--health-probe-bind-address=127.0.0.1:0", "--log-format=json", "--v=4",
		"--webhook-bind-address=127.0.0.1:9443", "--webhook-register-url=https://127.0.0.1:9443",
		"--status-server-bind-address="+statusAddr)
	cmd.Stdout = io.MultiWriter(logFile, w)
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("starting the controller: %w", err)
	}
	fmt.Printf("controller started (pid %d), log: %s\n", cmd.Process.Pid, logPath)
	return cmd, r, nil
}

// printStageTimeline prints the controller's per-stage syncs of one TrainJob, from its
// JSON log lines whose "trainJob" key is {"namespace": ns, "name": name}.
func printStageTimeline(logs io.Reader, ns, name string, say func(string, ...any)) {
	scanner := bufio.NewScanner(logs)
	scanner.Buffer(make([]byte, 1<<20), 1<<20)
	for scanner.Scan() {
		var line struct {
			Msg      string  `json:"msg"`
			Stage    string  `json:"stage"`
			Result   string  `json:"result"`
			Duration float64 `json:"duration"`
			Latency  float64 `json:"latency"`
			TrainJob struct {
				Namespace string `json:"namespace"`
				Name      string `json:"name"`
			} `json:"trainJob"`
		}
		if json.Unmarshal(scanner.Bytes(), &line) != nil || line.TrainJob.Namespace != ns || line.TrainJob.Name != name {
			continue
		}
		switch line.Msg {
		case "Synced":
			say("  stage %-16s → %-15s %v", line.Stage, line.Result, seconds(line.Duration))
		case "Created JobSet":
			say("  controller: JobSet created, %v after the TrainJob", seconds(line.Latency))
		}
	}
}

// follow prints JobSet, pod and condition changes until the TrainJob finishes.
//
// kueueState, when not nil, describes what Kueue did; it is printed when it changes.
func follow(ctx context.Context, kube kubernetes.Interface, trainers trainerclient.Interface, jobsets jobsetclient.Interface,
	ns, name string, kueueState func(context.Context) string, say func(string, ...any)) error {
	var lastJobSet, lastPods, lastConds, lastKueue string
	tick := time.NewTicker(300 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("TrainJob %s/%s did not finish: %w", ns, name, ctx.Err())
		case <-tick.C:
		}
		if kueueState != nil {
			if s := kueueState(ctx); s != lastKueue && s != "" {
				say("Kueue: %s", s)
				lastKueue = s
			}
		}
		if js, err := jobsets.JobsetV1alpha2().JobSets(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
			if s := describeJobSet(js); s != lastJobSet {
				say("JobSet %s", s)
				lastJobSet = s
			}
		}
		if pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: jobsetv1alpha2.JobSetNameKey + "=" + name}); err == nil {
			phases := map[string]int{}
			for _, p := range pods.Items {
				phases[string(p.Status.Phase)]++
			}
			if s := fmt.Sprint(phases); s != lastPods && len(pods.Items) > 0 {
				say("pods %s", s)
				lastPods = s
			}
		}
		tj, err := trainers.TrainerV1alpha1().TrainJobs(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			continue
		}
		var conds []string
		for _, c := range tj.Status.Conditions {
			conds = append(conds, fmt.Sprintf("%s=%s (%s)", c.Type, c.Status, c.Reason))
		}
		if s := strings.Join(conds, ", "); s != lastConds {
			say("TrainJob conditions: %s", s)
			lastConds = s
		}
		if meta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobComplete) {
			if ts := tj.Status.TrainerStatus; ts != nil {
				data, _ := json.Marshal(ts)
				say("status.trainerStatus: %s", data)
			}
			say("TrainJob %s/%s is Complete. The cluster keeps running: export KUBECONFIG=$PWD/_output/cluster/kubeconfig; make cluster-down to stop it.", ns, name)
			return nil
		}
		if c := meta.FindStatusCondition(tj.Status.Conditions, trainer.TrainJobFailed); c != nil && c.Status == metav1.ConditionTrue {
			return errors.New("TrainJob failed: " + c.Reason + ": " + c.Message)
		}
	}
}

// printTrainerLog follows the log of node 0 (torchrun's rank 0) once its container
// runs, as `kubectl logs -f` does, and prints each line.
func printTrainerLog(ctx context.Context, kube kubernetes.Interface, ns, name string, say func(string, ...any)) {
	pod := name + "-node-0-0"
	for ctx.Err() == nil {
		pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: jobsetv1alpha2.JobSetNameKey + "=" + name})
		if err == nil {
			for _, p := range pods.Items {
				if strings.HasPrefix(p.Name, pod) && (p.Status.Phase == corev1.PodRunning || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed) {
					stream, err := kube.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: "node", Follow: true}).Stream(ctx)
					if err != nil {
						break
					}
					say("trainer log (kubectl logs -f %s -c node):", p.Name)
					scanner := bufio.NewScanner(stream)
					for scanner.Scan() {
						say("  %s | %s", p.Name, scanner.Text())
					}
					stream.Close()
					return
				}
			}
		}
		time.Sleep(time.Second)
	}
}

func describeJobSet(js *jobsetv1alpha2.JobSet) string {
	suspended := js.Spec.Suspend != nil && *js.Spec.Suspend
	var jobs []string
	for _, r := range js.Status.ReplicatedJobsStatus {
		jobs = append(jobs, fmt.Sprintf("%s: active %d, succeeded %d, failed %d", r.Name, r.Active, r.Succeeded, r.Failed))
	}
	state := js.Status.TerminalState
	if state == "" {
		state = "running"
	}
	return fmt.Sprintf("%s suspend=%v %s [%s]", js.Name, suspended, state, strings.Join(jobs, "; "))
}

// seconds turns a logged duration in seconds into a readable time.Duration.
func seconds(s float64) time.Duration {
	return time.Duration(s * float64(time.Second)).Round(time.Microsecond)
}
