package clustertest

import (
	"context"
	"encoding/json"
	"os/exec"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/version"

	"github.com/trainyard/trainyard/e2e/cluster"
)

// TestKubectlVersionReportsTheRelease checks that the binaries are stamped as
// a release is (issue 16): unstamped ones say "v0.0.0-master+$Format:%H$",
// which Kueue refuses at start-up and kubectl's skew check and Helm's
// kubeVersion constraints misread.
func TestKubectlVersionReportsTheRelease(t *testing.T) {
	c := cluster.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bins, err := cluster.Build(ctx, cluster.BuildOptions{})
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
	for name, v := range map[string]*version.Info{"client": got.ClientVersion, "server": got.ServerVersion} {
		if v == nil {
			t.Errorf("%s version missing in %s", name, out)
			continue
		}
		if v.GitVersion != "v1.36.3" || v.Major != "1" || v.Minor != "36" || v.GitTreeState != "clean" || v.BuildDate != "2026-07-22T18:07:38Z" {
			t.Errorf("%s version %+v, want v1.36.3 (1, 36), clean, built 2026-07-22T18:07:38Z", name, *v)
		}
	}
}
