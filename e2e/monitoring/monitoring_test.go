package monitoring

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	"sigs.k8s.io/yaml"

	"github.com/trainyard/trainyard/e2e/cluster"
	ctrlproc "github.com/trainyard/trainyard/e2e/controller"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerclient "github.com/trainyard/trainyard/pkg/clientset/clientset/versioned"
	"github.com/trainyard/trainyard/pkg/progress/wire"
)

// forDivisor shortens every alert's `for:` in the rules Prometheus evaluates
// (rulesFile): 5m -> 10s, 15m -> 30s, 20m -> 40s, 1h -> 2m. Rate windows and thresholds
// stay the chart's; Prometheus evaluates every 2 s (cluster.PrometheusGlobal).
const forDivisor = 30

// scrapeInterval is the ServiceMonitor's interval in the test; dashboards' rates use
// $__rate_interval, which Grafana makes at least 4 scrape intervals: rateInterval.
const (
	scrapeInterval = "5s"
	rateInterval   = "1m"
)

// chartValues are the chart's values in the test: the ServiceMonitor with its default
// authentication and a relabeling (so that relabelings are shown to reach the scrape
// configuration), the PrometheusRule, leader election as the chart has it. faultBounds
// lowers two bounds that a local fault cannot reach within a test at their defaults:
// the queue latency p99 (60 s) and the progress reports refused per second (5/s over
// 5 minutes); the expressions stay the chart's.
func chartValues(faultBounds bool) string {
	v := `metrics:
  serviceMonitor:
    enabled: true
    interval: ` + scrapeInterval + `
    relabelings:
      - targetLabel: cluster
        replacement: e2e
  prometheusRule:
    enabled: true
`
	if faultBounds {
		v += `    stageQueueBacklog: {thresholdSeconds: 1}
    progressReportFlood: {rejectedPerSecond: 0.1}
`
	}
	return v
}

