package realnode

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainyard/trainyard/e2e/cluster"
	"github.com/trainyard/trainyard/e2e/training"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/optimization/trial"
)

var hyperparametersLine = regexp.MustCompile(`lr ([0-9.e+-]+), hidden size (\d+)`)

// TestDigitsSearchPicksTheLowestLoss is issue 26's proof on the real node: the
// OptimizationJob of examples/digits-search, cut to 3 trials of 8 epochs, 2 at a time.
// Each trial's trainer really trains with the learning rate and hidden size the search
// chose (its own log says which it used), reports its loss to the progress server, and
// the OptimizationJob names the trial whose trainer logged the lowest final loss — the
// ground truth is the trainers' logs, not the status the controller wrote. The search
// never has more than 2 trials unfinished, and each trial is ranked by its last
// epoch's loss, not by the report stored before it (docs/design/progress.md).
func TestDigitsSearchPicksTheLowestLoss(t *testing.T) {
	e := newEnv(t)
	const epochs, trials = 8, 3
	job, err := training.DigitsSearch(e.repo, e.ns, "digits", training.DigitsSearchOptions{NumTrials: trials, ParallelTrials: 2, Epochs: epochs})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.trainers.TrainerV1alpha1().OptimizationJobs(e.ns).Create(context.Background(), job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var done *trainer.OptimizationJob
	cluster.Eventually(t, 2*trainingTimeout, "the OptimizationJob finished", func(ctx context.Context) (bool, string) {
		list, err := e.trainers.TrainerV1alpha1().TrainJobs(e.ns).List(ctx, metav1.ListOptions{LabelSelector: trial.LabelOptimizationJob + "=digits"})
		if err != nil {
			return false, err.Error()
		}
		unfinished := 0
		for _, tj := range list.Items {
			if state, _ := trial.Outcome(&tj, "loss"); state == trial.Running {
				unfinished++
			}
		}
		if unfinished > 2 {
			t.Fatalf("%d trials unfinished at once; parallelTrials is 2", unfinished)
		}
		oj, err := e.trainers.TrainerV1alpha1().OptimizationJobs(e.ns).Get(ctx, "digits", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		done = oj
		finished := meta.IsStatusConditionTrue(oj.Status.Conditions, trainer.OptimizationJobComplete) ||
			meta.IsStatusConditionTrue(oj.Status.Conditions, trainer.OptimizationJobFailed)
		return finished, fmt.Sprintf("%d trials, %d unfinished; conditions %+v; %s", len(list.Items), unfinished, oj.Status.Conditions, e.podStates(ctx))
	})
	complete := meta.FindStatusCondition(done.Status.Conditions, trainer.OptimizationJobComplete)
	if complete == nil || complete.Status != metav1.ConditionTrue {
		t.Fatalf("OptimizationJob not Complete: %+v", done.Status.Conditions)
	}

	best, bestLoss := "", 0.0
	for i := range trials {
		name := trial.Name("digits", i)
		tj, err := e.get(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		rec, err := trial.Read(tj)
		if err != nil {
			t.Fatal(err)
		}
		log := e.nodeZeroLog(t, name)
		used := hyperparametersLine.FindStringSubmatch(log)
		lines := epochLine.FindAllStringSubmatch(log, -1)
		if used == nil || len(lines) != epochs {
			t.Fatalf("trial %s's trainer logged hyperparameters %v and %d epochs, want %d; its log:\n%s", name, used, len(lines), epochs, log)
		}
		if want := fmt.Sprintf("lr %s, hidden size %s", parameter(t, rec, "lr"), parameter(t, rec, "hidden_size")); !sameHyperparameters(used, rec) {
			t.Errorf("trial %s's trainer used %q; its parameters say %s", name, used[0], want)
		}
		final := lines[len(lines)-1][2]
		state, reported := trial.Outcome(tj, "loss")
		if logged, _ := strconv.ParseFloat(final, 64); state != trial.Succeeded || reported != logged {
			t.Errorf("trial %s: trainerStatus loss %v (%s), its trainer's final epoch logged %s", name, reported, state, final)
		}
		t.Logf("trial %s: %s → final loss %s", name, used[0], final)
		if loss, _ := strconv.ParseFloat(final, 64); best == "" || loss < bestLoss {
			best, bestLoss = name, loss
		}
	}
	if r := done.Status.Result; r == nil || r.TrainJobName != best {
		t.Fatalf("result %+v; the lowest final loss was %s's (%v)", done.Status.Result, best, bestLoss)
	}
	t.Logf("Complete: %s", complete.Message)
}

// nodeZeroLog returns the log of the node-0 pod (torchrun's rank 0) of TrainJob name.
func (e *env) nodeZeroLog(t *testing.T, name string) string {
	t.Helper()
	for _, p := range e.trainerPods(t, name) {
		if strings.HasPrefix(p.Name, name+"-node-0-0") {
			return podLog(t, e.c, e.ns, p.Name, "node")
		}
	}
	t.Fatalf("TrainJob %s has no node-0 pod: %s", name, e.podStates(context.Background()))
	return ""
}

// parameter returns the value of parameter name in rec, failing the test without one.
func parameter(t *testing.T, rec trial.Record, name string) string {
	t.Helper()
	for _, p := range rec.Parameters {
		if p.Name == name {
			return p.Value
		}
	}
	t.Fatalf("trial %d has no parameter %s: %+v", rec.Index, name, rec.Parameters)
	return ""
}

// sameHyperparameters reports whether the "lr X, hidden size H" a trainer logged
// (used, the regexp's match) are the values of rec's parameters as numbers.
func sameHyperparameters(used []string, rec trial.Record) bool {
	lr, err1 := strconv.ParseFloat(used[1], 64)
	hidden := used[2]
	for _, p := range rec.Parameters {
		switch p.Name {
		case "lr":
			want, err := strconv.ParseFloat(p.Value, 64)
			if err != nil || err1 != nil || relativeDiff(lr, want) > 1e-5 {
				return false
			}
		case "hidden_size":
			if p.Value != hidden {
				return false
			}
		}
	}
	return true
}

func relativeDiff(a, b float64) float64 {
	d := a - b
	if d < 0 {
		d = -d
	}
	return d / max(b, -b, 1e-12)
}
