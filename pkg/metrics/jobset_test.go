package metrics

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func TestUIDSetForgetsOldestFirst(t *testing.T) {
	s := newUIDSet(2)
	steps := []struct {
		uid  types.UID
		want bool
	}{
		{"a", true},
		{"b", true},
		{"a", false}, // remembered
		{"c", true},  // evicts a
		{"b", false}, // still remembered
		{"a", true},  // forgotten, so new again; evicts b
		{"c", false},
		{"b", true},
	}
	for i, step := range steps {
		if got := s.insert(step.uid); got != step.want {
			t.Errorf("step %d: insert(%q) = %v, want %v", i, step.uid, got, step.want)
		}
	}
	if len(s.seen) != 2 {
		t.Errorf("remembered %d UIDs, want the capacity 2", len(s.seen))
	}
}
