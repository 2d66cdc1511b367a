package realnode

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainyard/trainyard/e2e/cluster"
)

// TestPodsResolveEachOtherThroughTheClusterDNS runs two real pods named as JobSet
// names its pods (hostname and subdomain under a headless Service): one resolves the
// other by its full name, <hostname>.<subdomain>.<namespace>.svc.cluster.local, and a
// name outside the cluster answers NXDOMAIN, so nothing leaves the machine. (busybox's
// nslookup applies no search domains; the short form <hostname>.<subdomain> that
// torchrun's MASTER_ADDR uses is resolved through glibc in the training tests.) Both
// pods run on the real node, none on the fake one, though neither names a node.
func TestPodsResolveEachOtherThroughTheClusterDNS(t *testing.T) {
	c := cluster.Shared(t)
	ns := cluster.NewNamespace(t, c)
	ctx := context.Background()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "peers", Namespace: ns},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "peers"},
			PublishNotReadyAddresses: true,
		},
	}
	if _, err := c.Client().CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	full := "peer-1.peers." + ns + ".svc." + cluster.ClusterDomain
	script := `set -u
until nslookup ` + full + `; do sleep 1; done
if nslookup trainyard-outside.example; then echo "resolved a name outside the cluster"; exit 3; fi
echo "dns ok"`
	for i, cmd := range []string{script, "sleep 300"} {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: []string{"peer-0", "peer-1"}[i], Namespace: ns, Labels: map[string]string{"app": "peers"}},
			Spec: corev1.PodSpec{
				Hostname: []string{"peer-0", "peer-1"}[i], Subdomain: "peers",
				RestartPolicy:                 corev1.RestartPolicyNever,
				TerminationGracePeriodSeconds: new(int64),
				Containers:                    []corev1.Container{{Name: "c", Image: "busybox", Command: []string{"sh", "-c", cmd}}},
			},
		}
		if _, err := c.Client().CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var done *corev1.Pod
	cluster.Eventually(t, 3*time.Minute, "pod peer-0 finished", func(ctx context.Context) (bool, string) {
		p, err := c.Client().CoreV1().Pods(ns).Get(ctx, "peer-0", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		done = p
		return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed, describePod(p)
	})
	log := podLog(t, c, ns, "peer-0", "c")
	if done.Status.Phase != corev1.PodSucceeded || !strings.Contains(log, "dns ok") {
		t.Fatalf("peer-0 %s; its log:\n%s", describePod(done), log)
	}
	for _, name := range []string{"peer-0", "peer-1"} {
		p, err := c.Client().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Spec.NodeName != cluster.RealNodeName {
			t.Errorf("pod %s ran on node %q, want the real node %s", name, p.Spec.NodeName, cluster.RealNodeName)
		}
	}
}
