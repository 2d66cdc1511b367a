// Package charttest tests charts/trainyard: it renders the chart in-process
// with Helm's own engine (helm.sh/helm/v3, as `helm template` does), lints it,
// decodes every object strictly into its Kubernetes type, checks the RBAC,
// the schema, the controller configuration and flags against the real binary,
// the PromQL of the dashboard and of the PrometheusRule against the metrics the
// binary exports, and (with promtool) the alerts' behaviour.
//
// Run: cd hack/charttest && go test ./...
// With promtool: PROMTOOL=$PWD/../../_output/tools/promtool go test ./...
package charttest

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

const (
	chartDir    = "../../charts/trainyard"
	repoRoot    = "../.."
	releaseName = "trainyard"
	namespace   = "trainyard-system"
	// fullname is the object name prefix for releaseName: the release name
	// already contains the chart name.
	fullname = "trainyard"
)

// monitoringAPIs are the Prometheus Operator kinds the chart can render.
var monitoringAPIs = []string{"monitoring.coreos.com/v1/ServiceMonitor", "monitoring.coreos.com/v1/PrometheusRule"}

// certManagerAPI is the cert-manager kind the chart checks for.
const certManagerAPI = "cert-manager.io/v1/Certificate"

var (
	chartOnce   sync.Once
	loadedChart *chart.Chart
	chartErr    error
)

// loadChart loads the chart directory once per test binary.
func loadChart(t testing.TB) *chart.Chart {
	t.Helper()
	chartOnce.Do(func() { loadedChart, chartErr = loader.Load(chartDir) })
	if chartErr != nil {
		t.Fatalf("loading %s: %v", chartDir, chartErr)
	}
	return loadedChart
}

// renderOptions vary the release and the cluster the chart is rendered for.
type renderOptions struct {
	apiVersions []string // extra API versions the "cluster" serves
	namespace   string
	releaseName string
}

type option func(*renderOptions)

// withMonitoring renders as if the Prometheus Operator CRDs were installed.
func withMonitoring() option {
	return func(o *renderOptions) { o.apiVersions = append(o.apiVersions, monitoringAPIs...) }
}

// withCertManager renders as if cert-manager's CRDs were installed.
func withCertManager() option {
	return func(o *renderOptions) { o.apiVersions = append(o.apiVersions, certManagerAPI) }
}

func withRelease(name string) option { return func(o *renderOptions) { o.releaseName = name } }

// rendered is a rendered chart.
type rendered struct {
	files   map[string]string // template name → rendered text (NOTES.txt included)
	objects []*unstructured.Unstructured
}

// render renders the chart with values (YAML, merged over values.yaml) the way
// `helm template` does: values are coalesced and checked against the schema,
// then every template is executed in strict mode (a reference to a missing
// value is an error).
func render(t testing.TB, values string, opts ...option) (*rendered, error) {
	t.Helper()
	o := renderOptions{namespace: namespace, releaseName: releaseName}
	for _, opt := range opts {
		opt(&o)
	}
	ch := loadChart(t)
	vals, err := chartutil.ReadValues([]byte(values))
	if err != nil {
		t.Fatalf("test values are not YAML: %v", err)
	}
	caps := chartutil.DefaultCapabilities.Copy()
	caps.APIVersions = append(caps.APIVersions, o.apiVersions...)
	top, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{
		Name: o.releaseName, Namespace: o.namespace, Revision: 1, IsInstall: true,
	}, caps)
	if err != nil {
		return nil, err
	}
	files, err := engine.Engine{Strict: true}.Render(ch, top)
	if err != nil {
		return nil, err
	}
	r := &rendered{files: map[string]string{}}
	names := make([]string, 0, len(files))
	for name, text := range files {
		short := strings.TrimPrefix(name, ch.Name()+"/")
		r.files[short] = text
		names = append(names, short)
	}
	sort.Strings(names)
	for _, name := range names {
		if !strings.HasSuffix(name, ".yaml") || strings.HasPrefix(filepath.Base(name), "_") {
			continue
		}
		objs, err := decodeManifest(r.files[name])
		if err != nil {
			t.Fatalf("%s does not render valid YAML: %v\n%s", name, err, r.files[name])
		}
		r.objects = append(r.objects, objs...)
	}
	return r, nil
}

// mustRender renders and fails the test on error.
func mustRender(t testing.TB, values string, opts ...option) *rendered {
	t.Helper()
	r, err := render(t, values, opts...)
	if err != nil {
		t.Fatalf("rendering with values\n%s\nfailed: %v", values, err)
	}
	return r
}

func decodeManifest(text string) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(text)))
	for {
		doc, err := dec.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := yaml.UnmarshalStrict(doc, &u.Object); err != nil {
			return nil, err
		}
		objs = append(objs, u)
	}
}

func stripComments(doc []byte) []byte {
	var out [][]byte
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			out = append(out, line)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

// get returns the object of kind and name, failing the test when absent.
func (r *rendered) get(t testing.TB, kind, name string) *unstructured.Unstructured {
	t.Helper()
	if o := r.find(kind, name); o != nil {
		return o
	}
	t.Fatalf("no %s %q rendered; have %v", kind, name, r.ids())
	return nil
}

func (r *rendered) find(kind, name string) *unstructured.Unstructured {
	for _, o := range r.objects {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

func (r *rendered) ofKind(kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range r.objects {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// ids lists "Kind/name" of every object, sorted.
func (r *rendered) ids() []string {
	var ids []string
	for _, o := range r.objects {
		ids = append(ids, o.GetKind()+"/"+o.GetName())
	}
	slices.Sort(ids)
	return ids
}

// into converts obj into a typed object, failing on any field the type does
// not have (a misspelt field in a template).
func into[T any](t testing.TB, obj *unstructured.Unstructured) *T {
	t.Helper()
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(obj.Object, out, true); err != nil {
		t.Fatalf("%s/%s does not decode strictly into %T: %v", obj.GetKind(), obj.GetName(), out, err)
	}
	return out
}

func mustReadFile(t testing.TB, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// errContains fails unless err is non-nil and contains every part.
func errContains(t testing.TB, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one containing %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("error %q does not contain %q", err, p)
		}
	}
}
