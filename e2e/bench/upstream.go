package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/trainyard/trainyard/e2e/cluster"
)

// Names of the controllers in the figures: the process names in
// componentCPUSeconds, and the columns of the peer report.
const (
	controllerTrainyard = "trainyard"
	controllerUpstream  = "upstream"
)

// controller-runtime's metrics, which upstream's /metrics serves beside client-go's
// rest_client_requests_total, workqueue_* (label name = the controller's name) and
// the Go runtime's, under the same names as Trainyard's.
const (
	controllerRuntimeActiveWorkers   = "controller_runtime_active_workers"
	controllerRuntimeReconcileErrors = "controller_runtime_reconcile_errors_total"
	controllerRuntimeReconcileTime   = "controller_runtime_reconcile_time_seconds"
	controllerRuntimeLabelController = "controller"
)

// upstreamConfig is Kubeflow Trainer's controller manager configuration
// (config.trainer.kubeflow.org/v1alpha1, as its manifests ship it in
// manifests/base/manager/controller_manager_config.yaml) with what the peer
// mode changes: every listener on 127.0.0.1 on a free port, /metrics plain HTTP
// (scraped as Trainyard's is), no leader election (Trainyard's default, and how
// the benchmark runs it), certificate management off (nothing to rotate: the
// webhook server, which upstream always starts, gets a certificate the cluster's
// CA signs, and no webhook configuration points at it, so the API server calls
// neither controller's webhooks), and the client QPS and burst Trainyard gets.
// Reconcile concurrency stays as shipped (TrainJob: 5), and does not apply:
// upstream builds its TrainJob controller without For() (WatchesRawSource), so
// controller-runtime cannot match it to a GroupKind and runs it with one worker,
// as upstream's log says ("Starting workers", "worker count":1) in every
// deployment of v2.3.0.
const upstreamConfig = `apiVersion: config.trainer.kubeflow.org/v1alpha1
kind: Configuration
health:
  healthProbeBindAddress: %s
  readinessEndpointName: readyz
  livenessEndpointName: healthz
metrics:
  bindAddress: %s
  secureServing: false
webhook:
  host: 127.0.0.1
  port: %s
leaderElection:
  leaderElect: false
controller:
  groupKindConcurrency:
    TrainJob.trainer.kubeflow.org: 5
    TrainingRuntime.trainer.kubeflow.org: 1
    ClusterTrainingRuntime.trainer.kubeflow.org: 1
certManagement:
  enable: false
clientConnection:
  qps: %g
  burst: %d
`

// buildUpstream builds (once; cached by version) Kubeflow Trainer's
// controller manager, cluster.UpstreamTrainer, and returns its path.
func buildUpstream(ctx context.Context, root string, progress io.Writer) (string, error) {
	opts := cluster.BuildOptions{RepoRoot: root, Progress: progress}
	bins, err := cluster.BuildSources(ctx, opts, cluster.UpstreamTrainer)
	if err != nil {
		return "", err
	}
	return bins.Path(cluster.TrainerControllerManager), nil
}

// startUpstreamController starts upstream's controller manager against c with
// upstreamConfig, its files (configuration, serving certificate) in dir and its
// log at logPath, and waits until its /readyz answers 200: caches synced and
// the webhook server listening.
func startUpstreamController(ctx context.Context, binary string, c *cluster.Cluster, dir, logPath string, qps float32, burst int32) (*controllerProcess, error) {
	addrs, err := cluster.FreeAddrs(3)
	if err != nil {
		return nil, err
	}
	_, webhookPort, err := net.SplitHostPort(addrs[2])
	if err != nil {
		return nil, err
	}
	certs, err := c.ServingCert("upstream-trainer-webhook")
	if err != nil {
		return nil, err
	}
	// controller-runtime's webhook server reads its certificate from
	// $TMPDIR/k8s-webhook-server/serving-certs, and upstream's configuration
	// has no field to move it.
	tmp := filepath.Join(dir, "tmp")
	certDir := filepath.Join(tmp, "k8s-webhook-server", "serving-certs")
	if err := os.MkdirAll(filepath.Dir(certDir), 0o755); err != nil {
		return nil, err
	}
	if err := os.RemoveAll(certDir); err != nil {
		return nil, err
	}
	if err := os.Symlink(certs, certDir); err != nil {
		return nil, err
	}
	config := filepath.Join(dir, "upstream-config.yaml")
	data := fmt.Sprintf(upstreamConfig, addrs[1], addrs[0], webhookPort, qps, burst)
	if err := os.WriteFile(config, []byte(data), 0o644); err != nil {
		return nil, err
	}
	p, err := startProcess(ctx, processSpec{
		name:   controllerUpstream,
		binary: binary,
		args:   []string{"--config=" + config, "--kubeconfig=" + c.Kubeconfig()},
		env:    []string{"TMPDIR=" + tmp},
		// Upstream's flags are its zap logger's (JSON at info by default) and --config.
		logPath:     logPath,
		metricsAddr: addrs[0], healthAddr: addrs[1],
	})
	if err != nil {
		return nil, err
	}
	if err := waitWorkersStarted(ctx, p, upstreamTrainJobController); err != nil {
		p.Stop()
		return nil, err
	}
	return p, nil
}

// upstreamTrainJobController is the name of upstream's TrainJob controller in
// its logs and metrics.
const upstreamTrainJobController = "trainjob_controller"

// waitWorkersStarted waits up to 2 minutes until p's log says controller
// started its workers. Upstream's /readyz answers once its webhook server
// listens, before its caches have synced; controller-runtime starts a
// controller's workers only after its caches synced, and says so at info
// level, so this is when it is ready in the sense of Trainyard's /readyz.
func waitWorkersStarted(ctx context.Context, p *controllerProcess, controller string) error {
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		data, err := os.ReadFile(p.LogPath)
		if err != nil {
			return false, err
		}
		for line := range strings.Lines(string(data)) {
			if strings.Contains(line, `"msg":"Starting workers"`) && strings.Contains(line, `"controller":"`+controller+`"`) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("%s: controller %s started no workers (log: %s): %w", p.Name, controller, p.LogPath, err)
	}
	return nil
}
