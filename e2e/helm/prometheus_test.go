package helm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/trainyard/trainyard/e2e/cluster"
	"github.com/trainyard/trainyard/e2e/monitoring"
)

// monitoringValues turn the chart's ServiceMonitor on, with its default authentication
// (the metrics scraper's token), scraping every 2 s so that a new Pod is scraped
// within seconds.
var monitoringValues = []string{"--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.serviceMonitor.interval=2s"}

// serviceMonitorCRD stands in for Prometheus Operator's ServiceMonitor CRD: the API
// only, without a schema, so that the chart renders its ServiceMonitor as it does in
// a cluster that runs the operator. No operator runs: the leg gives the cluster's
// Prometheus the configuration the operator generates from the ServiceMonitor
// (monitoring.DiscoveredScrapeConfig).
var serviceMonitorCRD = &unstructured.Unstructured{Object: map[string]any{
	"apiVersion": "apiextensions.k8s.io/v1",
	"kind":       "CustomResourceDefinition",
	"metadata":   map[string]any{"name": "servicemonitors.monitoring.coreos.com"},
	"spec": map[string]any{
		"group": "monitoring.coreos.com",
		"scope": "Namespaced",
		"names": map[string]any{"plural": "servicemonitors", "singular": "servicemonitor", "kind": "ServiceMonitor", "listKind": "ServiceMonitorList"},
		"versions": []any{map[string]any{
			"name": "v1", "served": true, "storage": true,
			"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
		}},
	},
}}

var (
	crdResource            = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	serviceMonitorResource = schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: "servicemonitors"}
)

