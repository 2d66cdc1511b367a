package charttest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/trainyard/trainyard/hack/charttest/dashboard"
	"github.com/trainyard/trainyard/pkg/metrics"
)

// stageNames are the pipeline's stages, then the progress stage (package
// progress), which runs in a pipeline of its own on every replica, and the
// OptimizationJob stage (package optimization/controller), in its own on the leader.
var stageNames = []string{"resolve_runtime", "merge_patches", "ml_policy", "gang_scheduling", "dra_claims", "status", "progress", "optimization"}

// scrapeLabels are labels Prometheus adds to every series it scrapes through a
// Prometheus Operator ServiceMonitor.
var scrapeLabels = []string{"job", "instance", "namespace", "pod", "service", "endpoint", "container", "cluster"}

// family is what a query may rely on about one exported metric.
type family struct {
	typ    dto.MetricType
	labels map[string][]string // label → values seen (enumerations only)
}

// exported builds the metrics exactly as the controller binary does (Go and
// process collectors, REST client metrics, metrics.New), creates every
// labelled child, and returns the gathered families by name.
func exported(t *testing.T) map[string]family {
	t.Helper()
	exportedOnce.Do(func() { exportedFams, exportedErr = gatherExported() })
	if exportedErr != nil {
		t.Fatal(exportedErr)
	}
	return exportedFams
}

// RegisterClientMetrics hooks into client-go once per process, so the
// registry is built once per test binary.
var (
	exportedOnce sync.Once
	exportedFams map[string]family
	exportedErr  error
)

func gatherExported() (map[string]family, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics.Catalogue(reg, stageNames)
	mfs, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	out := map[string]family{}
	for _, mf := range mfs {
		f := family{typ: mf.GetType(), labels: map[string][]string{}}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if !slices.Contains(f.labels[lp.GetName()], lp.GetValue()) {
					f.labels[lp.GetName()] = append(f.labels[lp.GetName()], lp.GetValue())
				}
			}
		}
		out[mf.GetName()] = f
	}
	return out, nil
}

// enumLabels have a closed set of values; a literal matcher on them must name
// one of the values the binary exports. (Except "name" on the leader election metrics:
// there it is the Lease name, which the chart sets.)
var enumLabels = []string{"name", "stage", "result", "reason", "runtime_kind", "phase", "certificate", "webhook", "kind", "operation", "cached"}

// literalAlternation matches a regular expression that is only literals joined by |.
var literalAlternation = regexp.MustCompile(`^[A-Za-z0-9_]+(\|[A-Za-z0-9_]+)+$`)

// checkQuery parses expr and checks each selector against the exported
// families: the metric exists (as itself or as a histogram's _bucket, _sum or
// _count), each matched label exists on it, and literal values of enumerated
// labels are values the binary uses. recorded are names defined by recording
// rules.
func checkQuery(errorf func(string, ...any), where, expr string, fams map[string]family, recorded map[string]bool) {
	parsed, err := parser.ParseExpr(expr)
	if err != nil {
		errorf("%s: %v\n%s", where, err, expr)
		return
	}
	parser.Inspect(parsed, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		if name == "up" || recorded[name] {
			return nil
		}
		base, f, ok := lookupFamily(name, fams)
		if !ok {
			errorf("%s: metric %q is not exported by the controller\n%s", where, name, expr)
			return nil
		}
		if f.typ == dto.MetricType_HISTOGRAM && base == name {
			errorf("%s: histogram %q used without _bucket/_sum/_count", where, name)
		}
		for _, m := range vs.LabelMatchers {
			if m.Name == labels.MetricName || slices.Contains(scrapeLabels, m.Name) {
				continue
			}
			if m.Name == "le" && f.typ == dto.MetricType_HISTOGRAM {
				continue
			}
			values, ok := f.labels[m.Name]
			if !ok {
				errorf("%s: %s has no label %q (it has %v)", where, base, m.Name, keys(f.labels))
				continue
			}
			configurable := m.Name == "name" && strings.HasPrefix(base, "leader_election_")
			if slices.Contains(enumLabels, m.Name) && !configurable && len(values) > 0 && (m.Type == labels.MatchEqual || m.Type == labels.MatchRegexp) {
				matched := false
				for _, v := range values {
					matched = matched || m.Matches(v)
				}
				if !matched {
					errorf("%s: %s matcher %s matches none of the exported values %v", where, base, m, values)
				}
				// An alternation of literals ("Failed|Suspended"): each must be a value,
				// or a misspelt one silently shows nothing.
				if m.Type == labels.MatchRegexp && literalAlternation.MatchString(m.Value) {
					for _, alt := range strings.Split(m.Value, "|") {
						if !slices.Contains(values, alt) {
							errorf("%s: %s matcher %s: %q is none of the exported values %v", where, base, m, alt, values)
						}
					}
				}
			}
		}
		return nil
	})
}

