package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
)

// KueueNamespace is the namespace Kueue considers its own (Configuration
// namespace), as in a real installation.
const KueueNamespace = "kueue-system"

// KueueQueueNameLabel names the LocalQueue a TrainJob is submitted to.
const KueueQueueNameLabel = "kueue.x-k8s.io/queue-name"

// KueueRuntimePatchManager is the runtimePatches[].manager of the patch in
// which Kueue writes the node selectors, tolerations, labels, annotations
// and scheduling gates of an admission (pkg/controller/jobs/trainjob).
const KueueRuntimePatchManager = "kueue.x-k8s.io/manager"

// KueueTrainJobFramework is the name of Kueue's TrainJob integration.
const KueueTrainJobFramework = "trainer.kubeflow.org/trainjob"

// Kueue's GroupVersionResources (v1beta2, its storage version in v0.19).
var (
	KueueResourceFlavorGVR = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "resourceflavors"}
	KueueClusterQueueGVR   = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "clusterqueues"}
	KueueLocalQueueGVR     = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "localqueues"}
	KueueWorkloadGVR       = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "workloads"}
	KueueTopologyGVR       = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "topologies"}
	// MultiKueue: an AdmissionCheck of controller kueue.x-k8s.io/multikueue names a
	// MultiKueueConfig, which lists MultiKueueClusters (worker kubeconfigs).
	KueueAdmissionCheckGVR    = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "admissionchecks"}
	KueueMultiKueueConfigGVR  = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "multikueueconfigs"}
	KueueMultiKueueClusterGVR = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "multikueueclusters"}
	// WorkloadPriorityClasses are named by a TrainJob's KueuePriorityClassLabel.
	KueueWorkloadPriorityClassGVR = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "workloadpriorityclasses"}
)

// KueuePriorityClassLabel names the WorkloadPriorityClass of a TrainJob's Workload.
const KueuePriorityClassLabel = "kueue.x-k8s.io/priority-class"

// portKueueHealth keys Cluster.ports: Kueue's /healthz and /readyz; its
// main port, keyed Kueue, serves its webhooks.
const portKueueHealth = "kueue-health"

// kueueConfig is Kueue's Configuration (config.kueue.x-k8s.io/v1beta2):
// loopback listeners, our serving certificate instead of its internal
// certificate management, no leader election, no metrics listener, no
// visibility API server (it would listen on 0.0.0.0:8082, which clusters
// running side by side would fight over), and the TrainJob integration only:
// a registered webhook of a disabled integration would fail every request
// for its kind.
const kueueConfig = `apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: ` + KueueNamespace + `
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
metrics:
  bindAddress: "0"
health:
  healthProbeBindAddress: 127.0.0.1:%d
webhook:
  host: 127.0.0.1
  port: %d
  certDir: %s
featureGates:
  VisibilityOnDemand: false
integrations:
  frameworks:
  - ` + KueueTrainJobFramework + `
`

// KueueConfiguration returns the Configuration file the cluster starts Kueue
// with, its ports and certificate folder filled in as given. A podsReadyTimeout
// above 0 turns waitForPodsReady on with that timeout, without blocking other
// admissions meanwhile (blockAdmission false): a Workload whose pods are not all
// ready that long after its admission is evicted and requeued.
func KueueConfiguration(healthPort, webhookPort int, certDir string, podsReadyTimeout time.Duration) string {
	config := fmt.Sprintf(kueueConfig, healthPort, webhookPort, certDir)
	if podsReadyTimeout > 0 {
		config += fmt.Sprintf("waitForPodsReady:\n  timeout: %s\n  blockAdmission: false\n", podsReadyTimeout)
	}
	return config
}

// kueueConversionCRDs are the CRDs Kueue's kustomization gives a conversion
// webhook (config/components/crd/patches/webhook_in_*.yaml) between v1beta1
// and v1beta2.
var kueueConversionCRDs = []string{"localqueues", "clusterqueues", "cohorts", "workloads", "multikueueclusters"}

// kueueCRDs returns Kueue's CRDs, those of kueueConversionCRDs converted by
// the local Kueue at https://127.0.0.1:<port>/convert with our CA, as a
// real installation's are.
func (c *Cluster) kueueCRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, kind := range kueueCRDKinds {
		file := c.bins.Path(assetKueueCRDPrefix + kind + ".yaml")
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("reading CRDs: %w", err)
		}
		got, err := decodeCRDs(data, file)
		if err != nil {
			return nil, err
		}
		if slices.Contains(kueueConversionCRDs, kind) {
			url := fmt.Sprintf("https://127.0.0.1:%d/convert", c.ports[Kueue])
			for _, crd := range got {
				crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{
					Strategy: apiextensionsv1.WebhookConverter,
					Webhook: &apiextensionsv1.WebhookConversion{
						ClientConfig:             &apiextensionsv1.WebhookClientConfig{URL: &url, CABundle: c.pki.caPEM},
						ConversionReviewVersions: []string{"v1"},
					},
				}
			}
		}
		crds = append(crds, got...)
	}
	return crds, nil
}

