package bench

// Cluster setup shared by the modes: the local control plane's options, the runtime,
// namespaces, the TrainJobs created, and the controller started with the run's flags.

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/trainyard/trainyard/e2e/cluster"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
)

// clusterOptions returns the options of the local control plane a benchmark
// mode runs on: its own state folder (_output/bench/cluster-<mode> under
// repoRoot), logs in outDir/logs, and, for pods > 0, the JobSet controller
// with kwok nodes of 500 pods each, room for every pod at once (kwok nodes are
// free, and a run measures the controller, not a scheduling backlog); for
// pods == 0 neither nodes nor the JobSet controller.
func clusterOptions(repoRoot, outDir string, progress io.Writer, mode string, pods int) cluster.Options {
	opts := cluster.Options{
		StateDir: filepath.Join(repoRoot, "_output", "bench", "cluster-"+mode),
		LogDir:   filepath.Join(outDir, "logs"),
		Progress: progress,
		Nodes:    -1,
	}
	opts.Build.RepoRoot = repoRoot
	if pods == 0 {
		opts.WithoutJobSetController = true
		return opts
	}
	opts.NodeShape = cluster.NodeShape{Pods: 500, CPU: resource.MustParse("1000"), Memory: resource.MustParse("4Ti")}
	opts.Nodes = (pods + 499) / 500
	return opts
}

// startController starts the controller binary with Config's flags (serverArgs)
// and extraArgs, logging to <OutDir>/logs/trainyard.log, and with Config.Webhooks
// waits until the API server calls its webhooks. It returns the process and the
// flags beyond the common ones (for a restart with the same). The caller stops it.
func (r *runner) startController(ctx context.Context, extraArgs ...string) (*controllerProcess, []string, error) {
	args, webhookURL, err := r.serverArgs()
	if err != nil {
		return nil, nil, err
	}
	args = append(args, extraArgs...)
	// TTL mode forces garbage collections through /debug/pprof to read the live heap.
	profiling := r.cfg.CPUProfile > 0 || r.cfg.Mode == ModeTTL
	ctrl, err := startControllerProcess(ctx, r.binary, r.cluster.Kubeconfig(), filepath.Join(r.cfg.OutDir, "logs", "trainyard.log"), r.cfg.QPS, r.cfg.Burst, profiling, r.cfg.ControllerEnv, args...)
	if err != nil {
		return nil, nil, err
	}
	if webhookURL != "" {
		if err := r.waitWebhooks(ctx, webhookURL); err != nil {
			ctrl.Stop()
			return nil, nil, err
		}
	}
	return ctrl, args, nil
}

// serverArgs are the controller's admission flags of the run: its admission server
// registered over 127.0.0.1 with --webhooks, else none; and the webhook URL ("" when off).
func (r *runner) serverArgs() ([]string, string, error) {
	args := slices.Clone(r.cfg.ControllerArgs)
	if !r.cfg.Webhooks {
		return append(args, "--webhook-bind-address=0"), "", nil
	}
	addrs, err := cluster.FreeAddrs(1)
	if err != nil {
		return nil, "", err
	}
	url := "https://" + addrs[0]
	return append(args, "--webhook-bind-address="+addrs[0], "--webhook-register-url="+url), url, nil
}

func (r *runner) installRuntime(ctx context.Context) error {
	path := filepath.Join(r.cfg.RepoRoot, "..", "shared", "upstream", "runtimes", "torch_distributed.yaml")
	if _, err := os.Stat(path); err != nil {
		path = filepath.Join(r.cfg.RepoRoot, "examples", "torch-distributed-runtime.yaml")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	rt := &trainer.ClusterTrainingRuntime{}
	if err := yaml.UnmarshalStrict(data, rt); err != nil {
		return fmt.Errorf("decoding %s: %w", path, err)
	}
	if rt.Name != runtimeName {
		return fmt.Errorf("%s: runtime %q, want %q", path, rt.Name, runtimeName)
	}
	if r.cfg.Mode == ModeProgress {
		// The reporting pods stay Running for the whole run.
		for i := range rt.Spec.Template.Spec.ReplicatedJobs {
			pod := &rt.Spec.Template.Spec.ReplicatedJobs[i].Template.Spec.Template
			if pod.Annotations == nil {
				pod.Annotations = map[string]string{}
			}
			pod.Annotations[cluster.AnnotationCompleteDelay] = podRunTime
		}
	}
	_, err = r.trainers.TrainerV1alpha1().ClusterTrainingRuntimes().Create(ctx, rt, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	r.say("runtime %s installed from %s", runtimeName, path)
	return nil
}

func (r *runner) createNamespace(ctx context.Context, name string) error {
	_, err := r.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// createTrainJob returns a create function for burst: TrainJob i, the
// minimal spec a user writes for torch-distributed (runtimeRef, numNodes,
// command), so the figures are about the controller, not a big template.
func (r *runner) createTrainJob(namespace string) func(ctx context.Context, i int) error {
	return r.createTrainJobIn(func(int) string { return namespace }, false)
}

// createTrainJobIn is createTrainJob with TrainJob i in namespace(i), suspended or not.
func (r *runner) createTrainJobIn(namespace func(i int) string, suspend bool) func(ctx context.Context, i int) error {
	return func(ctx context.Context, i int) error {
		ns := namespace(i)
		tj := &trainer.TrainJob{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf(trainJobNameFmt, i), Namespace: ns},
			Spec: trainer.TrainJobSpec{
				RuntimeRef: trainer.RuntimeRef{Name: runtimeName},
				Trainer: &trainer.Trainer{
					NumNodes: ptr.To(r.cfg.NumNodes),
					Command:  []string{"torchrun", "train.py"},
				},
			},
		}
		if suspend {
			tj.Spec.Suspend = ptr.To(true)
		}
		if r.queueName != "" {
			tj.Labels = map[string]string{cluster.KueueQueueNameLabel: r.queueName}
		}
		_, err := r.trainers.TrainerV1alpha1().TrainJobs(ns).Create(ctx, tj, metav1.CreateOptions{})
		return err
	}
}

func (r *runner) countFailed(ctx context.Context, ns string) (int, error) {
	list, err := r.trainers.TrainerV1alpha1().TrainJobs(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	failed := 0
	for i := range list.Items {
		if meta.IsStatusConditionTrue(list.Items[i].Status.Conditions, trainer.TrainJobFailed) {
			failed++
		}
	}
	return failed, nil
}

// waitWebhooks waits until the API server's TrainJob validator calls url.
func (r *runner) waitWebhooks(ctx context.Context, url string) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		cfg, err := r.cluster.Client().AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "trainyard-validator", metav1.GetOptions{})
		if err != nil || len(cfg.Webhooks) == 0 || cfg.Webhooks[0].ClientConfig.URL == nil {
			return false, nil
		}
		return strings.HasPrefix(*cfg.Webhooks[0].ClientConfig.URL, url+"/"), nil
	})
}
