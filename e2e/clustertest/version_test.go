package clustertest

import (
	"context"
	"encoding/json"
	"os/exec"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/version"
	"k8s.io/utils/ptr"

	"github.com/trainyard/trainyard/e2e/cluster"
)

// TestKubectlVersionReportsTheRelease checks that the binaries are stamped as
// a release is (issue 16): unstamped ones say "v0.0.0-master+$Format:%H$",
// which Kueue refuses at start-up and kubectl's skew check and Helm's
// kubeVersion constraints misread. kubectl is v1.36.3 whatever the cluster
// runs (one minor of skew is supported); the server is the cluster's release.
func TestKubectlVersionReportsTheRelease(t *testing.T) {
	c := cluster.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	releases := map[string]version.Info{
		"1.36": {GitVersion: "v1.36.3", Major: "1", Minor: "36", GitTreeState: "clean", BuildDate: "2026-07-22T18:07:38Z"},
		"1.37": {GitVersion: "v1.37.2", Major: "1", Minor: "37", GitTreeState: "clean", BuildDate: "2026-10-27T12:01:04Z"},
	}
	server, ok := releases[c.KubeVersion()]
	if !ok {
		t.Fatalf("cluster runs Kubernetes %q, want one of %v", c.KubeVersion(), releases)
	}
	bins, err := cluster.Build(ctx, cluster.BuildOptions{KubeVersion: c.KubeVersion()})
	if err != nil {
		t.Fatal(err)
	}

	out, err := exec.CommandContext(ctx, bins.Path(cluster.Kubectl), "--kubeconfig="+c.Kubeconfig(), "version", "-o", "json").Output()

	if err != nil {
		t.Fatalf("kubectl version: %v\n%s", err, out)
	}
	var got struct {
		ClientVersion, ServerVersion *version.Info
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("decoding %s: %v", out, err)
	}
	for name, tc := range map[string]struct{ got, want *version.Info }{
		"client": {got.ClientVersion, ptr.To(releases["1.36"])},
		"server": {got.ServerVersion, &server},
	} {
		if tc.got == nil {
			t.Errorf("%s version missing in %s", name, out)
			continue
		}
		v, w := tc.got, tc.want
		if v.GitVersion != w.GitVersion || v.Major != w.Major || v.Minor != w.Minor || v.GitTreeState != w.GitTreeState || v.BuildDate != w.BuildDate {
			t.Errorf("%s version %+v, want %s (%s, %s), %s, built %s", name, *v, w.GitVersion, w.Major, w.Minor, w.GitTreeState, w.BuildDate)
		}
	}
}