// TestMonitoring is issue 39's items 1-3 on one Prometheus, in order, since each step
// needs the series of the ones before: the controller process scraped with the scrape
// configuration of the chart's ServiceMonitor, as the chart's metrics scraper (and a
// scrape without its token refused); a healthy workload with no alert firing; local
// faults, each firing its alert; then every recording rule and dashboard query returns
// data over the run.
func TestMonitoring(t *testing.T) {
	c := cluster.Shared(t)
	ctx := context.Background()
	start := time.Now()
	p := newProm(t, c)
	restConfig := c.RESTConfig()
	restConfig.QPS, restConfig.Burst = 200, 400 // the bursts below, not client-side throttling
	trainers, err := trainerclient.NewForConfig(restConfig)
	if err != nil {
		t.Fatal(err)
	}
	root, err := cluster.FindRepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	render := func(faultBounds bool) Chart {
		t.Helper()
		chart, err := RenderChart(ctx, c.BinaryPath(cluster.Helm), root, chartValues(faultBounds))
		if err != nil {
			t.Fatal(err)
		}
		return chart
	}
	chart := render(false)
	// Leader election on, as the chart runs it (the NoLeader alert needs it).
	ctrlArgs := []string{"--metrics-secure=true", "--metrics-auth=true", "--leader-elect=true", "--leader-elect-namespace=" + ReleaseNamespace,
		"--v=4"} // --v=4: refused progress reports are logged
	var (
		ctrl  *ctrlproc.Process
		setup *Setup
	)
	// scrape points Prometheus at ctrl (each start has new ports): the ServiceMonitor's
	// scrape, the same endpoint without its authorization (Prometheus sends no token),
	// and the chart's rules, from chart.
	scrape := func(chart Chart) {
		t.Helper()
		noToken, err := chart.Get("ServiceMonitor", Release)
		if err != nil {
			t.Fatal(err)
		}
		noToken = noToken.DeepCopy()
		eps, _, _ := unstructured.NestedSlice(noToken.Object, "spec", "endpoints")
		delete(eps[0].(map[string]any), "authorization")
		_ = unstructured.SetNestedSlice(noToken.Object, eps, "spec", "endpoints")
		noToken.SetName(Release + "-without-token")
		unauthenticated, err := ScrapeConfig(noToken, 0, Target{Address: ctrl.MetricsAddr, Namespace: ReleaseNamespace, Service: "without-token", Pod: "trainyard-host"})
		if err != nil {
			t.Fatal(err)
		}
		if setup, err = ScrapeController(ctx, c, chart, ctrl.MetricsAddr, unauthenticated, forDivisor); err != nil {
			t.Fatal(err)
		}
		// A fault must come after the first scrape: a counter whose first sample already
		// holds its increments has no increase() (a TrainJob refused 5 times within
		// 2 s of a start, as the status stage's retries do, then only every 10 min).
		cluster.Eventually(t, time.Minute, "a first scrape of "+ctrl.MetricsAddr, func(context.Context) (bool, string) {
			tg, ok := p.target(t, setup.Job)
			return ok && tg.Health == "up" && tg.ScrapeURL == "https://"+ctrl.MetricsAddr+"/metrics", fmt.Sprintf("%s %s %s", tg.ScrapeURL, tg.Health, tg.LastError)
		})
	}
	run := func(cfg ctrlproc.Config, chart Chart) {
		t.Helper()
		if ctrl != nil {
			ctrl.Stop(t)
		}
		cfg.Binary = controllerBinary
		ctrl = ctrlproc.Run(t, c, cfg)
		scrape(chart)
	}
	run(ctrlproc.Config{Args: ctrlArgs}, chart)
	sm, rule, job := setup.ServiceMonitor, setup.PrometheusRule, setup.Job
	secretName, _, _ := unstructured.NestedString(smEndpoint(t, sm), "authorization", "credentials", "name")

	t.Run("ScrapeConfigIsTheServiceMonitors", func(t *testing.T) {
		expectScrapeConfig(t, p, sm, job, setup.Token, secretName)
	})

	t.Run("UnmappedServiceMonitorFieldIsRefused", func(t *testing.T) {
		// A field the mapping does not know (here the deprecated bearerTokenFile) must
		// fail loudly, not be dropped from the scrape configuration.
		odd := sm.DeepCopy()
		eps, _, _ := unstructured.NestedSlice(odd.Object, "spec", "endpoints")
		eps[0].(map[string]any)["bearerTokenFile"] = "/var/run/secrets/kubernetes.io/serviceaccount/token"
		_ = unstructured.SetNestedSlice(odd.Object, eps, "spec", "endpoints")
		_, err := ScrapeConfig(odd, 0, Target{Address: "127.0.0.1:1", CredentialsFile: "/dev/null"})
		if err == nil || !strings.Contains(err.Error(), "spec.endpoints[0].bearerTokenFile") {
			t.Errorf("ScrapeConfig with bearerTokenFile: %v; want an error naming the field", err)
		}
	})

	t.Run("ScrapedWithTheScrapersTokenOnly", func(t *testing.T) {
		cluster.Eventually(t, time.Minute, "scrape job "+job+" up", func(context.Context) (bool, string) {
			tg, ok := p.target(t, job)
			return ok && tg.Health == "up", fmt.Sprintf("%s %s", tg.Health, tg.LastError)
		})
		// The relabeling reached the series, and the series carry the labels the rules select.
		if v := p.query(t, `up{job="`+MetricsService+`",namespace="`+ReleaseNamespace+`",cluster="e2e"}`); v.String() == "" || !strings.Contains(v.String(), "=> 1") {
			t.Errorf("up of the chart's job: %v; want 1 with the relabeled cluster label", v)
		}
		noTokenJob := fmt.Sprintf("serviceMonitor/%s/%s-without-token/0", ReleaseNamespace, Release)
		cluster.Eventually(t, time.Minute, "scrape job "+noTokenJob+" refused", func(context.Context) (bool, string) {
			tg, ok := p.target(t, noTokenJob)
			return ok && tg.Health == "down" && strings.Contains(tg.LastError, "401"), fmt.Sprintf("%s %q", tg.Health, tg.LastError)
		})
	})

	// A healthy workload: a burst of TrainJobs run to Complete, and progress reports of
	// a running one, accepted.
	ns := cluster.NewNamespace(t, c)
	createRuntime(t, trainers, ns, "burst", nil)
	createRuntime(t, trainers, ns, "long", map[string]string{cluster.AnnotationCompleteDelay: "10m"})
	burst(t, trainers, ns, "healthy", 40)
	reporter := createTrainJob(t, trainers, ns, "reporter", "long")
	pod := waitPod(t, c, ns, reporter.Name)
	progressURL := wire.Path(ns, reporter.Name)
	reports := func() reportClient { return progressClient(ctrl.ProgressAddr) }
	podToken := mintPodToken(t, c, pod, wire.Audience(ns, reporter.Name))
	for i := range 5 {
		body := fmt.Sprintf(`{"trainerStatus":{"progressPercentage":%d,"lastUpdatedTime":%q}}`, 10*(i+1), time.Now().UTC().Format(time.RFC3339))
		if code := postReport(t, reports(), progressURL, podToken, body); code != http.StatusOK {
			t.Errorf("progress report %d: %d, want 200", i, code)
		}
		time.Sleep(time.Second)
	}
	waitAllComplete(t, trainers, ns, "healthy", 40)

	t.Run("NoAlertFiresInAHealthyRun", func(t *testing.T) {
		// Long enough for any alert whose condition held since the workload to fire:
		// the longest shortened `for:` of a per-replica alert is 40 s (writesRefused).
		time.Sleep(45 * time.Second)
		if f := p.firing(t); len(f) > 0 {
			t.Errorf("alerts firing in a healthy run: %v", f)
		}
	})

	var (
		mu      sync.Mutex
		figures []string
	)
	expectFiring := func(t *testing.T, alert string, faultAt time.Time, timeout time.Duration, labels map[string]string) {
		t.Helper()
		cluster.Eventually(t, timeout, alert+" firing", func(context.Context) (bool, string) {
			firing := p.firing(t)
			for _, ls := range firing[alert] {
				match := true
				for k, v := range labels {
					match = match && string(ls[model.LabelName(k)]) == v
				}
				if match {
					return true, ""
				}
			}
			return false, fmt.Sprintf("firing: %v", firing)
		})
		chartFor := AlertFor(rule, alert)
		line := fmt.Sprintf("%s: firing %s after the fault; for: %s (the chart's %s ÷ %d)", alert, time.Since(faultAt).Round(time.Second), shortened(chartFor), chartFor, forDivisor)
		t.Log(line)
		mu.Lock()
		figures = append(figures, line)
		mu.Unlock()
	}

	// From here on the two bounds a test cannot reach at their defaults are lowered.
	faultChart := render(true)
	scrape(faultChart)

	t.Run("QueueLatencyOverItsBoundFiresStageQueueBacklog", func(t *testing.T) {
		// One worker in the status stage, which writes each JobSet, its API client held
		// to 20 requests/s, and a burst of 300: the last TrainJobs wait in its queue for
		// tens of seconds, whatever the machine's speed, over the 1 s bound. (One worker
		// in resolve_runtime, which reads from caches only, drained 300 within the bound
		// on a quiet machine.)
		run(ctrlproc.Config{Args: append(slices.Clone(ctrlArgs), "--stage-workers=status=1", "--kube-api-qps=20")}, faultChart)
		faultAt := time.Now()
		burst(t, trainers, ns, "backlog", 300)
		expectFiring(t, "TrainyardStageQueueBacklog", faultAt, 3*time.Minute, nil)
		run(ctrlproc.Config{Args: ctrlArgs}, faultChart) // the next faults with the chart's workers
	})

	t.Run("DeniedWritesFireWritesRefused", func(t *testing.T) {
		denied := cluster.NewNamespace(t, c)
		denyJobSets(t, c, denied)
		createRuntime(t, trainers, denied, "burst", nil)
		faultAt := time.Now()
		createTrainJob(t, trainers, denied, "refused", "burst")
		expectFiring(t, "TrainyardWritesRefused", faultAt, 3*time.Minute, nil)
	})

	t.Run("RefusedProgressReportsFireProgressReportFlood", func(t *testing.T) {
		faultAt := time.Now()
		for range 100 { // no token: refused, Unauthenticated
			if code := postReport(t, reports(), progressURL, "", `{"trainerStatus":{"progressPercentage":1}}`); code != http.StatusForbidden {
				t.Fatalf("a report without a token: %d, want 403", code)
			}
		}
		expectFiring(t, "TrainyardProgressReportFlood", faultAt, 3*time.Minute, map[string]string{"problem": "rejected"})
	})

	t.Run("CloseCertificateExpiryFiresCertificateExpiring", func(t *testing.T) {
		// A serving certificate of one day, in a Secret of its own so that it is issued
		// now: 1 day is under the alert's 14 days.
		config := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(config, []byte("apiVersion: config.trainyard.dev/v1alpha1\nkind: Configuration\nwebhook:\n  certificates:\n    secretName: trainyard-webhook-certs-short\n    servingValidity: 24h\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		faultAt := time.Now()
		run(ctrlproc.Config{Args: append(slices.Clone(ctrlArgs), "--config="+config)}, faultChart)
		expectFiring(t, "TrainyardCertificateExpiringSoon", faultAt, 3*time.Minute, map[string]string{"certificate": "serving"})
	})

	t.Run("LeaseHeldElsewhereFiresNoLeader", func(t *testing.T) {
		ctrl.Stop(t)
		holdLease(t, c)
		faultAt := time.Now()
		run(ctrlproc.Config{Args: ctrlArgs, NoWait: true}, faultChart)
		expectFiring(t, "TrainyardNoLeader", faultAt, 3*time.Minute, nil)
	})

	t.Run("StoppedControllerFiresControllerDown", func(t *testing.T) {
		faultAt := time.Now()
		ctrl.Stop(t)
		expectFiring(t, "TrainyardControllerDown", faultAt, 3*time.Minute, nil)
	})

	t.Run("EveryRecordingRuleAndDashboardQueryReturnsData", func(t *testing.T) {
		expectQueriesReturnData(t, p, rule, start)
	})

	for _, f := range figures {
		t.Log(f)
	}
}

// shortened is the chart's for: after RulesFile.
func shortened(chartFor string) string {
	d, err := time.ParseDuration(chartFor)
	if err != nil {
		return "none"
	}
	return ShortenedFor(d, forDivisor)
}

// smEndpoint returns the ServiceMonitor's first endpoint.
func smEndpoint(t *testing.T, sm *unstructured.Unstructured) map[string]any {
	t.Helper()
	eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if len(eps) != 1 {
		t.Fatalf("the ServiceMonitor has %d endpoints, want 1", len(eps))
	}
	return eps[0].(map[string]any)
}

// expectScrapeConfig compares the scrape configuration Prometheus runs for job with
// the ServiceMonitor's endpoint, field by field as Prometheus Operator maps them.
func expectScrapeConfig(t *testing.T, p prom, sm *unstructured.Unstructured, job string, token []byte, secretName string) {
	t.Helper()
	var cfg struct {
		ScrapeConfigs []map[string]any `json:"scrape_configs"`
	}
	if err := yaml.Unmarshal([]byte(p.config(t)), &cfg); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	for _, sc := range cfg.ScrapeConfigs {
		if sc["job_name"] == job {
			got = sc
		}
	}
	if got == nil {
		t.Fatalf("Prometheus runs no scrape config %s", job)
	}
	ep := smEndpoint(t, sm)
	check := func(what string, gotV, wantV any) {
		t.Helper()
		if fmt.Sprint(gotV) != fmt.Sprint(wantV) {
			t.Errorf("%s = %v, want %v (the ServiceMonitor's)", what, gotV, wantV)
		}
	}
	str := func(m map[string]any, path ...string) any {
		v, found, _ := unstructured.NestedFieldNoCopy(m, path...)
		if !found {
			return "<unset>"
		}
		return v
	}
	check("scheme", got["scheme"], ep["scheme"])
	check("metrics_path", got["metrics_path"], ep["path"])
	check("scrape_interval", got["scrape_interval"], ep["interval"])
	check("tls_config.insecure_skip_verify", str(got, "tls_config", "insecure_skip_verify"), str(ep, "tlsConfig", "insecureSkipVerify"))
	check("authorization.type", str(got, "authorization", "type"), str(ep, "authorization", "type"))
	check("authorization.credentials secret", str(ep, "authorization", "credentials", "name"), secretName)
	file, _ := str(got, "authorization", "credentials_file").(string)
	if data, err := os.ReadFile(file); err != nil || !bytes.Equal(data, token) {
		t.Errorf("authorization.credentials_file %q does not hold the token of Secret %s (%v)", file, secretName, err)
	}
	relabelings, _ := ep["relabelings"].([]any)
	configs, _ := got["relabel_configs"].([]any)
	if len(relabelings) == 0 || len(configs) < len(relabelings) {
		t.Fatalf("relabel_configs %v do not end with the ServiceMonitor's relabelings %v", configs, relabelings)
	}
	for i, r := range relabelings {
		c := configs[len(configs)-len(relabelings)+i].(map[string]any)
		for k, v := range r.(map[string]any) {
			check(fmt.Sprintf("relabel_configs[%d].%s", i, k), c[snake(k)], v)
		}
	}
}

// snake converts a RelabelConfig field name to Prometheus' (targetLabel -> target_label).
func snake(s string) string {
	return strings.ToLower(regexp.MustCompile(`([a-z])([A-Z])`).ReplaceAllString(s, "${1}_${2}"))
}

// createRuntime creates a TrainingRuntime of one node whose kwok pods run for the
// default delay, or as podAnnotations say.
func createRuntime(t *testing.T, trainers trainerclient.Interface, ns, name string, podAnnotations map[string]string) {
	t.Helper()
	rt := &trainer.TrainingRuntime{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: trainer.TrainingRuntimeSpec{
			MLPolicy: &trainer.MLPolicy{NumNodes: ptr.To[int32](1), MLPolicySource: trainer.MLPolicySource{Torch: &trainer.TorchMLPolicySource{}}},
			Template: trainer.JobSetTemplateSpec{Spec: jobsetv1alpha2.JobSetSpec{ReplicatedJobs: []jobsetv1alpha2.ReplicatedJob{{
				Name: "node",
				Template: batchv1.JobTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{trainer.LabelTrainJobAncestor: trainer.AncestorTrainer}},
					Spec: batchv1.JobSpec{BackoffLimit: ptr.To[int32](0), Template: corev1.PodTemplateSpec{
						ObjectMeta: metav1.ObjectMeta{Annotations: podAnnotations},
						Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: trainer.ContainerNode, Image: "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"}}},
					}},
				},
			}}}},
		},
	}
	if _, err := trainers.TrainerV1alpha1().TrainingRuntimes(ns).Create(context.Background(), rt, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating TrainingRuntime %s/%s: %v", ns, name, err)
	}
}

