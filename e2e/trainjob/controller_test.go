package trainjob

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/trainyard/trainyard/e2e/cluster"
	ctrlproc "github.com/trainyard/trainyard/e2e/controller"
)

// controller is one running trainyard process (see package e2e/controller), with its
// addresses under the names this package's tests use.
type controller struct {
	proc         *ctrlproc.Process
	metricsAddr  string
	healthAddr   string
	webhookURL   string // "" with admission off
	progressAddr string // "" with the servers off
	logPath      string
}

// noAdmission is the startController argument that turns the controller's servers off
// (admission and the progress server), for tests of what the controller does with
// objects admission would refuse, and for tests that count the pipeline's writes only.
const noAdmission = ctrlproc.NoAdmission

// startController runs the controller against the shared cluster as ctrlproc.Start
// does: admission registered with the API server unless args holds noAdmission, ready
// when it returns, stopped with SIGTERM when the test ends.
func startController(t *testing.T, c *cluster.Cluster, args ...string) *controller {
	t.Helper()
	p := ctrlproc.Start(t, c, controllerBinary, args...)
	return &controller{proc: p, metricsAddr: p.MetricsAddr, healthAddr: p.HealthAddr,
		webhookURL: p.WebhookURL, progressAddr: p.ProgressAddr, logPath: p.LogPath}
}

// progressPort is the port of the progress server, the port of the URL the controller
// injects into trainer containers.
func (ctrl *controller) progressPort() string { return ctrl.proc.ProgressPort() }

// stop sends SIGTERM and waits for a graceful exit; a process that has already exited
// (killed by the test) is fine.
func (ctrl *controller) stop(t *testing.T) { t.Helper(); ctrl.proc.Stop(t) }

// kill ends the controller abruptly, as a node failure or OOM kill would.
func (ctrl *controller) kill(t *testing.T) { t.Helper(); ctrl.proc.Kill(t) }

// writes returns how many writes of each method the controller has made that the API
// server accepted (2xx), from its own rest_client_requests_total.
func (ctrl *controller) writes(t *testing.T) map[string]int { t.Helper(); return ctrl.proc.Writes(t) }

// metric returns the value of series on the controller's /metrics (see
// ctrlproc.Process.Metric).
func (ctrl *controller) metric(t *testing.T, series string) float64 {
	t.Helper()
	return ctrl.proc.Metric(t, series)
}

// waitPipelineIdle waits until the controller has finished more than after stage syncs
// (trainyard_stage_syncs_total, all stages; after < 0: any number) and its pipeline is
// idle: every workqueue empty (workqueue_depth) and no worker inside a sync
// (trainyard_stage_inflight). It returns the sync count it saw. A test that changes an
// object and then waits for this with the count from before knows the controller has
// processed the change and everything it led to, with no fixed sleep.
func (ctrl *controller) waitPipelineIdle(t *testing.T, after float64) float64 {
	t.Helper()
	var syncs float64
	cluster.Eventually(t, time.Minute, "the controller's pipeline idle after a sync", func(context.Context) (bool, string) {
		// One consistent reading: the sync count the same before and after seeing
		// nothing queued or in flight (a sync that ran in between changes the count).
		before := ctrl.metric(t, "trainyard_stage_syncs_total")
		depth, inflight := ctrl.metric(t, "workqueue_depth"), ctrl.metric(t, "trainyard_stage_inflight")
		syncs = ctrl.metric(t, "trainyard_stage_syncs_total")
		return syncs == before && syncs > after && depth == 0 && inflight == 0,
			fmt.Sprintf("syncs %v then %v (want > %v), queued %v, in flight %v", before, syncs, after, depth, inflight)
	})
	return syncs
}
