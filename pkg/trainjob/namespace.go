package trainjob

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SystemNamespaces are the namespaces Kubernetes keeps for itself: kube-system (its
// components), kube-public (readable by everyone, unauthenticated users included) and
// kube-node-lease (the nodes' heartbeats). Trainyard writes nothing there for a
// TrainJob — no JobSet, PodGroup, Workload, ConfigMap or Secret, and no progress CA
// ConfigMap — so that neither a bug nor a TrainJob someone manages to create there
// makes the controller write into the cluster's own namespaces with its cluster-wide
// permissions (Kubernetes RBAC cannot exclude namespaces from a ClusterRole; see the
// chart's README). The admission webhooks never review kube-system, for the cluster's
// sake when they are down, so a TrainJob there is only refused when built.
var SystemNamespaces = []string{metav1.NamespaceSystem, metav1.NamespacePublic, corev1.NamespaceNodeLease}

// IsSystemNamespace reports whether namespace is one of SystemNamespaces.
func IsSystemNamespace(namespace string) bool {
	return slices.Contains(SystemNamespaces, namespace)
}

// SystemNamespaceMessage is the condition message of a TrainJob in system namespace
// namespace: what Trainyard does not do there, and the fix.
func SystemNamespaceMessage(namespace string) string {
	return fmt.Sprintf("the TrainJob is in namespace %q, one of the cluster's system namespaces (%s), where Trainyard creates no JobSet, ConfigMap or Secret: "+
		"delete it and create it in another namespace", namespace, strings.Join(SystemNamespaces, ", "))
}
