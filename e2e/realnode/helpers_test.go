package realnode

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/trainyard/trainyard/e2e/cluster"
)

// podLog returns a container's log as `kubectl logs` reads it: from the kubelet,
// through the API server.
func podLog(t *testing.T, c *cluster.Cluster, ns, pod, container string) string {
	t.Helper()
	data, err := c.Client().CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container}).DoRaw(context.Background())
	if err != nil {
		t.Fatalf("reading the log of %s/%s: %v", ns, pod, err)
	}
	return string(data)
}

// describePod is a pod's phase, node and container states in one line.
func describePod(p *corev1.Pod) string {
	var states []string
	for _, s := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
		switch {
		case s.State.Waiting != nil:
			states = append(states, fmt.Sprintf("%s waiting (%s: %s)", s.Name, s.State.Waiting.Reason, s.State.Waiting.Message))
		case s.State.Running != nil:
			states = append(states, s.Name+" running")
		case s.State.Terminated != nil:
			states = append(states, fmt.Sprintf("%s exited %d (%s)", s.Name, s.State.Terminated.ExitCode, s.State.Terminated.Reason))
		}
	}
	return fmt.Sprintf("phase %s on %q: %s", p.Status.Phase, p.Spec.NodeName, strings.Join(states, ", "))
}
