package cluster

import (
	"bufio"
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"
)

//go:embed assets/*.yaml
var assets embed.FS

// TrainyardCRDDir is where, relative to the repository root, Trainyard's
// CRDs live; every *.yaml there is installed. It may be absent.
const TrainyardCRDDir = "charts/trainyard/crds"

// installCRDs creates or updates the CRDs of Trainyard, JobSet, the two
// PodGroup flavours and, with Options.Kueue, Kueue, then waits until all are
// established.
func (c *Cluster) installCRDs(ctx context.Context) error {
	files, err := filepath.Glob(filepath.Join(c.opts.Build.RepoRoot, TrainyardCRDDir, "*.yaml"))
	if err != nil {
		return err
	}
	files = append(files, c.bins.Path(assetJobSetCRD), c.bins.Path(assetSchedPluginsPGs))
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			return fmt.Errorf("reading CRDs: %w", err)
		}
		got, err := decodeCRDs(data, file)
		if err != nil {
			return err
		}
		crds = append(crds, got...)
	}
	volcano, err := assets.ReadFile("assets/volcano-podgroups-crd.yaml")
	if err != nil {
		return err
	}
	got, err := decodeCRDs(volcano, "assets/volcano-podgroups-crd.yaml")
	if err != nil {
		return err
	}
	crds = append(crds, got...)
	if c.opts.Kueue {
		got, err := c.kueueCRDs()
		if err != nil {
			return err
		}
		crds = append(crds, got...)
	}

	for _, crd := range crds {
		if err := createOrReplace(ctx, c.apiext.ApiextensionsV1().CustomResourceDefinitions(), crd); err != nil {
			return fmt.Errorf("installing CRD %s: %w", crd.Name, err)
		}
	}
	for _, crd := range crds {
		if err := c.waitEstablished(ctx, crd.Name); err != nil {
			return err
		}
	}
	fmt.Fprintf(c.opts.Progress, "installed %d CRDs\n", len(crds))
	return nil
}

// decodeCRDs parses every YAML document of data, which must all be CRDs.
func decodeCRDs(data []byte, source string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var crds []*apiextensionsv1.CustomResourceDefinition
	err := forEachYAMLDoc(data, func(doc []byte) error {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(doc, crd); err != nil {
			return err
		}
		if crd.Kind != "CustomResourceDefinition" {
			return fmt.Errorf("unexpected kind %q", crd.Kind)
		}
		crds = append(crds, crd)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("decoding CRDs of %s: %w", source, err)
	}
	return crds, nil
}

// forEachYAMLDoc calls fn with each non-empty document of a YAML stream.
func forEachYAMLDoc(data []byte, fn func(doc []byte) error) error {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		var probe map[string]any
		if err := yaml.Unmarshal(doc, &probe); err != nil {
			return err
		}
		if len(probe) == 0 {
			continue // comments only
		}
		if err := fn(doc); err != nil {
			return err
		}
	}
}

func (c *Cluster) waitEstablished(ctx context.Context, name string) error {
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		crd, err := c.apiext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // retried until the timeout
		}
		for _, cond := range crd.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("CRD %s not established: %w (log: %s)", name, err, filepath.Join(c.opts.LogDir, KubeAPIServer+".log"))
	}
	return nil
}

