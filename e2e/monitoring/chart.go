package monitoring

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/trainyard/trainyard/e2e/cluster"
)

// Release and ReleaseNamespace name the rendered chart. The controller process runs as
// if in namespace "default" (e2e/controller.ControllerNamespace), so the release is
// there, and the chart's rules select job="trainyard-metrics",namespace="default".
const (
	Release          = "trainyard"
	ReleaseNamespace = "default"
	// MetricsService is the chart's metrics Service: the job label of the scrape.
	MetricsService = Release + "-metrics"
)

// DefaultValues turn the chart's monitoring on: the ServiceMonitor (scraping every 5 s)
// and the PrometheusRule, with the chart's defaults otherwise.
const DefaultValues = "metrics:\n  serviceMonitor:\n    enabled: true\n    interval: 5s\n  prometheusRule:\n    enabled: true\n"

// Chart is charts/trainyard rendered by the helm CLI.
type Chart []*unstructured.Unstructured

// RenderChart renders charts/trainyard of the checkout at repoRoot with values (YAML),
// as `helm template` with the Prometheus Operator APIs announced does, with the helm
// binary helm. Errors: helm fails (its output is in the error), or its output does not
// decode.
func RenderChart(ctx context.Context, helm, repoRoot, values string) (Chart, error) {
	dir, err := os.MkdirTemp("", "trainyard-values-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	valuesFile := filepath.Join(dir, "values.yaml")
	if err := os.WriteFile(valuesFile, []byte(values), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, helm, "template", Release, filepath.Join(repoRoot, "charts", "trainyard"),
		"--namespace", ReleaseNamespace, "--values", valuesFile,
		"--api-versions", "monitoring.coreos.com/v1/ServiceMonitor", "--api-versions", "monitoring.coreos.com/v1/PrometheusRule")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("helm template: %v\n%s", err, stderr.String())
	}
	var objs Chart
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("decoding helm template's output: %w", err)
		}
		if len(m) > 0 {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
	return objs, nil
}

// Get returns the rendered object of kind and name; the error names what is missing.
func (ch Chart) Get(kind, name string) (*unstructured.Unstructured, error) {
	for _, o := range ch {
		if o.GetKind() == kind && o.GetName() == name {
			return o, nil
		}
	}
	return nil, fmt.Errorf("the chart rendered no %s %s (is metrics.serviceMonitor/prometheusRule enabled?)", kind, name)
}

// Setup is what [ScrapeController] made: the ServiceMonitor's scrape configuration and
// the chart's rules, as Prometheus runs them.
type Setup struct {
	// ServiceMonitor and PrometheusRule are the chart's.
	ServiceMonitor, PrometheusRule *unstructured.Unstructured
	// ScrapeConfig is the ServiceMonitor's, for the controller process ([ScrapeConfig]).
	ScrapeConfig string
	// Token is the scraper's token, from the Secret the ServiceMonitor names.
	Token []byte
	// Job is the scrape job's name (what the operator names it).
	Job string
}

// ScrapeController makes the cluster's Prometheus (cluster.Options.Prometheus, or
// `localcluster up --prometheus`) scrape the controller process at metricsAddr as the
// chart's ServiceMonitor would make Prometheus Operator scrape its Pods: it creates the
// chart's scraper identity (the metrics-reader ClusterRole, the scraper ServiceAccount,
// its token Secret and binding), waits for the token controller to fill the Secret,
// writes the token beside Prometheus' configuration, and configures Prometheus with
// [ScrapeConfig], extraScrapeConfigs (YAML list entries, may be "") and the chart's
// rules with each `for:` divided by forDivisor ([RulesFile]; 1 keeps them). The
// controller must serve /metrics as the chart has it: HTTPS with authentication
// (--metrics-secure=true). Errors name the step that failed.
func ScrapeController(ctx context.Context, c *cluster.Cluster, chart Chart, metricsAddr, extraScrapeConfigs string, forDivisor int) (*Setup, error) {
	s := &Setup{}
	var err error
	if s.ServiceMonitor, err = chart.Get("ServiceMonitor", Release); err != nil {
		return nil, err
	}
	if s.PrometheusRule, err = chart.Get("PrometheusRule", Release); err != nil {
		return nil, err
	}
	var identity []*unstructured.Unstructured
	for _, kn := range [][2]string{{"ClusterRole", Release + "-metrics-reader"}, {"ServiceAccount", Release + "-metrics-scraper"},
		{"Secret", Release + "-metrics-scraper-token"}, {"ClusterRoleBinding", Release + "-metrics-scraper"}} {
		o, err := chart.Get(kn[0], kn[1])
		if err != nil {
			return nil, err
		}
		identity = append(identity, o)
	}
	if err := apply(ctx, c, identity...); err != nil {
		return nil, err
	}
	if s.Token, err = ScraperToken(ctx, c, s.ServiceMonitor); err != nil {
		return nil, err
	}
	tokenFile := filepath.Join(c.PrometheusDir(), "scraper-token")
	if err := os.WriteFile(tokenFile, s.Token, 0o600); err != nil {
		return nil, err
	}
	target := Target{Address: metricsAddr, Namespace: ReleaseNamespace, Service: MetricsService, Pod: "trainyard-host", CredentialsFile: tokenFile}
	if s.ScrapeConfig, err = ScrapeConfig(s.ServiceMonitor, 0, target); err != nil {
		return nil, err
	}
	s.Job = fmt.Sprintf("serviceMonitor/%s/%s/0", s.ServiceMonitor.GetNamespace(), s.ServiceMonitor.GetName())
	rules, err := RulesFile(s.PrometheusRule, forDivisor)
	if err != nil {
		return nil, err
	}
	if err := c.ConfigurePrometheus(ctx, s.ScrapeConfig+extraScrapeConfigs, map[string]string{"trainyard.yaml": rules}); err != nil {
		return nil, err
	}
	return s, nil
}