// startKueue runs the Kueue controller manager with kueueConfig, serving
// its webhooks and its (unused, but required) metrics certificate with a
// certificate of our CA for 127.0.0.1.
func (c *Cluster) startKueue(ctx context.Context) error {
	if _, err := c.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: KueueNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", KueueNamespace, err)
	}
	certDir, err := c.pki.servingCert(Kueue)
	if err != nil {
		return err
	}
	config := filepath.Join(c.workDir, "kueue-config.yaml")
	if err := os.WriteFile(config, []byte(KueueConfiguration(c.ports[portKueueHealth], c.ports[Kueue], certDir, c.opts.KueueWaitForPodsReady)), 0o644); err != nil {
		return err
	}
	return c.runComponent(ctx, componentSpec{
		name:   Kueue,
		binary: c.bins.Path(Kueue),
		args:   []string{"--config=" + config, "--kubeconfig=" + c.componentKubeconfig()},
		env:    []string{EnvKueueMetricsCertDir + "=" + certDir},
		ports:  []int{c.ports[Kueue], c.ports[portKueueHealth]},
		// readyz includes the webhook server's started check.
		ready: httpProbe(http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/readyz", c.ports[portKueueHealth]), "ok"),
	})
}

// kueueWebhookGroups are the API groups whose webhooks are registered:
// Kueue's own kinds and TrainJob, the one integration enabled.
var kueueWebhookGroups = []string{"kueue.x-k8s.io", "trainer.kubeflow.org"}

// installKueueWebhooks registers those of Kueue's webhooks
// (config/components/webhook/manifests.yaml) that serve kueueWebhookGroups,
// pointed at the local Kueue as the JobSet ones are, named with the
// "kueue-" prefix and with the namespace selector of Kueue's kustomization
// (not kube-system, not kueue-system). It returns once a TrainJob created
// with a queue name is defaulted by Kueue (dry run).
func (c *Cluster) installKueueWebhooks(ctx context.Context) error {
	selector := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: []string{metav1.NamespaceSystem, KueueNamespace},
	}}}
	err := c.installWebhookManifest(ctx, assetKueueWebhooks, Kueue, func(w localWebhook) bool {
		for _, r := range w.rules {
			for _, g := range r.APIGroups {
				if !slices.Contains(kueueWebhookGroups, g) {
					return false
				}
			}
		}
		*w.namespaceSelector = selector
		return len(w.rules) > 0
	})
	if err != nil {
		return fmt.Errorf("installing Kueue webhooks: %w", err)
	}
	return c.waitKueueDefaulting(ctx)
}

// TrainJobGVR is the resource of TrainJob objects.
var TrainJobGVR = schema.GroupVersionResource{Group: "trainer.kubeflow.org", Version: "v1alpha1", Resource: "trainjobs"}

// waitKueueDefaulting polls a server-side dry-run create of a TrainJob with
// a queue name until Kueue's webhooks answer it: the mutating one suspends
// it and adds Kueue's runtime patch; the validating one may deny it, since
// with topology-aware scheduling on it computes the pod sets from a runtime
// the probe does not have. Either answer proves both are called.
func (c *Cluster) waitKueueDefaulting(ctx context.Context) error {
	tj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
		"metadata": map[string]any{
			"name": "kueue-webhook-probe", "namespace": metav1.NamespaceDefault,
			"labels": map[string]any{KueueQueueNameLabel: "probe"},
		},
		"spec": map[string]any{"runtimeRef": map[string]any{"name": "kueue-webhook-probe"}},
	}}
	var last error
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		out, err := c.dynamic.Resource(TrainJobGVR).Namespace(metav1.NamespaceDefault).Create(ctx, tj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			last = err
			return strings.Contains(err.Error(), `admission webhook "vtrainjob.kb.io"`), nil
		}
		suspended, _, _ := unstructured.NestedBool(out.Object, "spec", "suspend")
		last = errors.New("TrainJob not suspended by Kueue's mutating webhook")
		return suspended, nil
	})
	if err != nil {
		return &StartError{Component: Kueue, LogPath: filepath.Join(c.opts.LogDir, Kueue+".log"), Err: fmt.Errorf("webhooks not serving: %v: %w", last, err)}
	}
	return nil
}

