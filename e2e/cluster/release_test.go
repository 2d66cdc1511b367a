package cluster

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLookupKubeRelease(t *testing.T) {
	for in, want := range map[string]string{"": "1.36", "1.36": "1.36", "1.37": "1.37", "v1.37": "1.37"} {
		r, err := LookupKubeRelease(in)
		if err != nil || r.Version != want {
			t.Errorf("LookupKubeRelease(%q) = %q, %v; want %q", in, r.Version, err, want)
		}
	}
	_, err := LookupKubeRelease("1.38")
	if err == nil || !strings.Contains(err.Error(), `"1.38"`) || !strings.Contains(err.Error(), "1.36 or 1.37") {
		t.Errorf("LookupKubeRelease(1.38) error = %v, want one naming 1.38 and the versions there are", err)
	}
}

// Kubernetes 1.37 differs in what its components are started with: its
// GangScheduling gate is gone (an unknown gate stops a component), PodGroup
// claims need DRAWorkloadResourceClaims, and the Workload API is v1beta1.
func TestKubeReleaseStartFlags(t *testing.T) {
	for version, want := range map[string]struct{ gates, runtimeConfig, workloadAPI string }{
		"1.36": {"GenericWorkload=true,GangScheduling=true,DynamicResourceAllocation=true", "scheduling.k8s.io/v1alpha2=true", "scheduling.k8s.io/v1alpha2"},
		"1.37": {"GenericWorkload=true,DRAWorkloadResourceClaims=true,DynamicResourceAllocation=true", "scheduling.k8s.io/v1beta1=true", "scheduling.k8s.io/v1beta1"},
	} {
		opts := Options{KubeVersion: version, Build: BuildOptions{RepoRoot: t.TempDir(), CacheDir: t.TempDir()}, StateDir: t.TempDir()}
		if err := opts.withDefaults(); err != nil {
			t.Fatal(err)
		}
		if opts.FeatureGates != want.gates || opts.Build.KubeVersion != version {
			t.Errorf("%s: feature gates %q, build version %q; want %q, %q", version, opts.FeatureGates, opts.Build.KubeVersion, want.gates, version)
		}
		c := &Cluster{opts: opts}
		if got := c.release().RuntimeConfig; got != want.runtimeConfig {
			t.Errorf("%s: runtime config %q, want %q", version, got, want.runtimeConfig)
		}
		if got := c.WorkloadAPI().String(); got != want.workloadAPI {
			t.Errorf("%s: Workload API %q, want %q", version, got, want.workloadAPI)
		}
	}
	opts := Options{KubeVersion: "1.35", Build: BuildOptions{RepoRoot: t.TempDir()}, StateDir: t.TempDir()}
	if err := opts.withDefaults(); err == nil {
		t.Error("Options with KubeVersion 1.35 accepted")
	}
}

// The 1.37 servers come from their own build module and cache folder, stamped
// v1.37.2; everything else, clients included, is the default release's, so a
// cache holding 1.36 only builds the three 1.37 servers.
func TestBuild137BuildsOnlyItsServers(t *testing.T) {
	opts := BuildOptions{RepoRoot: fakeRepo(t), CacheDir: t.TempDir(), LogDir: t.TempDir(), GoCommand: "/bin/false"}
	fakeCache(t, &opts)
	if err := os.MkdirAll(filepath.Join(opts.RepoRoot, "hack", "kube-bins", "kubernetes-1.37"), 0o755); err != nil {
		t.Fatal(err)
	}
	opts.KubeVersion = KubeVersion137

	_, err := Build(context.Background(), opts)

	// The failing go command proves what was rebuilt.
	if err == nil || !strings.Contains(err.Error(), "building kubernetes v1.37.2: go build") {
		t.Fatalf("got %v, want a failed build of kubernetes v1.37.2 alone", err)
	}
	for _, other := range []string{"etcd", "kubectl", "jobset", "kwok", "v1.36.3"} {
		if strings.Contains(err.Error(), other) {
			t.Errorf("a cached source was rebuilt for 1.37 (%s): %v", other, err)
		}
	}
	srcs, err := opts.sources()
	if err != nil {
		t.Fatal(err)
	}
	for _, src := range srcs {
		if src.Name != "kubernetes" {
			continue
		}
		if src.buildModule() != "kubernetes-1.37" || !strings.HasPrefix(filepath.Base(opts.sourceDir(src)), "kubernetes-v1.37.2-") {
			t.Errorf("1.37 servers built in %q into %s, want kube-bins/kubernetes-1.37 and kubernetes-v1.37.2-<recipe>", src.buildModule(), opts.sourceDir(src))
		}
		flags := strings.Join(buildFlags(src), " ")
		for _, want := range []string{"version.gitVersion=v1.37.2", "version.gitMinor=37", "version.buildDate=2026-10-27T12:01:04Z"} {
			if !strings.Contains(flags, want) {
				t.Errorf("1.37 build flags %q lack %s", flags, want)
			}
		}
	}
}