func lookupFamily(name string, fams map[string]family) (string, family, bool) {
	if f, ok := fams[name]; ok {
		return name, f, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base := strings.TrimSuffix(name, suffix)
		if f, ok := fams[base]; ok && base != name && (f.typ == dto.MetricType_HISTOGRAM || f.typ == dto.MetricType_SUMMARY) {
			if suffix == "_bucket" && f.typ != dto.MetricType_HISTOGRAM {
				return "", family{}, false
			}
			return base, f, true
		}
	}
	return "", family{}, false
}

func keys(m map[string][]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// grafanaVars matches Grafana variable references: $var, ${var}, ${var:fmt}.
var grafanaVars = regexp.MustCompile(`\$\{([A-Za-z0-9_]+)(?::[a-z]+)?\}|\$([A-Za-z0-9_]+)`)

// substitute replaces Grafana variables with values a query would get, and
// reports variables the dashboard does not define.
func substitute(expr string, defined map[string]string) (string, []string) {
	var undefined []string
	out := grafanaVars.ReplaceAllStringFunc(expr, func(ref string) string {
		m := grafanaVars.FindStringSubmatch(ref)
		name := m[1] + m[2]
		switch name {
		case "__rate_interval", "__interval", "__range":
			return "5m"
		}
		v, ok := defined[name]
		if !ok {
			undefined = append(undefined, name)
		}
		return v
	})
	return out, undefined
}

// dashboardQueries walks panels (and the panels nested in collapsed rows) and
// returns every PromQL expression with where it is.
func dashboardQueries(t *testing.T, data []byte) (map[string]string, map[string]string) {
	t.Helper()
	var d struct {
		UID        string `json:"uid"`
		Templating struct {
			List []struct {
				Name    string `json:"name"`
				Type    string `json:"type"`
				Query   any    `json:"query"`
				Current *struct {
					Value any `json:"value"`
				} `json:"current"`
			} `json:"list"`
		} `json:"templating"`
		Panels []json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	if d.UID != dashboard.UID {
		t.Errorf("dashboard uid = %q, want %q", d.UID, dashboard.UID)
	}
	vars := map[string]string{}
	queries := map[string]string{}
	for _, v := range d.Templating.List {
		switch v.Type {
		case "custom":
			vars[v.Name] = fmt.Sprint(v.Current.Value)
		case "query":
			vars[v.Name] = "status" // a stage, a namespace or a job: any literal parses
			if q, ok := v.Query.(map[string]any); ok {
				queries["variable "+v.Name] = fmt.Sprint(q["query"])
			}
		default:
			vars[v.Name] = "x"
		}
	}
	type panel struct {
		ID      int    `json:"id"`
		Title   string `json:"title"`
		Type    string `json:"type"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
		Datasource *struct {
			UID string `json:"uid"`
		} `json:"datasource"`
		Panels []json.RawMessage `json:"panels"`
	}
	ids := map[int]bool{}
	var walk func([]json.RawMessage)
	walk = func(raw []json.RawMessage) {
		for _, r := range raw {
			var p panel
			if err := json.Unmarshal(r, &p); err != nil {
				t.Fatal(err)
			}
			if ids[p.ID] {
				t.Errorf("panel id %d used twice", p.ID)
			}
			ids[p.ID] = true
			if p.Type != "row" && (p.Datasource == nil || p.Datasource.UID != "${datasource}") {
				t.Errorf("panel %q does not use the ${datasource} variable", p.Title)
			}
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for i, tg := range p.Targets {
				queries[fmt.Sprintf("panel %q query %d", p.Title, i)] = tg.Expr
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return queries, vars
}

func TestDashboardIsGenerated(t *testing.T) {
	want, err := dashboard.JSON()
	if err != nil {
		t.Fatal(err)
	}
	if got := mustReadFile(t, chartDir+"/dashboards/trainyard.json"); !bytes.Equal(got, want) {
		t.Fatal("charts/trainyard/dashboards/trainyard.json is stale or edited by hand; run: cd hack/charttest && go run ./cmd/gendashboard")
	}
}

func TestDashboardQueries(t *testing.T) {
	fams := exported(t)
	queries, vars := dashboardQueries(t, mustReadFile(t, chartDir+"/dashboards/trainyard.json"))
	if len(queries) < 40 {
		t.Fatalf("found only %d queries; is the walker broken?", len(queries))
	}
	used := map[string]bool{}
	for where, expr := range queries {
		if strings.HasPrefix(where, "variable ") {
			// label_values(selector, label): check the selector.
			m := regexp.MustCompile(`^label_values\((.*), *([a-z_]+)\)$`).FindStringSubmatch(expr)
			if m == nil {
				t.Errorf("%s: unexpected query %q", where, expr)
				continue
			}
			expr = m[1]
		}
		sub, undefined := substitute(expr, vars)
		if len(undefined) > 0 {
			t.Errorf("%s uses undefined variables %v", where, undefined)
		}
		checkQuery(t.Errorf, where, sub, fams, nil)
		for _, name := range metricNames(sub) {
			used[name] = true
		}
	}
	// Every Trainyard metric appears on the dashboard, but for
	// workqueue_work_duration_seconds: trainyard_stage_duration_seconds
	// measures the same work, split by result.
	for name := range fams {
		if strings.HasPrefix(name, "trainyard_") || strings.HasPrefix(name, "workqueue_") || strings.HasPrefix(name, "rest_client_") {
			if !used[name] && name != "workqueue_work_duration_seconds" {
				t.Errorf("metric %s is on no dashboard panel", name)
			}
		}
	}
}

// TestDashboardCheckCatchesMistakes proves the checks above fail on the
// mistakes they exist for.
func TestDashboardCheckCatchesMistakes(t *testing.T) {
	fams := exported(t)
	for _, expr := range []string{
		`rate(trainyard_stage_sync_total[5m])`,                                // misspelt metric
		`workqueue_depth{stage="status"}`,                                     // workqueue metrics label the stage "name"
		`trainyard_stage_syncs_total{result="success"}`,                       // not a result value
		`histogram_quantile(0.9, rate(trainyard_stage_duration_seconds[5m]))`, // histogram without _bucket
		`sum(rate(trainyard_stage_errors_total{reason="conflicts"}[5m]))`,     // not a reason
		`sum(rate(workqueue_adds_total[5m])`,                                  // does not parse
		`trainyard_admission_requests_total{result="rejected"}`,               // admission results are allowed, denied, error
		`trainyard_admission_warnings_total{kind="Pod"}`,                      // not a kind the webhooks admit
		`trainyard_progress_reports_rejected_total{reason="unauthorized"}`,    // it is unauthenticated
		`trainyard_progress_writes_total{result="conflict"}`,                  // write results are success, error
		`trainyard_progress_token_reviews_total{cached="yes"}`,                // cached is true or false
		`workqueue_depth{name="progres"}`,                                     // misspelt stage
		`trainyard_trainjobs_by_runtime{phase=~"Failed|Succeeded"}`,           // not a phase: Complete
		`trainyard_trainjobs_by_runtime{runtime_kind="Runtime"}`,              // not a runtime kind
	} {
		var complaints []string
		checkQuery(func(f string, a ...any) { complaints = append(complaints, fmt.Sprintf(f, a...)) }, "test", expr, fams, nil)
		if len(complaints) == 0 {
			t.Errorf("checkQuery accepted %s", expr)
		}
	}
}

func metricNames(expr string) []string {
	parsed, err := parser.ParseExpr(expr)
	if err != nil {
		return nil
	}
	var names []string
	parser.Inspect(parsed, func(node parser.Node, _ []parser.Node) error {
		if vs, ok := node.(*parser.VectorSelector); ok {
			name := vs.Name
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				name = strings.TrimSuffix(name, s)
			}
			names = append(names, name)
		}
		return nil
	})
	return names
}

// renderedRules renders the PrometheusRule with values and returns its spec as
// a Prometheus rule file.
func renderedRules(t *testing.T, values string) []byte {
	t.Helper()
	r := mustRender(t, values, withMonitoring())
	pr := r.get(t, "PrometheusRule", r.ofKind("Deployment")[0].GetName())
	spec, err := json.Marshal(pr.Object["spec"])
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

func TestPrometheusRule(t *testing.T) {
	fams := exported(t)
	runbooks := string(mustReadFile(t, repoRoot+"/docs/runbooks.md"))
	for _, name := range []string{"monitoring", "everything", "single-no-leader-election"} {
		t.Run(name, func(t *testing.T) {
			values := combinations[name]
			if name == "single-no-leader-election" {
				values += "\nmetrics: {prometheusRule: {enabled: true}}"
			}
			groups, errs := rulefmt.Parse(renderedRules(t, values), false)
			for _, err := range errs {
				t.Errorf("rulefmt: %v", err)
			}
			if groups == nil {
				return
			}
			recorded := map[string]bool{}
			alerts := map[string]bool{}
			for _, g := range groups.Groups {
				for _, rule := range g.Rules {
					if rule.Record != "" {
						recorded[rule.Record] = true
					}
				}
			}
			for _, g := range groups.Groups {
				for _, rule := range g.Rules {
					where := "record " + rule.Record
					if rule.Alert != "" {
						where = "alert " + rule.Alert
						alerts[rule.Alert] = true
						if rule.Labels["severity"] == "" {
							t.Errorf("%s has no severity", where)
						}
						url := rule.Annotations["runbook_url"]
						anchor := url[strings.LastIndex(url, "#")+1:]
						if anchor != strings.ToLower(rule.Alert) || !strings.Contains(runbooks, "\n## "+rule.Alert+"\n") {
							t.Errorf("%s: runbook_url %q has no section \"## %s\" in docs/runbooks.md", where, url, rule.Alert)
						}
						for _, a := range []string{"summary", "description"} {
							if rule.Annotations[a] == "" {
								t.Errorf("%s lacks annotation %s", where, a)
							}
						}
					}
					checkQuery(t.Errorf, where, rule.Expr, fams, recorded)
				}
			}
			wantAlerts := []string{
				"TrainyardControllerDown", "TrainyardNoLeader", "TrainyardStageWorkerStuck", "TrainyardStageQueueBacklog",
				"TrainyardStageErrorRatio", "TrainyardStagePanics", "TrainyardAPIClientThrottled",
				"TrainyardJobSetCreationSLOBurnFast", "TrainyardJobSetCreationSLOBurnSlow",
				"TrainyardLostUpdate", "TrainyardJobSetLagging", "TrainyardAdmissionErrors",
				"TrainyardProgressReportFlood", "TrainyardProgressWritesFailing",
				"TrainyardPipelineInFlightSaturated", "TrainyardWritesRefused", "TrainyardCertificateExpiringSoon",
			}
			if name == "single-no-leader-election" {
				wantAlerts = slices.DeleteFunc(wantAlerts, func(a string) bool { return a == "TrainyardNoLeader" })
			}
			if got := keysOf(alerts); !slices.Equal(got, sortedStrings(wantAlerts)) {
				t.Errorf("alerts = %v, want %v", got, sortedStrings(wantAlerts))
			}
		})
	}
	t.Run("alerts can be turned off one by one", func(t *testing.T) {
		spec := renderedRules(t, "metrics: {prometheusRule: {enabled: true, stagePanics: {enabled: false, severity: x}, jobSetCreationSLO: {enabled: false}, admissionErrors: {enabled: false}, progressReportFlood: {enabled: false}, progressWritesFailing: {enabled: false}, inFlightSaturated: {enabled: false}, writesRefused: {enabled: false}}}")
		for _, gone := range []string{"TrainyardStagePanics", "TrainyardJobSetCreationSLO", "trainyard:jobset_creation_slo_errors", "TrainyardAdmissionErrors", "TrainyardProgress", "TrainyardPipelineInFlightSaturated", "TrainyardWritesRefused"} {
			if bytes.Contains(spec, []byte(gone)) {
				t.Errorf("%s still rendered", gone)
			}
		}
	})
	t.Run("progress alerts only with the progress server", func(t *testing.T) {
		for _, values := range []string{"statusServer: {enabled: false}", "webhook: {enabled: false}"} {
			spec := renderedRules(t, values+"\nmetrics: {prometheusRule: {enabled: true}}")
			if bytes.Contains(spec, []byte("TrainyardProgress")) {
				t.Errorf("%s: progress alerts rendered without the progress server", values)
			}
			if !bytes.Contains(spec, []byte("TrainyardControllerDown")) {
				t.Errorf("%s: the other alerts are gone too", values)
			}
		}
	})
	t.Run("SLO bucket matches le in both formats", func(t *testing.T) {
		for latency, want := range map[string]string{
			"30":   `le=~"30(\\.0)?"`,
			"2.5":  `le=~"2.5"`,
			"7200": `le=~"7200(\\.0)?"`,
		} {
			values := "metrics: {prometheusRule: {enabled: true, jobSetCreationSLO: {latencySeconds: " + latency + "}}}"
			groups, errs := rulefmt.Parse(renderedRules(t, values), false)
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			expr := groups.Groups[0].Rules[0].Expr
			if !strings.Contains(expr, want) {
				t.Errorf("latency %s: recording rule lacks %s:\n%s", latency, want, expr)
			}
		}
	})
}

func keysOf(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func sortedStrings(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}
