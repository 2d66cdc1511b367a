package helm

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainyard/trainyard/e2e/cluster"
	"github.com/trainyard/trainyard/e2e/training"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
)

// reportLoop is a trainer that reports progress 1, 2, 3, … to the URL the controller
// injected, with its projected token (read before each report, as a rotation demands)
// and the injected CA, every 0.6 s, printing each answer, until %[1]d s after it started;
// then it prints when its final report was sent and stays up another 20 s before it
// exits, so that the final report reaches the status through the write period (or a
// draining replica's flush), not through the TrainJob's completion. Progress stays
// below 100, whose first report is written at once. Errors are printed and the loop
// goes on: a report is the trainer's to retry, and what the test checks is that none
// answered 200 is lost.
const reportLoop = `import datetime, json, os, ssl, time, urllib.error, urllib.request
url = os.environ["KUBEFLOW_TRAINER_SERVER_URL"]
ctx = ssl.create_default_context(cafile=os.environ["KUBEFLOW_TRAINER_SERVER_CA_CERT"])
start = time.monotonic()
for i in range(1, 100):
    token = open(os.environ["KUBEFLOW_TRAINER_SERVER_TOKEN"]).read().strip()
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%%Y-%%m-%%dT%%H:%%M:%%SZ")
    body = json.dumps({"trainerStatus": {"progressPercentage": i, "lastUpdatedTime": now}}).encode()
    req = urllib.request.Request(url, data=body, method="POST", headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    sent = time.time()
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            print(f"report {i}: HTTP {resp.status}", flush=True)
    except urllib.error.HTTPError as e:
        print(f"report {i}: HTTP {e.code}", flush=True)
    except Exception as e:
        print(f"report {i}: error {e}", flush=True)
    if time.monotonic() - start >= %[1]d or i == 99:
        print(f"final report {i} sent at {sent:.3f}", flush=True)
        break
    time.sleep(0.6)
time.sleep(20)
print("reports done", flush=True)
`

var (
	reportLine = regexp.MustCompile(`(?m)^report (\d+): (HTTP (\d+)|error .*)$`)
	finalLine  = regexp.MustCompile(`(?m)^final report (\d+) sent at (\d+\.\d+)$`)
)

// reporters are TrainJobs whose trainers run reportLoop.
type reporters struct {
	l     *leg
	ns    string
	names []string
	// finals holds when each trainer sent its final report, by TrainJob name.
	finals map[string]time.Time
}

// startReporters creates len(finalAfter) reporting TrainJobs, the i-th sending its
// final report finalAfter[i] after its trainer started, and waits until each has a
// first report in its status, so that the loops are running when what is tested begins.
func startReporters(t *testing.T, l *leg, finalAfter []time.Duration) *reporters {
	t.Helper()
	r := &reporters{l: l, ns: cluster.NewNamespace(t, l.c), finals: map[string]time.Time{}}
	for i, after := range finalAfter {
		name := fmt.Sprintf("reporter-%d", i)
		script := fmt.Sprintf(reportLoop, int(after.Seconds()))
		tj := training.ShellTrainJob(r.ns, name, training.TorchRuntime, 1, training.InlineScript("/tmp/report.py", script)+"python3 /tmp/report.py")
		if _, err := l.trainers.TrainerV1alpha1().TrainJobs(r.ns).Create(context.Background(), tj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		r.names = append(r.names, name)
	}
	for _, name := range r.names {
		cluster.Eventually(t, trainingTimeout, name+"'s first report in its status", func(ctx context.Context) (bool, string) {
			tj, err := l.trainers.TrainerV1alpha1().TrainJobs(r.ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			ts := tj.Status.TrainerStatus
			return ts != nil && ts.ProgressPercentage != nil, fmt.Sprintf("trainerStatus %+v, conditions %v", ts, tj.Status.Conditions)
		})
	}
	return r
}

// verify waits for every reporter to finish, then checks that the last report each
// one had answered 200 is the progress in its status: a report the controller
// accepted is never lost, whichever replica took it and whichever went away. It logs
// how many reports were answered otherwise.
func (r *reporters) verify(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	for _, name := range r.names {
		var tj *trainer.TrainJob
		cluster.Eventually(t, trainingTimeout, name+" Complete", func(ctx context.Context) (bool, string) {
			var err error
			if tj, err = r.l.trainers.TrainerV1alpha1().TrainJobs(r.ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
				return false, err.Error()
			}
			return meta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobComplete) || meta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobFailed),
				fmt.Sprintf("conditions %v", tj.Status.Conditions)
		})
		log := r.trainerLog(t, ctx, name)
		lastAccepted, other := 0, map[string]int{}
		for _, m := range reportLine.FindAllStringSubmatch(log, -1) {
			i, _ := strconv.Atoi(m[1])
			if m[3] == "200" {
				lastAccepted = max(lastAccepted, i)
			} else {
				other[m[2]]++
			}
		}
		if lastAccepted == 0 {
			t.Fatalf("%s: no report answered 200; its log:\n%s", name, log)
		}
		if m := finalLine.FindStringSubmatch(log); m != nil {
			sec, _ := strconv.ParseFloat(m[2], 64)
			r.finals[name] = time.UnixMilli(int64(sec * 1000))
		}
		t.Logf("%s: last report answered 200: %d; other answers: %v", name, lastAccepted, other)
		cluster.Eventually(t, 30*time.Second, fmt.Sprintf("%s's status at its last accepted report, %d", name, lastAccepted), func(ctx context.Context) (bool, string) {
			got, err := r.l.trainers.TrainerV1alpha1().TrainJobs(r.ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			ts := got.Status.TrainerStatus
			return ts != nil && ts.ProgressPercentage != nil && int(*ts.ProgressPercentage) == lastAccepted, fmt.Sprintf("trainerStatus %+v", ts)
		})
	}
}

// trainerLog returns the log of the TrainJob's one trainer pod.
func (r *reporters) trainerLog(t *testing.T, ctx context.Context, name string) string {
	t.Helper()
	pods, err := r.l.c.Client().CoreV1().Pods(r.ns).List(ctx, metav1.ListOptions{LabelSelector: "jobset.sigs.k8s.io/jobset-name=" + name})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("%s: no trainer pod (%v)", name, err)
	}
	data, err := r.l.c.Client().CoreV1().Pods(r.ns).GetLogs(pods.Items[0].Name, &corev1.PodLogOptions{Container: "node"}).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