func createTrainJob(t *testing.T, trainers trainerclient.Interface, ns, name, runtime string) *trainer.TrainJob {
	t.Helper()
	tj, err := trainers.TrainerV1alpha1().TrainJobs(ns).Create(context.Background(), &trainer.TrainJob{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: trainer.TrainJobSpec{RuntimeRef: trainer.RuntimeRef{
			Name: runtime, APIGroup: ptr.To(trainer.GroupName), Kind: ptr.To(trainer.TrainingRuntimeKind)}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating TrainJob %s/%s: %v", ns, name, err)
	}
	return tj
}

// burst creates n TrainJobs <prefix>-<i> of runtime "burst" from 16 clients at once.
func burst(t *testing.T, trainers trainerclient.Interface, ns, prefix string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int, n)
	for i := range n {
		next <- i
	}
	close(next)
	for range 16 {
		wg.Go(func() {
			for i := range next {
				_, err := trainers.TrainerV1alpha1().TrainJobs(ns).Create(context.Background(), &trainer.TrainJob{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", prefix, i)},
					Spec: trainer.TrainJobSpec{RuntimeRef: trainer.RuntimeRef{
						Name: "burst", APIGroup: ptr.To(trainer.GroupName), Kind: ptr.To(trainer.TrainingRuntimeKind)}},
				}, metav1.CreateOptions{})
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("creating the burst %s: %v", prefix, err)
	}
}

// waitAllComplete waits until the n TrainJobs of prefix are Complete.
func waitAllComplete(t *testing.T, trainers trainerclient.Interface, ns, prefix string, n int) {
	t.Helper()
	cluster.Eventually(t, 5*time.Minute, fmt.Sprintf("%d TrainJobs %s-* Complete", n, prefix), func(ctx context.Context) (bool, string) {
		list, err := trainers.TrainerV1alpha1().TrainJobs(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		done := 0
		for _, tj := range list.Items {
			if strings.HasPrefix(tj.Name, prefix+"-") && meta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobComplete) {
				done++
			}
		}
		return done == n, fmt.Sprintf("%d Complete", done)
	})
}

// waitPod waits for a Running pod of the TrainJob and returns it.
func waitPod(t *testing.T, c *cluster.Cluster, ns, trainJob string) corev1.Pod {
	t.Helper()
	var pod corev1.Pod
	cluster.Eventually(t, 2*time.Minute, "a running pod of "+trainJob, func(ctx context.Context) (bool, string) {
		pods, err := c.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: jobsetv1alpha2.JobSetNameKey + "=" + trainJob})
		if err != nil {
			return false, err.Error()
		}
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				pod = p
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d pods", len(pods.Items))
	})
	return pod
}

// mintPodToken mints a token bound to pod for audience, as the kubelet does for the
// trainer's projected volume.
func mintPodToken(t *testing.T, c *cluster.Cluster, pod corev1.Pod, audience string) string {
	t.Helper()
	tr, err := c.Client().CoreV1().ServiceAccounts(pod.Namespace).CreateToken(context.Background(), pod.Spec.ServiceAccountName,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			Audiences: []string{audience}, ExpirationSeconds: ptr.To[int64](3600),
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("minting a token for pod %s: %v", pod.Name, err)
	}
	return tr.Status.Token
}

// reportClient posts progress reports to the progress server at addr. The server's
// certificate is not what this test checks (e2e/trainjob does), so it is not verified.
type reportClient struct {
	addr   string
	client *http.Client
}

func progressClient(addr string) reportClient {
	return reportClient{addr: addr, client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}, //nolint:gosec // loopback, see above
	}}}
}