// installServiceMonitorCRD creates serviceMonitorCRD and waits until it is served.
func (l *leg) installServiceMonitorCRD(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	if _, err := l.c.Dynamic().Resource(crdResource).Create(ctx, serviceMonitorCRD, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	cluster.Eventually(t, time.Minute, "the ServiceMonitor API served", func(ctx context.Context) (bool, string) {
		_, err := l.c.Dynamic().Resource(serviceMonitorResource).Namespace("default").List(ctx, metav1.ListOptions{})
		return err == nil, fmt.Sprint(err)
	})
}

// scrape is what the leg's Prometheus scrapes: the job of the chart's ServiceMonitor
// and a copy of it without the authorization.
type scrape struct {
	api             promv1.API
	job, noTokenJob string
	metricsJob      string // the job label: the metrics Service's name
	// scheme, path and port are the ServiceMonitor endpoint's.
	scheme, path, port string
	configured, first  time.Time
}

// testPrometheusScrapesThePods: the cluster's Prometheus, on the host, is given the
// scrape configuration Prometheus Operator generates from the ServiceMonitor the chart
// installed (EndpointSlice discovery in the release namespace, the operator's
// relabelings, the ServiceMonitor's TLS and authorization with the token the token
// controller wrote into the chart's Secret), and a copy without the authorization. It
// discovers both controller Pods by their IPs on the real node and scrapes each with
// the token, and each refuses the copy's scrapes (401); `up` and a stage's queue
// latency carry each Pod's name.
func testPrometheusScrapesThePods(t *testing.T, l *leg) {
	ctx := context.Background()
	sm, err := l.c.Dynamic().Resource(serviceMonitorResource).Namespace(namespace).Get(ctx, release, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the chart's ServiceMonitor: %v", err)
	}
	token, err := monitoring.ScraperToken(ctx, l.c, sm)
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(l.c.PrometheusDir(), "scraper-token")
	if err := os.WriteFile(tokenFile, token, 0o600); err != nil {
		t.Fatal(err)
	}
	withToken, err := monitoring.DiscoveredScrapeConfig(sm, 0, monitoring.Discovery{KubeconfigFile: l.c.Kubeconfig(), CredentialsFile: tokenFile})
	if err != nil {
		t.Fatal(err)
	}
	noToken := sm.DeepCopy()
	noToken.SetName(release + "-without-token")
	eps, _, _ := unstructured.NestedSlice(noToken.Object, "spec", "endpoints")
	delete(eps[0].(map[string]any), "authorization")
	// Its own job label: the operator names the job after the Service, so without it
	// both jobs would write the same series, and `up` would flip between 1 and 0.
	relabelings, _ := eps[0].(map[string]any)["relabelings"].([]any)
	eps[0].(map[string]any)["relabelings"] = append(relabelings, map[string]any{"targetLabel": "job", "replacement": noToken.GetName()})
	_ = unstructured.SetNestedSlice(noToken.Object, eps, "spec", "endpoints")
	withoutToken, err := monitoring.DiscoveredScrapeConfig(noToken, 0, monitoring.Discovery{KubeconfigFile: l.c.Kubeconfig()})
	if err != nil {
		t.Fatal(err)
	}
	client, err := api.NewClient(api.Config{Address: l.c.PrometheusURL()})
	if err != nil {
		t.Fatal(err)
	}
	l.scrape = &scrape{
		api:        promv1.NewAPI(client),
		job:        fmt.Sprintf("serviceMonitor/%s/%s/0", namespace, sm.GetName()),
		noTokenJob: fmt.Sprintf("serviceMonitor/%s/%s/0", namespace, noToken.GetName()),
		metricsJob: release + "-metrics",
	}
	ep := eps[0].(map[string]any) // the copy's endpoint: the same but for authorization
	l.scrape.scheme, _ = ep["scheme"].(string)
	l.scrape.path, _ = ep["path"].(string)
	l.scrape.port, _ = ep["port"].(string)
	if err := l.c.ConfigurePrometheus(ctx, withToken+withoutToken, nil); err != nil {
		t.Fatal(err)
	}
	l.scrape.configured = time.Now()
	pods := l.expectScraped(t, "the install")
	l.scrape.first = time.Now()
	t.Logf("Prometheus discovered and scraped %d controller Pods %s after its configuration (ServiceMonitor interval 2s)", len(pods), l.scrape.first.Sub(l.scrape.configured).Round(100*time.Millisecond))
	cluster.Eventually(t, time.Minute, "every scrape without the token refused (401)", ownContext(func(ctx context.Context) (bool, string) {
		targets := l.targets(ctx, t, l.scrape.noTokenJob)
		var state []string
		refused := 0
		for _, tg := range targets {
			state = append(state, fmt.Sprintf("%s %s %q", tg.Labels["pod"], tg.Health, tg.LastError))
			if tg.Health == promv1.HealthBad && strings.Contains(tg.LastError, "401") {
				refused++
			}
		}
		return len(targets) == len(pods) && refused == len(pods), strings.Join(state, "; ")
	}))
}

// testPrometheusFollowsThePods: after a step replaced controller Pods, the targets are
// the Pods that run now, each scraped with the token.
func testPrometheusFollowsThePods(t *testing.T, l *leg) {
	start := time.Now()
	pods := l.expectScraped(t, "the new Pods")
	t.Logf("Prometheus scrapes the %d Pods that run now (%s) %s after the step", len(pods), strings.Join(pods, ", "), time.Since(start).Round(100*time.Millisecond))
}

// expectScraped waits until the targets of the ServiceMonitor's job are the release's
// running controller Pods, each at its Pod IP with the endpoint's scheme and path,
// labelled as the operator's relabelings label it (job, namespace, service, endpoint,
// container) and up; then checks that `up` of the
// chart's job is 1 for each with its pod label, and that a stage's queue latency is
// there for each under its pod label. It returns the Pods' names.
func (l *leg) expectScraped(t *testing.T, what string) []string {
	t.Helper()
	var want []string
	cluster.Eventually(t, 2*time.Minute, "Prometheus scrapes "+what+" with the scraper's token", ownContext(func(ctx context.Context) (bool, string) {
		pods, err := l.c.Client().CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release})
		if err != nil {
			return false, err.Error()
		}
		addrs := map[string]string{}
		want = want[:0]
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
				addrs[p.Name] = p.Status.PodIP
				want = append(want, p.Name)
			}
		}
		slices.Sort(want)
		var got, state []string
		up := 0
		for _, tg := range l.targets(ctx, t, l.scrape.job) {
			pod := string(tg.Labels["pod"])
			got = append(got, pod)
			state = append(state, fmt.Sprintf("%s %s %s %q labels %v", pod, tg.ScrapeURL, tg.Health, tg.LastError, tg.Labels))
			// The ServiceMonitor's scheme and path at the Pod's IP, with the labels the
			// operator's relabelings give it.
			url := regexp.MustCompile(`^` + regexp.QuoteMeta(l.scrape.scheme+"://"+addrs[pod]) + `:\d+` + regexp.QuoteMeta(l.scrape.path) + `$`)
			labels := model.LabelSet{"job": model.LabelValue(l.scrape.metricsJob), "namespace": namespace, "service": model.LabelValue(l.scrape.metricsJob),
				"endpoint": model.LabelValue(l.scrape.port), "container": "controller"}
			labelled := true
			for k, v := range labels {
				labelled = labelled && tg.Labels[k] == v
			}
			if tg.Health == promv1.HealthGood && url.MatchString(tg.ScrapeURL) && labelled {
				up++
			}
		}
		slices.Sort(got)
		return len(want) == 2 && slices.Equal(got, want) && up == len(want),
			fmt.Sprintf("Pods %v, targets %s", addrs, strings.Join(state, "; "))
	}))
	// Every replica builds its stage queues at start (a follower's workers wait for the
	// Lease), so each exports the status stage's queue latency, under its own pod label.
	var state string
	cluster.Eventually(t, time.Minute, "up and a stage's queue latency of each Pod, by pod label", ownContext(func(ctx context.Context) (bool, string) {
		upPods := l.podsOf(ctx, t, fmt.Sprintf(`up{job=%q,namespace=%q} == 1`, l.scrape.metricsJob, namespace))
		leader, err := l.leaseHolder(ctx)
		if err != nil {
			return false, err.Error()
		}
		stagePods := l.podsOf(ctx, t, fmt.Sprintf(`count by (pod) (workqueue_queue_duration_seconds_count{job=%q,namespace=%q,name="status"})`, l.scrape.metricsJob, namespace))
		state = fmt.Sprintf("up == 1 for pods %v (want %v); the status stage's queue latency from pods %v (leader %s)", upPods, want, stagePods, leader)
		return slices.Equal(upPods, want) && slices.Equal(stagePods, want), state
	}))
	t.Log(state)
	return want
}

