package cluster

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// fakeModule writes a module source tree with a main package cmd/tool (main.go,
// util.go) and a go command that reports it as the module's download folder.
func fakeModule(t *testing.T) (opts BuildOptions, src Source) {
	t.Helper()
	modDir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(modDir, "cmd", "tool"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{
		"main.go": "package main\n\nfunc main() { path := \"/etc/tool\"; _ = path }\n",
		"util.go": "package main\n",
	} {
		if err := os.WriteFile(filepath.Join(modDir, "cmd", "tool", name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	goCmd := filepath.Join(t.TempDir(), "go")
	script := "#!/bin/sh\necho '{\"Dir\": \"" + modDir + "\"}'\n"
	if err := os.WriteFile(goCmd, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	opts = BuildOptions{RepoRoot: t.TempDir(), GoCommand: goCmd}
	src = Source{
		Name: "tool", Module: "example.com/tool", Version: "v1.0.0",
		Binaries: map[string]string{"tool": "example.com/tool/cmd/tool"},
		Patches:  []SourcePatch{{File: "cmd/tool/main.go", Old: `"/etc/tool"`, New: `"/tmp/tool"`, Why: "test"}},
	}
	return opts, src
}

func TestWriteOverlayBuildsAPatchedCopyOfTheMainPackage(t *testing.T) {
	opts, src := fakeModule(t)

	overlayFile, pkgs, err := opts.writeOverlay(context.Background(), src, []string{"example.com/tool/cmd/tool"}, t.TempDir(), io.Discard)

	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"./patched/cmd/tool"}; strings.Join(pkgs, ",") != strings.Join(want, ",") {
		t.Errorf("packages %v, want %v", pkgs, want)
	}
	data, err := os.ReadFile(overlayFile)
	if err != nil {
		t.Fatal(err)
	}
	var overlay struct{ Replace map[string]string }
	if err := json.Unmarshal(data, &overlay); err != nil {
		t.Fatal(err)
	}
	copyDir := filepath.Join(opts.RepoRoot, "hack", "kube-bins", "tool", "patched", "cmd", "tool")
	if len(overlay.Replace) != 2 {
		t.Fatalf("overlay %v, want both files of the package", overlay.Replace)
	}
	main, err := os.ReadFile(overlay.Replace[filepath.Join(copyDir, "main.go")])
	if err != nil {
		t.Fatalf("patched main.go: %v (overlay %v)", err, overlay.Replace)
	}
	if !strings.Contains(string(main), `"/tmp/tool"`) || strings.Contains(string(main), `"/etc/tool"`) {
		t.Errorf("patched main.go:\n%s", main)
	}
	if _, ok := overlay.Replace[filepath.Join(copyDir, "util.go")]; !ok {
		t.Errorf("util.go not copied: %v", overlay.Replace)
	}
}

func TestWriteOverlayRefusesAPatchThatNoLongerApplies(t *testing.T) {
	opts, src := fakeModule(t)
	src.Patches[0].Old = `"/etc/other"`

	_, _, err := opts.writeOverlay(context.Background(), src, []string{"example.com/tool/cmd/tool"}, t.TempDir(), io.Discard)

	if err == nil || !strings.Contains(err.Error(), "occurs 0 times") {
		t.Errorf("got %v, want an error saying the patch does not apply", err)
	}
}

func TestPatchesAndStampChangeTheRecipe(t *testing.T) {
	opts, src := fakeModule(t)
	base := opts.recipe(src)
	patched := src
	patched.Patches = []SourcePatch{{File: "cmd/tool/main.go", Old: `"/etc/tool"`, New: `"/var/tool"`}}
	stamped := src
	stamped.Stamp = map[string]string{"example.com/tool/version.v": "v1.0.0"}

	for name, s := range map[string]Source{"patch": patched, "stamp": stamped} {
		if opts.recipe(s) == base {
			t.Errorf("a changed %s leaves the recipe, and so the cache folder, unchanged", name)
		}
	}
}

func TestKueueConfiguration(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration
	}{{"without waitForPodsReady", 0}, {"with waitForPodsReady", 20 * time.Second}} {
		t.Run(tc.name, func(t *testing.T) {
			var cfg struct {
				Kind    string
				Webhook struct {
					Host    string
					Port    int
					CertDir string `json:"certDir"`
				}
				Integrations     struct{ Frameworks []string }
				FeatureGates     map[string]bool `json:"featureGates"`
				WaitForPodsReady *struct {
					Timeout        string
					BlockAdmission bool `json:"blockAdmission"`
				} `json:"waitForPodsReady"`
			}
			if err := yaml.Unmarshal([]byte(KueueConfiguration(8081, 9443, "/certs", tc.timeout)), &cfg); err != nil {
				t.Fatal(err)
			}
			if cfg.Kind != "Configuration" || cfg.Webhook.Host != "127.0.0.1" || cfg.Webhook.Port != 9443 || cfg.Webhook.CertDir != "/certs" {
				t.Errorf("configuration %+v: want a Configuration serving webhooks on 127.0.0.1:9443 from /certs", cfg)
			}
			if strings.Join(cfg.Integrations.Frameworks, ",") != KueueTrainJobFramework {
				t.Errorf("frameworks %v, want only %s", cfg.Integrations.Frameworks, KueueTrainJobFramework)
			}
			if on, set := cfg.FeatureGates["VisibilityOnDemand"]; !set || on {
				t.Errorf("the visibility server is on (it listens on 0.0.0.0:8082)")
			}
			switch {
			case tc.timeout == 0 && cfg.WaitForPodsReady != nil:
				t.Errorf("waitForPodsReady %+v, want none", *cfg.WaitForPodsReady)
			case tc.timeout > 0 && (cfg.WaitForPodsReady == nil || cfg.WaitForPodsReady.Timeout != "20s" || cfg.WaitForPodsReady.BlockAdmission):
				t.Errorf("waitForPodsReady %+v, want timeout 20s without blocking admission", cfg.WaitForPodsReady)
			}
		})
	}
}
