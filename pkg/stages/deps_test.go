package stages

import (
	"testing"

	"github.com/trainyard/trainyard/pkg/progress/wire"
	"github.com/trainyard/trainyard/pkg/stages/mlpolicy"
)

func names(plugins []mlpolicy.Plugin) []string {
	out := make([]string, len(plugins))
	for i, p := range plugins {
		out[i] = p.Name()
	}
	return out
}

func TestPlugins(t *testing.T) {
	defaults := names(mlpolicy.DefaultPlugins(mlpolicy.SecretNames{}))
	off := names(Plugins(Options{}))
	if len(off) != len(defaults) {
		t.Fatalf("Plugins without ProgressURL = %v, want the defaults %v", off, defaults)
	}
	on := names(Plugins(Options{ProgressURL: func(_, _ string) string { return "https://x" }}))
	if len(on) != len(defaults)+1 || on[len(on)-1] != wire.FeatureGate {
		t.Errorf("Plugins with ProgressURL = %v, want the defaults %v then %s", on, defaults, wire.FeatureGate)
	}
	for i := range defaults {
		if on[i] != defaults[i] {
			t.Errorf("Plugins with ProgressURL = %v, want the defaults %v first, in order", on, defaults)
			break
		}
	}
}