// ownContext gives each call of check a context of its own (10 s) instead of the one
// cluster.Eventually bounds by its whole timeout: a check that started just before that
// timeout would fail on the expired context, and Eventually would report its error
// ("context deadline exceeded") instead of the state the checks saw.
func ownContext(check func(context.Context) (bool, string)) func(context.Context) (bool, string) {
	return func(context.Context) (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return check(ctx)
	}
}

// targets returns the active targets of scrape job.
func (l *leg) targets(ctx context.Context, t *testing.T, job string) []promv1.ActiveTarget {
	t.Helper()
	res, err := l.scrape.api.Targets(ctx)
	if err != nil {
		t.Fatalf("Prometheus targets: %v", err)
	}
	var out []promv1.ActiveTarget
	for _, tg := range res.Active {
		if tg.ScrapePool == job {
			out = append(out, tg)
		}
	}
	return out
}

// podsOf evaluates the instant query q and returns the sorted pod labels of its series.
func (l *leg) podsOf(ctx context.Context, t *testing.T, q string) []string {
	t.Helper()
	v, _, _, err := l.scrape.api.Query(ctx, q, time.Now())
	if err != nil {
		t.Fatalf("query %s: %v", q, err)
	}
	var pods []string
	for _, s := range v.(model.Vector) {
		pods = append(pods, string(s.Metric["pod"]))
	}
	slices.Sort(pods)
	return pods
}