// apply creates objs (keeping those that exist) through the dynamic client, in order.
func apply(ctx context.Context, c *cluster.Cluster, objs ...*unstructured.Unstructured) error {
	for _, o := range objs {
		gv, err := schema.ParseGroupVersion(o.GetAPIVersion())
		if err != nil {
			return err
		}
		ri := c.Dynamic().Resource(gv.WithResource(strings.ToLower(o.GetKind()) + "s"))
		if o.GetNamespace() != "" {
			_, err = ri.Namespace(o.GetNamespace()).Create(ctx, o, metav1.CreateOptions{})
		} else {
			_, err = ri.Create(ctx, o, metav1.CreateOptions{})
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	return nil
}

// ScraperToken waits (up to a minute) until the token controller wrote the token into
// the Secret the ServiceMonitor's authorization names, and returns it: the value
// Prometheus Operator copies into the scrape configuration. Errors: the
// ServiceMonitor has no single endpoint with authorization.credentials, or no token
// within the minute.
func ScraperToken(ctx context.Context, c *cluster.Cluster, sm *unstructured.Unstructured) ([]byte, error) {
	eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if len(eps) != 1 {
		return nil, fmt.Errorf("the ServiceMonitor has %d endpoints, want 1", len(eps))
	}
	ep := eps[0].(map[string]any)
	name, _, _ := unstructured.NestedString(ep, "authorization", "credentials", "name")
	key, _, _ := unstructured.NestedString(ep, "authorization", "credentials", "key")
	if name == "" || key == "" {
		return nil, fmt.Errorf("the ServiceMonitor's endpoint has no authorization.credentials: render the chart with metrics.auth.enabled")
	}
	var token []byte
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		s, err := c.Client().CoreV1().Secrets(sm.GetNamespace()).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		token = s.Data[key]
		return len(token) > 0, nil
	})
	if err != nil {
		return nil, fmt.Errorf("the token controller wrote no %s into Secret %s/%s: %w", key, sm.GetNamespace(), name, err)
	}
	return token, nil
}

// RulesFile returns the PrometheusRule's groups as a Prometheus rules file, each `for:`
// divided by forDivisor (whole seconds, at least 1 s), so that alerts the chart holds
// for minutes fire within seconds in a test; the expressions, labels and annotations
// stay the chart's. forDivisor 1 keeps the chart's.
func RulesFile(rule *unstructured.Unstructured, forDivisor int) (string, error) {
	groups, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups") // a deep copy
	for _, g := range groups {
		rules, _ := g.(map[string]any)["rules"].([]any)
		for _, r := range rules {
			r := r.(map[string]any)
			f, ok := r["for"].(string)
			if !ok || forDivisor == 1 {
				continue
			}
			d, err := time.ParseDuration(f)
			if err != nil {
				return "", fmt.Errorf("alert %v: for %q: %w", r["alert"], f, err)
			}
			r["for"] = ShortenedFor(d, forDivisor)
		}
	}
	out, err := yaml.Marshal(map[string]any{"groups": groups})
	return string(out), err
}

// ShortenedFor is d divided by divisor in whole seconds, at least 1 s, as Prometheus
// writes a duration ("40s").
func ShortenedFor(d time.Duration, divisor int) string {
	return fmt.Sprintf("%ds", int(max(d/time.Duration(divisor), time.Second).Seconds()))
}

// AlertFor returns the `for:` of alert in rule, "" when it has none.
func AlertFor(rule *unstructured.Unstructured, alert string) string {
	groups, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups")
	for _, g := range groups {
		rules, _ := g.(map[string]any)["rules"].([]any)
		for _, r := range rules {
			if r := r.(map[string]any); r["alert"] == alert {
				f, _ := r["for"].(string)
				return f
			}
		}
	}
	return ""
}
