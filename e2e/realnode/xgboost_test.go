package realnode

import (
	"regexp"
	"strconv"
	"testing"

	"github.com/trainyard/trainyard/e2e/training"
)

// TestXGBoostTrainsDistributedWithTheTrackerOnNodeZero: upstream's xgboost-distributed
// runtime, unchanged, runs a TrainJob of 2 nodes; node 0 starts the Rabit tracker at
// the DMLC_TRACKER_URI and DMLC_TRACKER_PORT the controller injects, both nodes join
// it with their DMLC_TASK_ID, and XGBoost's collective all-reduces their gradient
// histograms: both ranks end with the same model, so the same test error, and it
// learned (error well below 0.9, chance on 10 classes).
func TestXGBoostTrainsDistributedWithTheTrackerOnNodeZero(t *testing.T) {
	e := newEnv(t)
	e.installRuntime(t, xgboostRuntimeFile, nil)
	tj, err := training.XGBoostTrainJob(e.repo, e.ns, "xgb", training.XGBoostOptions{Nodes: 2, Rounds: 20})
	if err != nil {
		t.Fatal(err)
	}
	e.create(t, tj)
	e.waitComplete(t, tj.Name)
	pods := e.trainerPods(t, tj.Name)
	if len(pods) != 2 {
		t.Fatalf("%d pods, want 2", len(pods))
	}
	done := regexp.MustCompile(`done: rank (\d) of 2, 20 rounds, test error ([0-9.]+)`)
	errs := map[string]string{}
	for _, p := range pods {
		log := podLog(t, e.c, e.ns, p.Name, "node")
		m := done.FindStringSubmatch(log)
		if m == nil {
			t.Fatalf("pod %s did not finish training; its log:\n%s", p.Name, log)
		}
		if !regexp.MustCompile(`rank ` + m[1] + ` of 2: joined tracker`).MatchString(log) {
			t.Errorf("pod %s: no rank %s of a world of 2 joined the tracker; its log:\n%s", p.Name, m[1], log)
		}
		errs[m[1]] = m[2]
	}
	if len(errs) != 2 || errs["0"] != errs["1"] {
		t.Fatalf("ranks and test errors %v, want ranks 0 and 1 with the same error (one model)", errs)
	}
	if e, _ := strconv.ParseFloat(errs["0"], 64); e > 0.2 {
		t.Errorf("test error %s, want under 0.2", errs["0"])
	}
	t.Logf("2 ranks, one model, test error %s", errs["0"])
}
