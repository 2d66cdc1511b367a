package progress

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	configv1alpha1 "github.com/trainyard/trainyard/pkg/apis/config/v1alpha1"
	"github.com/trainyard/trainyard/pkg/progress/wire"
)

// defaulted returns the default configuration, changed by edit.
func defaulted(t *testing.T, edit func(*configv1alpha1.Configuration)) *configv1alpha1.Configuration {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := configv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	cfg := &configv1alpha1.Configuration{}
	scheme.Default(cfg)
	if edit != nil {
		edit(cfg)
	}
	return cfg
}

func TestEnabledAndServing(t *testing.T) {
	cases := map[string]struct {
		edit             func(*configv1alpha1.Configuration)
		enabled, serving bool
	}{
		"defaults: on": {enabled: true, serving: true},
		"gate set on": {
			edit:    func(c *configv1alpha1.Configuration) { c.FeatureGates = map[string]bool{wire.FeatureGate: true} },
			enabled: true, serving: true,
		},
		"other gates only: default": {
			edit:    func(c *configv1alpha1.Configuration) { c.FeatureGates = map[string]bool{"Other": false} },
			enabled: true, serving: true,
		},
		"gate off": {
			edit: func(c *configv1alpha1.Configuration) { c.FeatureGates = map[string]bool{wire.FeatureGate: false} },
		},
		"gate on, server off": {
			edit:    func(c *configv1alpha1.Configuration) { c.StatusServer.BindAddress = "0" },
			enabled: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := defaulted(t, tc.edit)
			if got := Enabled(cfg); got != tc.enabled {
				t.Errorf("Enabled = %v, want %v", got, tc.enabled)
			}
			if got := Serving(cfg); got != tc.serving {
				t.Errorf("Serving = %v, want %v", got, tc.serving)
			}
			url, err := URLFunc(cfg, "trainyard-system")
			if err != nil {
				t.Fatalf("URLFunc: %v", err)
			}
			if (url != nil) != tc.serving {
				t.Errorf("URLFunc returned a function: %v, want %v", url != nil, tc.serving)
			}
		})
	}
}

func TestURLFunc(t *testing.T) {
	cfg := defaulted(t, func(c *configv1alpha1.Configuration) {
		c.Webhook.ServiceName = "ty-webhook"
		c.StatusServer.BindAddress = "0.0.0.0:12443"
	})
	url, err := URLFunc(cfg, "ml-system")
	if err != nil {
		t.Fatal(err)
	}
	want := "https://ty-webhook.ml-system.svc:12443/apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainjobs/llm/status"
	if got := url("team-a", "llm"); got != want {
		t.Errorf("URL = %q, want %q", got, want)
	}

	// The defaults give upstream's port.
	url, err = URLFunc(defaulted(t, nil), "trainyard")
	if err != nil {
		t.Fatal(err)
	}
	if got := url("ns", "j"); !strings.HasPrefix(got, "https://trainyard-webhook.trainyard.svc:10443/") {
		t.Errorf("default URL = %q", got)
	}

	_, err = URLFunc(defaulted(t, func(c *configv1alpha1.Configuration) { c.StatusServer.BindAddress = ":https" }), "ns")
	if err == nil || !strings.Contains(err.Error(), "statusServer.bindAddress") {
		t.Errorf("URLFunc with a named port: error %v, want one naming statusServer.bindAddress", err)
	}
}

func TestPort(t *testing.T) {
	for addr, want := range map[string]int{":10443": 10443, "127.0.0.1:1": 1, "[::1]:65535": 65535} {
		if got, err := Port(addr); err != nil || got != want {
			t.Errorf("Port(%q) = %d, %v; want %d", addr, got, err, want)
		}
	}
	for _, addr := range []string{"", "0", "10443", ":0", ":65536", ":https", "host:"} {
		if got, err := Port(addr); err == nil {
			t.Errorf("Port(%q) = %d, want an error", addr, got)
		}
	}
}