// installJobSetWebhooks registers JobSet's admission webhooks as shipped in
// its module, pointed at the local controller: each service reference
// becomes https://127.0.0.1:<port><path> with our CA, names get the "jobset-"
// prefix, and the pod webhooks only see JobSet pods, as JobSet's own
// kustomize overlay does. It returns once a dry-run JobSet is defaulted:
// the controller panics on JobSets that were not.
func (c *Cluster) installJobSetWebhooks(ctx context.Context) error {
	err := c.installWebhookManifest(ctx, assetJobSetWebhooks, JobSet, func(w localWebhook) bool {
		if podWebhook(w.rules) {
			*w.objectSelector = jobSetPodSelector()
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("installing JobSet webhooks: %w", err)
	}
	return c.waitJobSetDefaulting(ctx)
}

// localWebhook is one webhook of a Mutating- or ValidatingWebhookConfiguration,
// the fields installWebhookManifest's callers read or set.
type localWebhook struct {
	rules                             []admissionv1.RuleWithOperations
	namespaceSelector, objectSelector **metav1.LabelSelector
}

// installWebhookManifest registers the webhook configurations of a
// component's shipped manifest (the asset named asset) with the API server,
// each named "<component>-<name>", with the webhooks that adopt keeps (it
// may set their selectors; false leaves one out), each pointed at the local
// component (pointAtLocal).
func (c *Cluster) installWebhookManifest(ctx context.Context, asset, component string, adopt func(localWebhook) bool) error {
	data, err := os.ReadFile(c.bins.Path(asset))
	if err != nil {
		return err
	}
	return forEachYAMLDoc(data, func(doc []byte) error {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return err
		}
		switch meta.Kind {
		case "MutatingWebhookConfiguration":
			cfg := &admissionv1.MutatingWebhookConfiguration{}
			if err := yaml.Unmarshal(doc, cfg); err != nil {
				return err
			}
			cfg.Name = component + "-" + cfg.Name
			kept := cfg.Webhooks[:0]
			for _, w := range cfg.Webhooks {
				if adopt(localWebhook{w.Rules, &w.NamespaceSelector, &w.ObjectSelector}) {
					c.pointAtLocal(component, &w.ClientConfig)
					kept = append(kept, w)
				}
			}
			cfg.Webhooks = kept
			return createOrReplace(ctx, c.client.AdmissionregistrationV1().MutatingWebhookConfigurations(), cfg)
		case "ValidatingWebhookConfiguration":
			cfg := &admissionv1.ValidatingWebhookConfiguration{}
			if err := yaml.Unmarshal(doc, cfg); err != nil {
				return err
			}
			cfg.Name = component + "-" + cfg.Name
			kept := cfg.Webhooks[:0]
			for _, w := range cfg.Webhooks {
				if adopt(localWebhook{w.Rules, &w.NamespaceSelector, &w.ObjectSelector}) {
					c.pointAtLocal(component, &w.ClientConfig)
					kept = append(kept, w)
				}
			}
			cfg.Webhooks = kept
			return createOrReplace(ctx, c.client.AdmissionregistrationV1().ValidatingWebhookConfigurations(), cfg)
		default:
			return fmt.Errorf("unexpected kind %q", meta.Kind)
		}
	})
}

// pointAtLocal replaces a webhook's service reference by the URL of the
// local component (JobSet, Kueue) serving it, keeping the path, and trusts
// our CA.
func (c *Cluster) pointAtLocal(component string, cc *admissionv1.WebhookClientConfig) {
	path := ""
	if cc.Service != nil && cc.Service.Path != nil {
		path = *cc.Service.Path
	}
	url := fmt.Sprintf("https://127.0.0.1:%d%s", c.ports[component], path)
	cc.Service, cc.URL, cc.CABundle = nil, &url, c.pki.caPEM
}

// podWebhook reports whether a webhook intercepts pods.
func podWebhook(rules []admissionv1.RuleWithOperations) bool {
	for _, r := range rules {
		if slices.Contains(r.Resources, "pods") {
			return true
		}
	}
	return false
}

// jobSetPodSelector limits JobSet's pod webhooks to JobSet pods, as the
// overlay in JobSet's config/components/webhook/patches does; otherwise a
// JobSet outage would block every pod in the cluster.
func jobSetPodSelector() *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "jobset.sigs.k8s.io/jobset-name", Operator: metav1.LabelSelectorOpExists},
	}}
}

// JobSetGVR is the resource of JobSet objects.
var JobSetGVR = schema.GroupVersionResource{Group: "jobset.x-k8s.io", Version: "v1alpha2", Resource: "jobsets"}

// waitJobSetDefaulting polls a server-side dry-run create of a JobSet until
// the mutating webhook has defaulted it (spec.network.enableDNSHostnames).
func (c *Cluster) waitJobSetDefaulting(ctx context.Context) error {
	js := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
		"metadata": map[string]any{"name": "webhook-probe", "namespace": metav1.NamespaceDefault},
		"spec": map[string]any{"replicatedJobs": []any{map[string]any{
			"name": "probe", "replicas": int64(1),
			"template": map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
				"containers": []any{map[string]any{"name": "c", "image": "busybox"}},
			}}}},
		}}},
	}}
	var last error
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		out, err := c.dynamic.Resource(JobSetGVR).Namespace(metav1.NamespaceDefault).Create(ctx, js, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			last = err
			return false, nil
		}
		defaulted, _, _ := unstructured.NestedBool(out.Object, "spec", "network", "enableDNSHostnames")
		last = errors.New("JobSet not defaulted by the mutating webhook")
		return defaulted, nil
	})
	if err != nil {
		return &StartError{Component: JobSet, LogPath: filepath.Join(c.opts.LogDir, JobSet+".log"), Err: fmt.Errorf("webhooks not serving: %v: %w", last, err)}
	}
	return nil
}

// DeviceClassName is the DRA DeviceClass of the fake GPUs, and also the name
// of their driver.
const DeviceClassName = "gpu.trainyard.dev"

// installDeviceClass creates the DeviceClass selecting every device of the
// fake driver.
func (c *Cluster) installDeviceClass(ctx context.Context) error {
	dc := &resourcev1.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: DeviceClassName},
		Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{
			CEL: &resourcev1.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", DeviceClassName)},
		}}},
	}
	if err := createOrReplace(ctx, c.client.ResourceV1().DeviceClasses(), dc); err != nil {
		return fmt.Errorf("creating DeviceClass %s: %w", DeviceClassName, err)
	}
	return nil
}

// object is a cluster-scoped API object.
type object interface {
	GetName() string
	SetResourceVersion(string)
	GetResourceVersion() string
}

// clusterScopedClient is the part of a typed client createOrReplace needs.
type clusterScopedClient[T object] interface {
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
}

// createOrReplace creates obj, or replaces the object of that name.
func createOrReplace[T object](ctx context.Context, client clusterScopedClient[T], obj T) error {
	_, err := client.Create(ctx, obj, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := client.Get(ctx, obj.GetName(), metav1.GetOptions{})
		if err != nil {
			return err
		}
		obj.SetResourceVersion(cur.GetResourceVersion())
		_, err = client.Update(ctx, obj, metav1.UpdateOptions{})
		return err
	})
}
