package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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
