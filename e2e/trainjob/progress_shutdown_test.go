package trainjob

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/trainyard/trainyard/e2e/cluster"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/progress/wire"
)

// TestProgressReportsWrittenAtShutdown (issue 25, item 3): a report the progress server
// answered 200 is written even when the controller stops right after it. The report
// comes inside the 10 s write period of the one before, so it is pending, not written,
// when SIGTERM arrives; the stopping controller closes its server, then writes what is
// pending before it exits, instead of dropping it with its pipeline. After the
// shutdown the server answers no report.
func TestProgressReportsWrittenAtShutdown(t *testing.T) {
	e := newEnv(t)
	ctrl := startController(t, e.c)
	e.createRuntime(t, "reporting", map[string]string{cluster.AnnotationCompleteDelay: "30m"})
	e.createTrainJob(t, trainJob("last-words", trainer.TrainingRuntimeKind, "reporting"))
	pod := e.waitPods(t, "last-words", 1)[0]
	url := envOf(podContainer(t, pod, trainer.ContainerNode), wire.EnvServerURL)
	client := progressClient(t, e.progressCA(t), ctrl.progressAddr)
	token := e.podToken(t, pod, wire.Audience(e.ns, "last-words"))
	start := time.Now().UTC().Truncate(time.Second)
	report := func(percent int, at time.Time) string {
		return `{"trainerStatus":{"progressPercentage":` + fmt.Sprint(percent) + `,"lastUpdatedTime":"` + at.Format(time.RFC3339) + `"}}`
	}

	if code, body := postReport(t, client, url, token, report(40, start)); code != http.StatusOK {
		t.Fatalf("first report: %d %s", code, body)
	}
	e.waitTrainerStatus(t, "last-words", trainer.TrainerStatus{ProgressPercentage: ptr.To[int32](40), LastUpdatedTime: ptr.To(metav1.NewTime(start))})
	if code, body := postReport(t, client, url, token, report(100, start.Add(time.Second))); code != http.StatusOK {
		t.Fatalf("last report: %d %s", code, body)
	}
	stopping := time.Now()
	ctrl.stop(t)
	t.Logf("controller stopped %v after the last report was answered", time.Since(stopping).Round(time.Millisecond))

	tj, err := e.trainers.TrainerV1alpha1().TrainJobs(e.ns).Get(context.Background(), "last-words", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ts := tj.Status.TrainerStatus; ts == nil || !ptr.Equal(ts.ProgressPercentage, ptr.To[int32](100)) {
		got := "none"
		if ts != nil {
			got = fmt.Sprintf("%d%% at %s", ptr.Deref(ts.ProgressPercentage, -1), ts.LastUpdatedTime)
		}
		t.Errorf("trainerStatus after the controller stopped: %s; want the last report (100%%), answered 200 before SIGTERM", got)
	}
	if code, _, _ := postReportOnce(client, url, token, report(100, start.Add(2*time.Second))); code == http.StatusOK {
		t.Error("a report was answered 200 after the controller stopped")
	}
}
