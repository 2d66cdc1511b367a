package trainjob

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard/trainyard/e2e/cluster"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/progress/wire"
)

// The headers of `kubectl get trainjobs` and of `-o wide` (docs/compatibility.md,
// "Printer columns").
var (
	trainJobHeaders     = []string{"NAME", "STATE", "REASON", "SUSPENDED", "PROGRESS", "ETA", "AGE"}
	trainJobWideHeaders = append(slices.Clone(trainJobHeaders), "RUNTIME", "NUMNODES", "STARTED", "COMPLETED")
)

// In a row waitTrainJobRow waits for, anyAge stands for a cell that is an age (STARTED,
// COMPLETED), anyCell for any cell, empty or not.
const (
	anyAge  = "<age>"
	anyCell = "<any>"
)

// ageCell is the shape of an AGE cell in a test's lifetime: "45s", "2m", "2m5s".
var ageCell = regexp.MustCompile(`^(\d+s|\d+m(\d+s)?)$`)

// TestKubectlGetTrainJobs (issue 29): real `kubectl get trainjobs`, plain and -o wide,
// on one TrainJob through its life as a user drives it with kubectl — created before
// its runtime, running, suspended, resumed, reporting progress as a trainer pod does,
// Complete — with every column's text checked at each step. Upstream's State column
// (the type of the last condition) read RuntimeResolved while this TrainJob ran, then
// Suspended from the suspension to the end.
func TestKubectlGetTrainJobs(t *testing.T) {
	e := newEnv(t)
	ctrl := startController(t, e.c)
	k := newKubectl(t, e.c)

	// The runtime comes after the TrainJob, so the TrainJob first waits for it. Its pods
	// run 60 s from their start: long enough for the steps before the suspension and
	// after the resume, some seconds each.
	tj := trainJob("mnist", trainer.TrainingRuntimeKind, "reporting").withNumNodes(2)
	tj.TypeMeta = metav1.TypeMeta{APIVersion: trainer.SchemeGroupVersion.String(), Kind: trainer.TrainJobKind}
	tj.Namespace = e.ns
	k.mustApply(t, tj.TrainJob)
	row := map[string]string{"NAME": "mnist", "STATE": "", "REASON": "TrainingRuntimeNotFound", "SUSPENDED": "false",
		"PROGRESS": "", "ETA": "", "RUNTIME": "reporting", "NUMNODES": "2", "STARTED": "", "COMPLETED": ""}
	k.waitTrainJobRow(t, e.ns, row)

	e.createRuntime(t, "reporting", map[string]string{cluster.AnnotationCompleteDelay: "60s"})
	e.waitCondition(t, "mnist", "RuntimeResolved", metav1.ConditionTrue, time.Minute)
	first := e.waitPods(t, "mnist", 2)
	row["REASON"] = ""       // RuntimeResolved=True is the only condition: nothing to show
	row["STARTED"] = anyCell // written with the first jobsStatus, which may come later
	k.waitTrainJobRow(t, e.ns, row)

	k.mustRun(t, "patch", "trainjob", "mnist", "-n", e.ns, "--type=merge", "-p", `{"spec":{"suspend":true}}`)
	row["STATE"], row["SUSPENDED"], row["STARTED"] = "Suspended", "true", "" // startTime cleared
	k.waitTrainJobRow(t, e.ns, row)

	k.mustRun(t, "patch", "trainjob", "mnist", "-n", e.ns, "--type=merge", "-p", `{"spec":{"suspend":false}}`)
	e.waitNoCondition(t, "mnist", trainer.TrainJobSuspended, time.Minute)
	row["STATE"], row["SUSPENDED"], row["STARTED"] = "", "false", anyAge // the resume removed Suspended; startTime the resume
	k.waitTrainJobRow(t, e.ns, row)

	// The resumed run's pods report as a trainer does: to the URL the controller
	// injected, with a token minted for the pod, trusting the CA the pod mounts.
	pod := e.waitNewPod(t, "mnist", first)
	url := envOf(podContainer(t, pod, trainer.ContainerNode), wire.EnvServerURL)
	client := progressClient(t, e.progressCA(t), ctrl.progressAddr)
	token := e.podToken(t, pod, wire.Audience(e.ns, "mnist"))
	report := func(percent, remaining int, at time.Time) {
		t.Helper()
		body := fmt.Sprintf(`{"trainerStatus":{"progressPercentage":%d,"estimatedRemainingSeconds":%d,"metrics":[{"name":"loss","value":"0.25"}],"lastUpdatedTime":%q}}`,
			percent, remaining, at.UTC().Format(time.RFC3339))
		if code, answer := postReport(t, client, url, token, body); code != http.StatusOK {
			t.Fatalf("progress report %s: %d %s", body, code, answer)
		}
	}
	start := time.Now().Truncate(time.Second)
	report(42, 120, start)
	row["PROGRESS"], row["ETA"] = "42", "120"
	k.waitTrainJobRow(t, e.ns, row)
	t.Logf("a running TrainJob:\n$ kubectl get trainjobs\n%s\n$ kubectl get trainjobs -o wide\n%s",
		k.mustRun(t, "get", "trainjobs", "-n", e.ns).stdout, k.mustRun(t, "get", "trainjobs", "-n", e.ns, "-o", "wide").stdout)

	// A later report within the write period (10 s) lands when the period ends.
	report(97, 3, start.Add(time.Second))
	row["PROGRESS"], row["ETA"] = "97", "3"
	k.waitTrainJobRow(t, e.ns, row)

	e.waitCondition(t, "mnist", trainer.TrainJobComplete, metav1.ConditionTrue, 2*time.Minute)
	row["STATE"], row["COMPLETED"] = "Complete", anyAge // progress and ETA stay the trainer's last report
	k.waitTrainJobRow(t, e.ns, row)
}