// postReport posts body as a progress report to the progress server (token "" sends
// none) and returns the status code.
func postReport(t *testing.T, rc reportClient, path, token, body string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "https://"+rc.addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := rc.client.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	return resp.StatusCode
}

// denyJobSets makes the API server refuse every JobSet created in ns, with a
// ValidatingAdmissionPolicy: the controller's writes there are refused (Invalid).
func denyJobSets(t *testing.T, c *cluster.Cluster, ns string) {
	t.Helper()
	ctx := context.Background()
	name := "deny-jobsets-" + ns
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"jobset.x-k8s.io"}, APIVersions: []string{"*"}, Resources: []string{"jobsets"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{Expression: "false", Message: "JobSets are not allowed in this namespace (e2e/monitoring)"}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}},
		},
	}
	arc := c.Client().AdmissionregistrationV1()
	if _, err := arc.ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := arc.ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = arc.ValidatingAdmissionPolicyBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
		_ = arc.ValidatingAdmissionPolicies().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	// The policy applies once the API server has loaded it: a dry-run create is refused.
	cluster.Eventually(t, time.Minute, "JobSets refused in "+ns, func(ctx context.Context) (bool, string) {
		js := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
			"metadata": map[string]any{"name": "probe", "namespace": ns}, "spec": map[string]any{"replicatedJobs": []any{}}}}
		_, err := c.Dynamic().Resource(jobsetv1alpha2.SchemeGroupVersion.WithResource("jobsets")).Namespace(ns).Create(ctx, js, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "not allowed in this namespace"), fmt.Sprint(err)
	})
}