// kueueKinds maps the resource of each Kueue*GVR to its kind.
var kueueKinds = map[string]string{
	"resourceflavors": "ResourceFlavor", "clusterqueues": "ClusterQueue", "localqueues": "LocalQueue",
	"workloads": "Workload", "workloadpriorityclasses": "WorkloadPriorityClass", "topologies": "Topology",
	"multikueueclusters": "MultiKueueCluster", "multikueueconfigs": "MultiKueueConfig", "admissionchecks": "AdmissionCheck",
}

// CreateKueueObject creates the Kueue object of gvr (one of the Kueue*GVR
// variables) named name, in namespace ns or, with ns "", cluster-scoped, with
// the top-level fields given (e.g. "spec", or "value" of a
// WorkloadPriorityClass), and returns it as stored. Errors: gvr is not a Kueue
// resource of this package, or the API server refused the create.
func (c *Cluster) CreateKueueObject(ctx context.Context, gvr schema.GroupVersionResource, ns, name string, fields map[string]any) (*unstructured.Unstructured, error) {
	kind, ok := kueueKinds[gvr.Resource]
	if !ok || gvr.Group != KueueClusterQueueGVR.Group {
		return nil, fmt.Errorf("creating %s: not a Kueue resource", gvr)
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": gvr.GroupVersion().String(), "kind": kind,
		"metadata": map[string]any{"name": name},
	}}
	maps.Copy(obj.Object, fields)
	out, err := c.dynamic.Resource(gvr).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("creating %s %s: %w", kind, name, err)
	}
	return out, nil
}

// KueueClusterQueueSpec returns the spec of a ClusterQueue that admits the
// workloads of namespace ns (all namespaces for "") from one ResourceFlavor,
// flavor, with the nominal quota given for each resource it covers, and no
// borrowing or preemption: Kueue's plain quota. Quota "pods" counts pods, each
// pod set its count (Kueue's flavor assigner adds it to every request when a
// ClusterQueue covers it). Callers may change the map (preemption, admission
// checks) before creating the ClusterQueue with CreateKueueObject.
func KueueClusterQueueSpec(ns, flavor string, quota corev1.ResourceList) map[string]any {
	names := make([]string, 0, len(quota))
	for name := range quota {
		names = append(names, string(name))
	}
	slices.Sort(names)
	covered := make([]any, 0, len(names))
	resources := make([]any, 0, len(names))
	for _, name := range names {
		q := quota[corev1.ResourceName(name)]
		covered = append(covered, name)
		resources = append(resources, map[string]any{"name": name, "nominalQuota": q.String()})
	}
	selector := map[string]any{}
	if ns != "" {
		selector["matchLabels"] = map[string]any{corev1.LabelMetadataName: ns}
	}
	return map[string]any{
		"namespaceSelector": selector,
		"resourceGroups": []any{map[string]any{
			"coveredResources": covered,
			"flavors":          []any{map[string]any{"name": flavor, "resources": resources}},
		}},
	}
}

// WaitKueueQueueActive waits until Kueue reports ClusterQueue clusterQueue and
// LocalQueue localQueue of namespace ns Active (it has seen their flavors and
// admits from them), polling every 250 ms. Errors: not Active within timeout
// (the error gives the last conditions seen), or ctx ended.
func (c *Cluster) WaitKueueQueueActive(ctx context.Context, clusterQueue, ns, localQueue string, timeout time.Duration) error {
	state := ""
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		for _, q := range []struct {
			gvr      schema.GroupVersionResource
			ns, name string
		}{{KueueClusterQueueGVR, "", clusterQueue}, {KueueLocalQueueGVR, ns, localQueue}} {
			u, err := c.dynamic.Resource(q.gvr).Namespace(q.ns).Get(ctx, q.name, metav1.GetOptions{})
			if err != nil {
				state = err.Error()
				return false, nil
			}
			if conds := Conditions(u); !meta.IsStatusConditionTrue(conds, "Active") {
				state = fmt.Sprintf("%s %s: %+v", q.gvr.Resource, q.name, conds)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("ClusterQueue %s and LocalQueue %s/%s not Active (%s): %w", clusterQueue, ns, localQueue, state, err)
	}
	return nil
}

// Conditions returns status.conditions of an unstructured object (a Kueue
// Workload, ClusterQueue, LocalQueue, ...); entries that do not decode as a
// metav1.Condition are left out.
func Conditions(u *unstructured.Unstructured) []metav1.Condition {
	raw, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	var conds []metav1.Condition
	for _, r := range raw {
		m, ok := r.(map[string]any)
		if !ok {
			continue
		}
		var c metav1.Condition
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &c); err == nil {
			conds = append(conds, c)
		}
	}
	return conds
}
