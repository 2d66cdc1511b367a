package realnode

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/trainyard/trainyard/e2e/cluster"
	"github.com/trainyard/trainyard/e2e/training"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
)

// reportScript posts one report of progressPercentage 42 to the TrainJob's own URL,
// and first, when OTHER_TRAINJOB names one, to that TrainJob's URL in the same
// namespace (the injected URL with the name swapped); each with the pod's projected
// token and the injected CA. It prints each answer's HTTP status, or the TLS error.
const reportScript = `import datetime, json, os, ssl, sys, urllib.error, urllib.request

own = os.environ["KUBEFLOW_TRAINER_SERVER_URL"]
name = os.environ["TRAINJOB_NAME"]
if f"/trainjobs/{name}/status" not in own:
    sys.exit("unexpected KUBEFLOW_TRAINER_SERVER_URL " + own)
targets = [("own", own)]
other = os.environ.get("OTHER_TRAINJOB")
if other:
    targets.insert(0, ("other", own.replace(f"/trainjobs/{name}/", f"/trainjobs/{other}/")))
token = open(os.environ["KUBEFLOW_TRAINER_SERVER_TOKEN"]).read().strip()
ctx = ssl.create_default_context(cafile=os.environ["KUBEFLOW_TRAINER_SERVER_CA_CERT"])
now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
body = json.dumps({"trainerStatus": {"progressPercentage": 42, "lastUpdatedTime": now}}).encode()
for target, url in targets:
    req = urllib.request.Request(url, data=body, method="POST", headers={
        "Authorization": "Bearer " + token, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            print(f"report to {target}: HTTP {resp.status}", flush=True)
    except urllib.error.HTTPError as e:
        print(f"report to {target}: HTTP {e.code}", flush=True)
    except urllib.error.URLError as e:
        sys.exit(f"report to {target}: {e.reason}")
`

// reporterTrainJob is a TrainJob of one node on the torch runtime that runs
// reportScript, posting to other's URL first when other is not "".
func reporterTrainJob(ns, name, other string) *trainer.TrainJob {
	tj := training.ShellTrainJob(ns, name, training.TorchRuntime, 1,
		training.InlineScript("/tmp/report.py", reportScript)+"python3 /tmp/report.py",
		corev1.EnvVar{Name: "TRAINJOB_NAME", Value: name}, corev1.EnvVar{Name: "OTHER_TRAINJOB", Value: other})
	return tj
}

// waitReported waits until the TrainJob's trainerStatus holds reportScript's report.
func (e *env) waitReported(t *testing.T, name string) {
	t.Helper()
	cluster.Eventually(t, 30*time.Second, name+"'s report in its trainerStatus", func(ctx context.Context) (bool, string) {
		tj, err := e.get(ctx, name)
		if err != nil {
			return false, err.Error()
		}
		ts := tj.Status.TrainerStatus
		return ts != nil && ts.ProgressPercentage != nil && *ts.ProgressPercentage == 42, fmt.Sprintf("trainerStatus %+v", ts)
	})
}

// TestReportForAnotherTrainJobIsRefused: a trainer pod holds a token bound to its own
// pod, so its reports count for its own TrainJob only. From a real pod, over the
// injected URL and CA, a report to another TrainJob of the same namespace is refused
// (403) and changes nothing, while the same report to its own TrainJob is accepted
// and lands in its trainerStatus.
func TestReportForAnotherTrainJobIsRefused(t *testing.T) {
	e := newEnv(t)
	// The victim never runs: only its status could change.
	victim := training.ShellTrainJob(e.ns, "victim", training.TorchRuntime, 1, "true")
	victim.Spec.Suspend = ptr.To(true)
	e.create(t, victim)
	intruder := reporterTrainJob(e.ns, "intruder", victim.Name)
	e.create(t, intruder)
	e.waitComplete(t, intruder.Name)

	log := podLog(t, e.c, e.ns, e.trainerPods(t, intruder.Name)[0].Name, "node")
	if !strings.Contains(log, "report to other: HTTP 403") || !strings.Contains(log, "report to own: HTTP 200") {
		t.Fatalf("want the report to the other TrainJob refused (403) and its own accepted (200); the pod's log:\n%s", log)
	}
	e.waitReported(t, intruder.Name)
	got, err := e.get(context.Background(), victim.Name)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.TrainerStatus != nil {
		t.Errorf("the victim's trainerStatus %+v, want none: the refused report changed it", got.Status.TrainerStatus)
	}
}