// holdLease gives the controller's Lease to another holder for an hour, so that a
// controller started now runs, and is scraped, without ever leading.
func holdLease(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	ctx := context.Background()
	leases := c.Client().CoordinationV1().Leases(ReleaseNamespace)
	now := metav1.NewMicroTime(time.Now())
	spec := coordinationv1.LeaseSpec{HolderIdentity: ptr.To("another-controller"), LeaseDurationSeconds: ptr.To[int32](3600), AcquireTime: &now, RenewTime: &now}
	l, err := leases.Get(ctx, "trainyard-controller", metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "trainyard-controller"}, Spec: spec}, metav1.CreateOptions{})
	case err == nil:
		l.Spec = spec
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Fatalf("holding the Lease: %v", err)
	}
	t.Cleanup(func() { _ = leases.Delete(context.Background(), "trainyard-controller", metav1.DeleteOptions{}) })
}

// dashboardVariables are the values the dashboard's variables take for this run;
// $__rate_interval is 4 scrape intervals at least in Grafana, and $__range the run.
func dashboardVariables(since time.Duration) *strings.Replacer {
	return strings.NewReplacer(
		"$namespace", ReleaseNamespace, "$job", MetricsService, "$stage", ".*",
		"$__rate_interval", rateInterval, "$__range", fmt.Sprintf("%ds", int(since.Seconds())+60),
		"${slo_latency}", "30", "$slo_objective", "0.99")
}