// waitNewPod waits for a pod of the JobSet that is not one of old and not being
// deleted — one of the pods a resume started — and returns it.
func (e *env) waitNewPod(t *testing.T, jobSet string, old []corev1.Pod) corev1.Pod {
	t.Helper()
	oldUIDs := map[types.UID]bool{}
	for _, p := range old {
		oldUIDs[p.UID] = true
	}
	var found corev1.Pod
	cluster.Eventually(t, time.Minute, "a new pod of JobSet "+jobSet, func(ctx context.Context) (bool, string) {
		list, err := e.c.Client().CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: jobsetv1alpha2.JobSetNameKey + "=" + jobSet})
		if err != nil {
			return false, err.Error()
		}
		for _, p := range list.Items {
			if !oldUIDs[p.UID] && p.DeletionTimestamp == nil {
				found = p
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d pods, none new", len(list.Items))
	})
	return found
}

// mustRun runs kubectl args and fails the test unless kubectl succeeds.
func (k *kubectl) mustRun(t *testing.T, args ...string) kubectlResult {
	t.Helper()
	r := k.run(t, nil, args...)
	if r.exitCode != 0 {
		t.Fatalf("%s", r)
	}
	return r
}

// waitTrainJobRow waits until `kubectl get trainjobs -n ns` and `kubectl get trainjobs
// -n ns -o wide` both have the headers of trainJobHeaders and trainJobWideHeaders and
// a row whose cells are want (by header; "" for an empty cell) and whose AGE is an age;
// want covers every other column of -o wide. It fails the test with kubectl's last
// output after a minute.
func (k *kubectl) waitTrainJobRow(t *testing.T, ns string, want map[string]string) {
	t.Helper()
	cluster.Eventually(t, time.Minute, fmt.Sprintf("kubectl get trainjobs showing %v", want), func(context.Context) (bool, string) {
		for _, wide := range []bool{false, true} {
			args, headers := []string{"get", "trainjobs", "-n", ns}, trainJobHeaders
			if wide {
				args, headers = append(args, "-o", "wide"), trainJobWideHeaders
			}
			r := k.run(t, nil, args...)
			if r.exitCode != 0 {
				return false, r.String()
			}
			gotHeaders, rows := parseTable(r.stdout)
			if !slices.Equal(gotHeaders, headers) {
				t.Fatalf("kubectl %s: headers %q; want %q\n%s", strings.Join(args, " "), gotHeaders, headers, r.stdout)
			}
			if len(rows) != 1 {
				return false, r.String()
			}
			got := rows[0]
			if !ageCell.MatchString(got["AGE"]) {
				t.Fatalf("kubectl %s: AGE %q is no age\n%s", strings.Join(args, " "), got["AGE"], r.stdout)
			}
			delete(got, "AGE")
			wantHere := maps.Clone(want)
			if !wide {
				for _, h := range trainJobWideHeaders[len(trainJobHeaders):] {
					delete(wantHere, h)
				}
			}
			for h, w := range wantHere {
				if (w == anyAge && ageCell.MatchString(got[h])) || w == anyCell {
					wantHere[h] = got[h]
				}
			}
			if !maps.Equal(got, wantHere) {
				return false, fmt.Sprintf("kubectl %s:\n%s", strings.Join(args, " "), r.stdout)
			}
		}
		return true, ""
	})
}

// parseTable splits kubectl's table output into its headers and its rows, each row's
// cells by header. kubectl aligns every cell at its header's first column and leaves
// an empty cell blank, so a cell is the text under its header up to the next header.
func parseTable(out string) ([]string, []map[string]string) {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) == 0 || lines[0] == "" {
		return nil, nil
	}
	bounds := regexp.MustCompile(`\S+`).FindAllStringIndex(lines[0], -1)
	headers := make([]string, len(bounds))
	for i, b := range bounds {
		headers[i] = lines[0][b[0]:b[1]]
	}
	var rows []map[string]string
	for _, line := range lines[1:] {
		row := map[string]string{}
		for i, b := range bounds {
			from, to := min(b[0], len(line)), len(line)
			if i+1 < len(bounds) {
				to = min(bounds[i+1][0], len(line))
			}
			row[headers[i]] = strings.TrimSpace(line[from:to])
		}
		rows = append(rows, row)
	}
	return headers, rows
}
