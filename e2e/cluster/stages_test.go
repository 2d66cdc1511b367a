package cluster

import (
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// stage holds the fields of a kwok Stage these tests look at.
type stage struct {
	Metadata struct{ Name string }
	Spec     struct {
		Selector struct {
			MatchExpressions []struct{ Key, Operator string }
		}
		Delay struct {
			DurationMilliseconds int64
			DurationFrom         struct{ ExpressionFrom string }
		}
	}
}

func podStages(t *testing.T) map[string]stage {
	t.Helper()
	data, err := assets.ReadFile("assets/pod-stages.yaml")
	if err != nil {
		t.Fatal(err)
	}
	stages := map[string]stage{}
	if err := forEachYAMLDoc(data, func(doc []byte) error {
		var s stage
		if err := yaml.Unmarshal(doc, &s); err != nil {
			return err
		}
		stages[s.Metadata.Name] = s
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return stages
}

// The Go constants document the stages; keep them in step.
func TestPodStagesMatchTheDocumentedBehaviour(t *testing.T) {
	stages := podStages(t)
	complete, fail := stages["trainyard-pod-complete"], stages["trainyard-pod-fail"]

	if got := time.Duration(complete.Spec.Delay.DurationMilliseconds) * time.Millisecond; got != DefaultPodCompleteDelay {
		t.Errorf("pod-complete default delay %s, DefaultPodCompleteDelay says %s", got, DefaultPodCompleteDelay)
	}
	if !strings.Contains(complete.Spec.Delay.DurationFrom.ExpressionFrom, AnnotationCompleteDelay) {
		t.Errorf("pod-complete delay comes from %q, want annotation %s", complete.Spec.Delay.DurationFrom.ExpressionFrom, AnnotationCompleteDelay)
	}
	if !strings.Contains(fail.Spec.Delay.DurationFrom.ExpressionFrom, AnnotationFailAfter) {
		t.Errorf("pod-fail delay comes from %q, want annotation %s", fail.Spec.Delay.DurationFrom.ExpressionFrom, AnnotationFailAfter)
	}
	excluded := false
	for _, e := range complete.Spec.Selector.MatchExpressions {
		if strings.Contains(e.Key, AnnotationFailAfter) && e.Operator == "DoesNotExist" {
			excluded = true
		}
	}
	if !excluded {
		t.Errorf("pod-complete must not match pods annotated %s, or a failing pod could succeed", AnnotationFailAfter)
	}
}