// gtZero matches a query's trailing "> 0": panels that show a series only while it is
// above zero (errors, panics, refusals).
var gtZero = regexp.MustCompile(`\s*>\s*0\s*$`)

// expectQueriesReturnData evaluates every recording rule of rule and every query of
// the chart's dashboard over the run, as a panel does, and fails naming each one that
// returns nothing. A query ending in "> 0" is evaluated without it: its panel is meant
// to be empty while nothing goes wrong, but its series must exist.
func expectQueriesReturnData(t *testing.T, p prom, rule *unstructured.Unstructured, start time.Time) {
	t.Helper()
	root, err := cluster.FindRepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	var queries []string
	groups, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups")
	for _, g := range groups {
		rules, _ := g.(map[string]any)["rules"].([]any)
		for _, r := range rules {
			if name, ok := r.(map[string]any)["record"].(string); ok {
				queries = append(queries, name)
			}
		}
	}
	if len(queries) == 0 {
		t.Error("the PrometheusRule has no recording rule")
	}
	data, err := os.ReadFile(filepath.Join(root, "charts", "trainyard", "dashboards", "trainyard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dashboard struct{ Panels []panel }
	if err := json.Unmarshal(data, &dashboard); err != nil {
		t.Fatal(err)
	}
	vars := dashboardVariables(time.Since(start))
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, pn := range ps {
			for _, tg := range pn.Targets {
				queries = append(queries, gtZero.ReplaceAllString(vars.Replace(tg.Expr), ""))
			}
			walk(pn.Panels)
		}
	}
	walk(dashboard.Panels)
	var empty []string
	for _, q := range queries {
		if n := p.queryRange(t, q, start, 5*time.Second); n == 0 {
			empty = append(empty, q)
		}
	}
	t.Logf("%d queries, %d returned no data", len(queries), len(empty))
	for _, q := range empty {
		t.Errorf("no data over the run for: %s", q)
	}
}

// panel is the part of a Grafana panel the test reads.
type panel struct {
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}
