// The SDK marks its classic dashboard model deprecated in favour of dashboardv2, the
// schema of Grafana 12's dashboard API. The chart ships a ConfigMap that Grafana's
// sidecar or file provisioning loads, and Grafana 10 and 11 read only the classic model.
//lint:file-ignore SA1019 the classic model is what provisioning reads; see above.

package dashboard

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	gstat "github.com/grafana/grafana-foundation-sdk/go/stat"
	gtimeseries "github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// UID is the dashboard's fixed uid: links and provisioning rely on it.
const UID = "trainyard-stages"

// sel selects the series of one Trainyard installation.
const sel = `namespace="$namespace", job="$job"`

// ds is the data source of every panel and query: the ${datasource} variable.
var ds = common.DataSourceRef{Type: ptr("prometheus"), Uid: ptr("${datasource}")}

// Step is one threshold; a nil Value is the base step.
type Step = dashboard.Threshold

// leader is the leader election gauge of the installation. The controller
// will export it (see docs/metrics.md); until it does, queries that use
// leaderOnly fall back to every replica.
const leader = `leader_election_master_status{` + sel + `}`

// leaderOnly keeps the series of expr that come from the replica holding the
// Lease. Followers fill their stage queues from the informers but never drain
// them, so their queue depth and add counts must not be summed with the
// leader's. When no replica exports the leader gauge (leader election off, or
// an older binary), every series is kept.
func leaderOnly(expr string) string {
	return fmt.Sprintf("(%s and on (instance) (%s == 1)) or (%s unless on () count(%s))", expr, leader, expr, leader)
}

// rate is rate() over Grafana's scrape-aware interval.
func rate(selector string) string {
	return fmt.Sprintf("rate(%s[$__rate_interval])", selector)
}

// quantile is the q-quantile of histogram metric (without _bucket) by labels.
func quantile(q, metric, matchers, by string) string {
	group := "le"
	if by != "" {
		group = by + ", le"
	}
	return fmt.Sprintf("histogram_quantile(%s, sum by (%s) (%s))", q, group, rate(metric+"_bucket{"+matchers+"}"))
}

// sloGood matches the bucket of the SLO latency; see the PrometheusRule for
// why the regular expression.
const sloGood = `le=~"${slo_latency}(\\.0)?"`

// sli is the share of JobSets created within the SLO latency over window.
func sli(window string) string {
	return fmt.Sprintf("sum(increase(trainyard_jobset_creation_latency_seconds_bucket{%s, %s}[%s]))\n/\nsum(increase(trainyard_jobset_creation_latency_seconds_count{%s}[%s]))",
		sel, sloGood, window, sel, window)
}

// burn is the error budget burn rate over window: 1 spends the budget in
// exactly the SLO period.
func burn(window string) string {
	return fmt.Sprintf("(1 - (\n%s\n)) / (1 - $slo_objective)", sli(window))
}

// query is one PromQL query of a panel: a range query for time series, or an
// instant one (stat panels).
type query struct {
	expr, legend string
	instant      bool
}

func target(expr, legend string) query  { return query{expr: expr, legend: legend} }
func instant(expr, legend string) query { return query{expr: expr, legend: legend, instant: true} }

// targets returns qs as Prometheus data queries with refIds A, B, ...
func targets(qs []query) []cog.Builder[variants.Dataquery] {
	out := make([]cog.Builder[variants.Dataquery], 0, len(qs))
	for i, q := range qs {
		b := prometheus.NewDataqueryBuilder().Datasource(ds).RefId(string(rune('A' + i))).Expr(q.expr).LegendFormat(q.legend)
		if q.instant {
			b.Instant()
		} else {
			b.Range()
		}
		out = append(out, b)
	}
	return out
}

func ptr[T any](v T) *T { return &v }

// timeseries is a line chart of queries in unit (a Grafana unit id: s, ops,
// reqps, bytes, percentunit, none).
func timeseries(title, description, unit string, qs ...query) *gtimeseries.PanelBuilder {
	return gtimeseries.NewPanelBuilder().
		Title(title).Description(description).Datasource(ds).Targets(targets(qs)).
		Unit(unit).Min(0).AxisSoftMin(0).
		DrawStyle(common.GraphDrawStyleLine).LineWidth(1).FillOpacity(10).
		ShowPoints(common.VisibilityModeNever).SpanNulls(common.BoolOrFloat64{Bool: ptr(false)}).
		GradientMode(common.GraphGradientModeNone).LineInterpolation(common.LineInterpolationLinear).
		ColorScheme(dashboard.NewFieldColorBuilder().Mode(dashboard.FieldColorModeIdPaletteClassic)).
		Legend(common.NewVizLegendOptionsBuilder().DisplayMode(common.LegendDisplayModeTable).
			Placement(common.LegendPlacementBottom).ShowLegend(true).Calcs([]string{"mean", "max", "lastNotNull"})).
		Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeMulti).Sort(common.SortOrderDescending))
}

// stacked turns a timeseries into a stacked area chart.
func stacked(p *gtimeseries.PanelBuilder) *gtimeseries.PanelBuilder {
	return p.Stacking(common.NewStackingConfigBuilder().Mode(common.StackingModeNormal).Group("A")).FillOpacity(40)
}

// dashed draws the series whose legend matches regex as dashed lines: the
// limits (workers, thresholds) next to the measured values.
func dashed(p *gtimeseries.PanelBuilder, regex string) *gtimeseries.PanelBuilder {
	return p.OverrideByRegexp(regex, []dashboard.DynamicConfigValue{
		{Id: "custom.lineStyle", Value: map[string]any{"fill": "dash", "dash": []int{10, 10}}},
		{Id: "custom.fillOpacity", Value: 0},
	})
}

// thresholdLines draws steps as horizontal lines on a timeseries.
func thresholdLines(p *gtimeseries.PanelBuilder, steps ...Step) *gtimeseries.PanelBuilder {
	return p.Thresholds(dashboard.NewThresholdsConfigBuilder().Mode(dashboard.ThresholdsModeAbsolute).Steps(steps)).
		ThresholdsStyle(common.NewGraphThresholdsStyleConfigBuilder().Mode(common.GraphThresholdsStyleModeLine))
}

// stat is a single-value panel. textMode "name" shows the series name
// (legend) instead of the value, for "which pod leads" style panels.
func stat(title, description, unit string, textMode common.BigValueTextMode, steps []Step, qs ...query) *gstat.PanelBuilder {
	if steps == nil {
		steps = []Step{{Color: "text"}}
	}
	return gstat.NewPanelBuilder().
		Title(title).Description(description).Datasource(ds).Targets(targets(qs)).
		Unit(unit).NoValue("none").
		Thresholds(dashboard.NewThresholdsConfigBuilder().Mode(dashboard.ThresholdsModeAbsolute).Steps(steps)).
		ColorScheme(dashboard.NewFieldColorBuilder().Mode(dashboard.FieldColorModeIdThresholds)).
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"}).Fields("").Values(false)).
		TextMode(textMode).ColorMode(common.BigValueColorModeValue).GraphMode(common.BigValueGraphModeNone).
		JustifyMode(common.BigValueJustifyModeAuto).Orientation(common.VizOrientationAuto)
}

const (
	textValue = common.BigValueTextModeValue
	textName  = common.BigValueTextModeName
)

func row(title string) *dashboard.RowBuilder {
	return dashboard.NewRowBuilder(title).Collapsed(false)
}

// layout assigns ids and grid positions: panels fill rows of 24 columns left
// to right; a row panel starts a new line. It places every panel itself
// rather than leaving it to the SDK's DashboardBuilder, which positions only
// panels without a position and wraps after a line is full, not before a
// panel that does not fit.
type layout struct {
	dash   *dashboard.DashboardBuilder
	errs   []error
	x, y   uint32
	height uint32
	nextID uint32
}

// placed is a built panel, positioned by layout.
type placed dashboard.Panel

func (p placed) Build() (dashboard.Panel, error) { return dashboard.Panel(p), nil }

func (l *layout) add(w, h uint32, b cog.Builder[dashboard.Panel]) {
	if l.x+w > 24 {
		l.newline()
	}
	p, err := b.Build()
	if err != nil {
		l.errs = append(l.errs, err)
		return
	}
	l.nextID++
	p.Id = ptr(l.nextID)
	p.GridPos = &dashboard.GridPos{H: h, W: w, X: l.x, Y: l.y}
	l.dash.WithPanel(placed(p))
	l.x += w
	l.height = max(l.height, h)
}

func (l *layout) newline() {
	l.y += l.height
	l.x, l.height = 0, 0
}

func (l *layout) row(r *dashboard.RowBuilder) {
	if l.x > 0 {
		l.newline()
	}
	l.nextID++
	l.dash.WithRow(r.Id(l.nextID).GridPos(dashboard.GridPos{H: 1, W: 24, X: 0, Y: l.y}))
	l.height = 1
	l.newline()
}

// Build returns the dashboard, built with Grafana's Foundation SDK so that its
// JSON is Grafana's dashboard model (schema version 42: Grafana 12 reads it,
// and provisions it from a file or a ConfigMap as it is). Errors: a panel or
// variable the SDK refuses (a bug here).
func Build() (dashboard.Dashboard, error) {
	l := layout{dash: dashboard.NewDashboardBuilder("Trainyard")}
	l.overviewRow()
	l.pipelineRow()
	l.perStageRow()
	l.admissionRow()
	l.progressRow()
	l.optimizationRow()
	l.apiClientRow()
	l.certificatesRow()
	l.processRow()
	if err := errors.Join(l.errs...); err != nil {
		return dashboard.Dashboard{}, err
	}

	l.dash.Uid(UID).
		Description("Trainyard TrainJob controller: per-stage queues and workers, end-to-end JobSet creation latency and SLO, TrainJobs by phase and runtime, admission webhooks, training progress server, Kubernetes API client, process. Generated by hack/charttest/cmd/gendashboard; metrics are described in docs/metrics.md.").
		Tags([]string{"trainyard", "kubeflow", "controller"}).
		Editable().
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		Refresh("30s").
		Time("now-6h", "now").
		Timezone("browser").
		Version(1).
		Annotation(dashboard.NewAnnotationQueryBuilder().
			BuiltIn(1).Datasource(common.DataSourceRef{Type: ptr("grafana"), Uid: ptr("-- Grafana --")}).
			Enable(true).Hide(true).IconColor("rgba(0, 211, 255, 1)").Name("Annotations & Alerts").Type("dashboard")).
		Link(dashboard.NewDashboardLinkBuilder("Metrics catalogue").Type(dashboard.DashboardLinkTypeLink).TargetBlank(true).Icon("doc").
			Url("https://github.com/trainyard/trainyard/blob/main/docs/metrics.md")).
		Link(dashboard.NewDashboardLinkBuilder("Runbooks").Type(dashboard.DashboardLinkTypeLink).TargetBlank(true).Icon("doc").
			Url("https://github.com/trainyard/trainyard/blob/main/docs/runbooks.md")).
		Variables(variables())
	return l.dash.Build()
}

// overviewRow adds the "Overview" row: replicas, leader, versions, the JobSet
// creation SLI and error budget, its latency and burn rate, TrainJobs by phase.
func (l *layout) overviewRow() {
	green, amber, red := "green", "orange", "red"

	l.row(row("Overview"))
	l.add(4, 4, stat("Replicas up", "Controller pods Prometheus scrapes successfully.", "none", textValue,
		[]Step{{Color: red}, {Color: green, Value: ptr(1.0)}},
		instant(`sum(up{`+sel+`})`, "")))
	l.add(5, 4, stat("Leader", "The pod holding the leader election Lease. Shows \"none\" while no replica holds it, or when the binary does not export leader_election_master_status: then the pod with a non-zero rate in \"Syncs by pod\" leads.", "none", textName, nil,
		instant(`max by (pod) (`+leader+`) == 1`, "{{pod}}")))
	l.add(5, 4, stat("Version", "Controller versions running (trainyard_build_info); two during a rollout.", "none", textName, nil,
		instant(`count by (version) (trainyard_build_info{`+sel+`})`, "{{version}}")))
	l.add(5, 4, stat("JobSets created within SLO latency", "Share of TrainJobs, over the selected time range, whose JobSet was created within $slo_latency s of the TrainJob (the SLI).", "percentunit", textValue,
		[]Step{{Color: red}, {Color: amber, Value: ptr(0.95)}, {Color: green, Value: ptr(0.99)}},
		instant(sli("$__range"), "")))
	l.add(5, 4, stat("Error budget left", "Share of the error budget of the $slo_objective objective left over the selected time range; negative means the SLO is missed over this range.", "percentunit", textValue,
		[]Step{{Color: red}, {Color: amber, Value: ptr(0.0)}, {Color: green, Value: ptr(0.5)}},
		instant("1 - (\n"+burn("$__range")+"\n)", "")))

	l.add(8, 8, timeseries("JobSet creation latency", "Time from a TrainJob's creation to its JobSet's creation, observed once per TrainJob (the end-to-end latency users see before pods start).", "s",
		target(quantile("0.5", "trainyard_jobset_creation_latency_seconds", sel, ""), "p50"),
		target(quantile("0.9", "trainyard_jobset_creation_latency_seconds", sel, ""), "p90"),
		target(quantile("0.99", "trainyard_jobset_creation_latency_seconds", sel, ""), "p99")))
	l.add(8, 8, thresholdLines(timeseries("JobSet creation SLO burn rate", "How fast the error budget burns: 1 spends it in exactly 30 days. The PrometheusRule pages at 14.4 over 1 h (orange line) and at 6 over 6 h (red line).", "none",
		target(burn("1h"), "1h window"),
		target(burn("6h"), "6h window")),
		Step{Color: "green"}, Step{Color: "red", Value: ptr(6.0)}, Step{Color: "orange", Value: ptr(14.4)}))
	l.add(8, 8, stacked(timeseries("TrainJobs by phase", "TrainJobs in the controller's cache by phase. Every replica caches them; max avoids counting them once per replica.", "none",
		target(`max by (phase) (trainyard_trainjobs{`+sel+`})`, "{{phase}}"))))
	byRuntime := func(phases string) string {
		return `max by (runtime_kind, runtime, phase) (trainyard_trainjobs_by_runtime{` + sel + `, phase=~"` + phases + `"}) > 0`
	}
	l.add(12, 8, stacked(timeseries("Active TrainJobs by runtime", "Pending, running and suspended TrainJobs by the runtime they reference (kind and name; a TrainingRuntime's copies in several namespaces add up). <other> is the TrainJobs of a runtime that does not exist, of an unsupported kind, or past the 50 runtimes that get series of their own (docs/metrics.md).", "none",
		target(byRuntime("Pending|Running|Suspended"), "{{runtime}} ({{runtime_kind}}) {{phase}}"))))
	l.add(12, 8, stacked(timeseries("Failed and suspended TrainJobs by runtime", "Failed and suspended TrainJobs by runtime: a runtime whose TrainJobs fail, or stay suspended (by Kueue, say), stands out here.", "none",
		target(byRuntime("Failed|Suspended"), "{{runtime}} ({{runtime_kind}}) {{phase}}"))))
}

// pipelineRow adds the "Pipeline stages" row: every stage's queue, syncs, errors,
// retries and workers, the keys in flight, lagging JobSets, stuck workers and refused
// writes. Queue series are the leader's only (leaderOnly).
func (l *layout) pipelineRow() {
	stageSel := sel + `, stage=~"$stage"`
	queueSel := sel + `, name=~"$stage"`
	l.row(row("Pipeline stages"))
	l.add(8, 8, timeseries("Queue depth", "TrainJob keys waiting in each stage queue (leader only).", "none",
		target(`sum by (name) (`+leaderOnly(`workqueue_depth{`+queueSel+`}`)+`)`, "{{name}}")))
	l.add(8, 8, timeseries("Add rate", "Keys added per second to each stage queue (leader only); adds of a key already queued are coalesced.", "ops",
		target(`sum by (name) (`+leaderOnly(rate(`workqueue_adds_total{`+queueSel+`}`))+`)`, "{{name}}")))
	l.add(8, 8, stacked(timeseries("Syncs by result", "Stage Sync calls per second by result: continue hands the TrainJob to the next stage; wait_for_event parks it until an informer event; retry and requeue_after come back later.", "ops",
		target(`sum by (stage, result) (`+rate(`trainyard_stage_syncs_total{`+stageSel+`}`)+`)`, "{{stage}} {{result}}"))))
	l.add(12, 8, timeseries("Queue wait p50 / p99", "Time keys wait in a stage queue before a worker takes them. Rising p99 with busy workers means the stage needs more workers.", "s",
		target(quantile("0.5", "workqueue_queue_duration_seconds", queueSel, "name"), "p50 {{name}}"),
		target(quantile("0.99", "workqueue_queue_duration_seconds", queueSel, "name"), "p99 {{name}}")))
	l.add(12, 8, timeseries("Processing time p50 / p99", "Time spent in one stage Sync call, API calls included, over all results. Per-result detail is in the per-stage rows below.", "s",
		target(quantile("0.5", "trainyard_stage_duration_seconds", stageSel, "stage"), "p50 {{stage}}"),
		target(quantile("0.99", "trainyard_stage_duration_seconds", stageSel, "stage"), "p99 {{stage}}")))
	l.add(8, 8, timeseries("Errors by reason", "Failed syncs per second by stage and reason. conflict and not_found are usually transient; forbidden means missing RBAC; throttled means API priority and fairness pushes back.", "ops",
		target(`sum by (stage, reason) (`+rate(`trainyard_stage_errors_total{`+stageSel+`}`)+`) > 0`, "{{stage}} {{reason}}")))
	l.add(8, 8, timeseries("Retries and delayed requeues", "Keys requeued with rate-limited backoff after a failed or retry-requesting sync; all delayed adds (backoff retries plus requeue_after results); and panics (each also counted as an error).", "ops",
		target(`sum by (stage) (`+rate(`trainyard_stage_retries_total{`+stageSel+`}`)+`)`, "{{stage}} retries"),
		target(`sum by (name) (`+rate(`workqueue_retries_total{`+queueSel+`}`)+`)`, "{{name}} delayed adds"),
		target(`sum by (stage) (`+rate(`trainyard_stage_panics_total{`+stageSel+`}`)+`) > 0`, "{{stage}} panics")))
	l.add(8, 8, dashed(timeseries("In flight vs workers", "Workers inside Sync (solid) against the configured pool size (dashed). A stage at its pool size while its queue wait grows needs more workers (config.stages.<stage>.workers).", "none",
		target(`sum by (stage) (trainyard_stage_inflight{`+stageSel+`})`, "{{stage}} in flight"),
		target(`max by (stage) (trainyard_stage_workers{`+stageSel+`})`, "{{stage}} workers")), "workers$"))
	l.add(12, 8, dashed(timeseries("TrainJobs past the first stage", "TrainJob keys between the first stage and the end of the pipeline, each with a built plan in memory, against the bound (dashed). At the bound, new TrainJobs wait in the resolve_runtime queue: a burst costs queue time, not memory.", "none",
		target(`max(`+leaderOnly(`trainyard_pipeline_keys_in_flight{`+sel+`}`)+`)`, "in flight"),
		target(`max(trainyard_pipeline_max_keys_in_flight{`+sel+`})`, "bound")), "^bound$"))
	l.add(12, 8, timeseries("JobSets lagging their TrainJob", "TrainJobs whose JobSet has lagged their spec (built from an older generation while it could be updated) for longer than config.consistency.lagThreshold (alert TrainyardJobSetLagging), and TrainJobs the consistency sweep re-queued because the pipeline had lost their update (alert TrainyardLostUpdate; should stay 0).", "none",
		target(`max(`+leaderOnly(`trainyard_trainjobs_jobset_lagging{`+sel+`}`)+`)`, "lagging"),
		target(`sum(increase(trainyard_consistency_sweep_requeues_total{`+sel+`}[$__range]))`, "re-queued by the sweep"),
		target(`sum(increase(trainyard_consistency_sweeps_total{`+sel+`}[$__range]))`, "sweeps")))
	l.add(8, 8, timeseries("Oldest running sync", "Age of the oldest key being processed in each stage. A line that climbs steadily is a blocked worker (alert TrainyardStageWorkerStuck).", "s",
		target(`max by (name) (workqueue_longest_running_processor_seconds{`+queueSel+`})`, "{{name}}")))
	l.add(8, 8, timeseries("Unfinished work growth", "Growth per second of the summed age of keys being processed. Around 0 is healthy; a value near the number of workers means every worker is stuck.", "none",
		target(`sum by (name) (deriv(workqueue_unfinished_work_seconds{`+queueSel+`}[$__rate_interval]))`, "{{name}}")))
	l.add(8, 8, timeseries("Writes refused", "JobSet and side-object writes the API server refused for a reason retrying does not fix, by reason, over the last 15 minutes. A TrainJob refused 5 times in a row carries JobSetReady=False, reason Write<reason>, and is tried again every 10 minutes, so a steady line is TrainJobs held by a refusal (alert TrainyardWritesRefused).", "none",
		target(`sum by (reason) (increase(trainyard_writes_refused_total{`+sel+`}[15m])) > 0`, "{{reason}}")))
}

// perStageRow adds the "Stage: $stage" row, repeated per selected stage: its
// processing time by result, errors and workers.
func (l *layout) perStageRow() {
	l.row(row("Stage: $stage").Repeat("stage"))
	oneStage := sel + `, stage=~"$stage"`
	l.add(12, 8, timeseries("$stage: processing time by result", "p50 and p99 of Sync time of this stage, split by result: slow errors and slow successes have different causes.", "s",
		target(quantile("0.5", "trainyard_stage_duration_seconds", oneStage, "result"), "p50 {{result}}"),
		target(quantile("0.99", "trainyard_stage_duration_seconds", oneStage, "result"), "p99 {{result}}")))
	l.add(6, 8, stacked(timeseries("$stage: errors by reason", "Failed syncs per second of this stage by reason.", "ops",
		target(`sum by (reason) (`+rate(`trainyard_stage_errors_total{`+oneStage+`}`)+`)`, "{{reason}}"))))
	l.add(6, 8, dashed(timeseries("$stage: in flight vs workers", "Busy workers of this stage against its pool size.", "none",
		target(`sum(trainyard_stage_inflight{`+oneStage+`})`, "in flight"),
		target(`max(trainyard_stage_workers{`+oneStage+`})`, "workers")), "^workers$"))
}

// admissionRow adds the "Admission" row: the webhooks' requests, denials, errors,
// warnings and latency, and the requests each pod answers.
func (l *layout) admissionRow() {
	l.row(row("Admission"))
	admission := func(matchers string) string { return `trainyard_admission_requests_total{` + sel + matchers + `}` }
	l.add(8, 8, stacked(timeseries("Admission requests by result", "AdmissionReviews answered per second, over all replicas, by webhook, kind and result: allowed (warnings included), denied by a rule, error (the webhook could not review the object: another kind, a CRD newer than the controller, a failed cache read). A TrainJob write passes both its mutate and validate webhooks.", "reqps",
		target(`sum by (webhook, kind, result) (`+rate(admission(""))+`)`, "{{webhook}} {{kind}} {{result}}"))))
	l.add(8, 8, timeseries("Denied and error share", "Share of validations a rule denied, by kind, and share of all reviews the webhook answered with an error (alert TrainyardAdmissionErrors). Denials are users' mistakes; errors are the operator's to fix.", "percentunit",
		target(`sum by (kind) (`+rate(admission(`, webhook="validate", result="denied"`))+")\n/\n"+`sum by (kind) (`+rate(admission(`, webhook="validate"`))+`)`, "denied {{kind}}"),
		target(`sum(`+rate(admission(`, result="error"`))+")\n/\n"+`sum(`+rate(admission(""))+`)`, "error")))
	l.add(8, 8, timeseries("Admission warnings", "Warning messages per second the webhooks returned (kubectl prints them), by kind: a TrainJob whose runtime is missing, a patch aimed at a replicatedJob the runtime lacks, a runtime edit running TrainJobs will not see, ...", "ops",
		target(`sum by (kind) (`+rate(`trainyard_admission_warnings_total{`+sel+`}`)+`)`, "{{kind}}")))
	l.add(12, 8, thresholdLines(timeseries("Admission latency p50 / p99", "Time from receiving an AdmissionReview to answering it, by webhook and kind; network and TLS excluded. The API server gives up at the webhook's timeoutSeconds and then refuses the write (failurePolicy Fail); the red line is the 5 s of alert TrainyardAdmissionErrors.", "s",
		target(quantile("0.5", "trainyard_admission_duration_seconds", sel, "webhook, kind"), "p50 {{webhook}} {{kind}}"),
		target(quantile("0.99", "trainyard_admission_duration_seconds", sel, "webhook, kind"), "p99 {{webhook}} {{kind}}")),
		Step{Color: "green"}, Step{Color: "red", Value: ptr(5.0)}))
	l.add(8, 8, timeseries("Admission requests refused for the server's bounds", "Requests the admission server answered 429 (Retry-After: 1) or 413 without reviewing them, per second, by reason: too_many_requests (64 reviews being decided, 2,048 requests open, or the 32 MiB budget of request bodies in use), too_large (a body over 7 MiB). The API server retries a 429 until the webhook's timeout; only then does failurePolicy Fail refuse the write. A flood or slow clients, not the API server, fill these bounds.", "reqps",
		target(`sum by (reason) (`+rate(`trainyard_admission_requests_rejected_total{`+sel+`}`)+`)`, "{{reason}}")))
	l.add(12, 8, timeseries("Admission requests by pod", "AdmissionReviews answered per second by each pod. Every replica answers, leader or not: a pod at 0 while the others serve is out of the Service's endpoints.", "reqps",
		target(`sum by (pod) (`+rate(admission(""))+`)`, "{{pod}}")))
}

// progressRow adds the "Training progress" row: the progress server's reports, token
// decisions and latency, and what its write stage does with the reports.
func (l *layout) progressRow() {
	// The progress server and its write stage run on every replica, leader or
	// not: its series are summed over pods, never filtered with leaderOnly.
	l.row(row("Training progress"))
	reports := `trainyard_progress_reports_total{` + sel + `}`
	rejected := `trainyard_progress_reports_rejected_total{` + sel + `}`
	reviews := func(matchers string) string { return `trainyard_progress_token_reviews_total{` + sel + matchers + `}` }
	writes := `trainyard_progress_writes_total{` + sel + `}`
	progressStage := sel + `, stage="progress"`
	progressQueue := sel + `, name="progress"`
	l.add(8, 8, stacked(timeseries("Progress reports by outcome", "Progress reports trainer pods POSTed, per second over all replicas: accepted, or rejected by reason: too_large (body over 64 KiB), too_many_requests (more than 256 reports in flight on a replica: slow TokenReviews), pending_bytes (the reports a replica accepted and has not written yet hold statusServer.maxPendingReportBytes, 32 MiB: many TrainJobs sending large reports faster than the write limits write them), unauthenticated (no token, or one the API server does not authenticate for the TrainJob's audience: expired, wrong audience), forbidden (a token of another TrainJob's pod, or not bound to a pod), not_found (no such TrainJob), invalid (out-of-range values, or a lastUpdatedTime more than 5 minutes ahead), internal (a TokenReview or pod read failed). Alert TrainyardProgressReportFlood fires on 200 reports/s or 5 rejected/s.", "reqps",
		target(`sum(`+rate(reports)+`) - sum(`+rate(rejected)+`)`, "accepted"),
		target(`sum by (reason) (`+rate(rejected)+`) > 0`, "rejected {{reason}}"))))
	l.add(8, 8, timeseries("Progress reports by pod", "Reports per second each pod received. Every replica serves the progress server; a trainer keeps its connection between reports, so one client hammering the endpoint shows on one pod.", "reqps",
		target(`sum by (pod) (`+rate(reports)+`)`, "{{pod}}")))
	l.add(8, 8, timeseries("Report latency p50 / p99", "Time from receiving a report to answering it, TLS excluded. A report whose token decision is cached is answered from memory in microseconds; one that is not costs a TokenReview and a pod read. The status write is not included: it happens later, in the progress stage.", "s",
		target(quantile("0.5", "trainyard_progress_report_duration_seconds", sel, ""), "p50"),
		target(quantile("0.99", "trainyard_progress_report_duration_seconds", sel, ""), "p99")))
	l.add(8, 8, dashed(timeseries("Token decisions by result", "Authorization decisions on report tokens per second, by result (allowed, unauthenticated, forbidden, not_found, error), and the TokenReviews actually sent (dashed): a decision not answered by the review cache costs a TokenReview and a pod read. Allows are cached for 1 minute, denials for 10 s, errors never.", "ops",
		target(`sum by (result) (`+rate(reviews(""))+`)`, "{{result}}"),
		target(`sum(`+rate(reviews(`, cached="false"`))+`)`, "TokenReviews sent")), "^TokenReviews sent$"))
	l.add(8, 8, timeseries("Token review cache hit ratio", "Share of token decisions the review cache answered without a TokenReview. Near 1 while the same pods report steadily; it drops when many new trainer pods start, tokens rotate (about hourly), or a client sends a new token with every request.", "percentunit",
		target(`sum(`+rate(reviews(`, cached="true"`))+")\n/\n"+`sum(`+rate(reviews(""))+`)`, "cache hits")))
	l.add(8, 8, timeseries("Write economy: coalesced vs written", "What becomes of accepted reports, per second: coalesced (replaced by a newer report of the same TrainJob before its write), dropped (unchanged; stale: not newer than the stored one, e.g. another replica wrote a later report; gone: the TrainJob was deleted), or written to status.trainerStatus, by result. Each replica writes a TrainJob at most once per statusServer.writePeriod (10 s), so writes/s stay at or below the TrainJobs reporting ÷ writePeriod (times the replicas their reports reach), and at most statusServer.qps (50/s) per replica and namespaceQPS (10/s) per namespace. Alert TrainyardProgressWritesFailing fires when more than 5% of writes fail.", "ops",
		target(`sum(`+rate(`trainyard_progress_reports_coalesced_total{`+sel+`}`)+`)`, "coalesced"),
		target(`sum by (reason) (`+rate(`trainyard_progress_reports_dropped_total{`+sel+`}`)+`) > 0`, "dropped {{reason}}"),
		target(`sum by (result) (`+rate(writes)+`)`, "written {{result}}")))
	l.add(8, 8, dashed(timeseries("Progress stage queue depth and in flight", "TrainJob keys waiting in each pod's progress stage queue, and its workers inside Sync (dashed). A key waiting out writePeriod or a write rate limit is not queued (it is re-added when due), so a depth that stays up means the 4 workers per replica cannot keep up with the writes that are due.", "none",
		target(`sum by (pod) (workqueue_depth{`+progressQueue+`})`, "{{pod}} queued"),
		target(`sum by (pod) (trainyard_stage_inflight{`+progressStage+`})`, "{{pod}} in flight")), "in flight$"))
	l.add(8, 8, timeseries("Progress stage sync and queue wait p50 / p99", "Time in one progress stage Sync (the status.trainerStatus apply, when one is due) and time keys waited in the queue before a worker took them, over all replicas.", "s",
		target(quantile("0.5", "trainyard_stage_duration_seconds", progressStage, ""), "sync p50"),
		target(quantile("0.99", "trainyard_stage_duration_seconds", progressStage, ""), "sync p99"),
		target(quantile("0.99", "workqueue_queue_duration_seconds", progressQueue, ""), "queue wait p99")))
	l.add(8, 8, dashed(timeseries("Progress stage syncs by result", "Progress stage syncs per second by result: wait_for_event (written, or dropped), requeue_after (the write waits for writePeriod or a rate limit: statusServer.qps, namespaceQPS), retry (a 409 conflict with another writer, or an error); and the errors by reason (dashed): forbidden (RBAC on trainjobs/status), throttled (API priority and fairness), timeout, internal.", "ops",
		target(`sum by (result) (`+rate(`trainyard_stage_syncs_total{`+progressStage+`}`)+`)`, "{{result}}"),
		target(`sum by (reason) (`+rate(`trainyard_stage_errors_total{`+progressStage+`}`)+`) > 0`, "error {{reason}}")), "^error "))
	authReviews := `trainyard_auth_token_reviews_total{` + sel + `}`
	l.add(8, 8, dashed(timeseries("TokenReviews of unknown tokens: sent and refused", "TokenReviews per second that the progress endpoint and /metrics wanted to send for tokens in neither of their caches, over all replicas, by endpoint: sent to the API server, and refused by the endpoint's limiter (dashed; answered 429 with Retry-After, no review): source_limited (one client address over its budget: progress 20 at once then 5/s, metrics 5 then 1/s), concurrency_limited (progress 64, metrics 8 reviews in flight). Refusals are a flood of random or stale bearer tokens (the controller logs \"Refusing the TokenReviews of unknown bearer tokens\" with the last source), or many trainers behind one address (a proxy that hides client addresses).", "ops",
		target(`sum by (endpoint, result) (`+rate(authReviews)+`)`, "{{endpoint}} {{result}}")), "limited$"))
	l.add(8, 8, dashed(timeseries("Pending progress report bytes", "Bytes the progress reports each pod accepted and has not written yet hold in memory (as decoded: ~42 KiB for the largest report, ~1 KiB for a typical one), against the bound (dashed, statusServer.maxPendingReportBytes). At the bound a report that does not fit is answered 429 (rejected pending_bytes) and its trainer's next report tries again; the bytes fall as the progress stage writes.", "bytes",
		target(`sum by (pod) (trainyard_progress_pending_report_bytes{`+sel+`})`, "{{pod}}"),
		target(`max(trainyard_progress_max_pending_report_bytes{`+sel+`})`, "bound")), "^bound$"))
}

// optimizationRow adds the "OptimizationJobs" row: the OptimizationJob stage's syncs,
// queue and latency (it runs on the leader, in a pipeline of its own).
func (l *layout) optimizationRow() {
	l.row(row("OptimizationJobs"))
	stage := sel + `, stage="optimization"`
	queue := sel + `, name="optimization"`
	l.add(8, 8, dashed(timeseries("OptimizationJob syncs by result", "OptimizationJob stage syncs per second by result: wait_for_event (trials created as parallelTrials allows, status written; the next trial event brings it back), terminal (a spec the search cannot run: Failed, InvalidSpec), retry (a trial create or the status write failed); and the errors by reason (dashed).", "ops",
		target(`sum by (result) (`+rate(`trainyard_stage_syncs_total{`+stage+`}`)+`)`, "{{result}}"),
		target(`sum by (reason) (`+rate(`trainyard_stage_errors_total{`+stage+`}`)+`) > 0`, "error {{reason}}")), "^error "))
	l.add(8, 8, timeseries("OptimizationJob queue depth", "OptimizationJob keys waiting for a worker on the leader. Every event of a trial TrainJob brings its OptimizationJob back, so a search with many running trials syncs often; a depth that stays up means the 2 workers cannot keep up.", "none",
		target(`sum(workqueue_depth{`+queue+`})`, "queued")))
	l.add(8, 8, timeseries("OptimizationJob sync and queue wait p50 / p99", "Time in one OptimizationJob Sync (reading its trials from the cache, creating the next ones, writing status) and time keys waited in the queue.", "s",
		target(quantile("0.5", "trainyard_stage_duration_seconds", stage, ""), "sync p50"),
		target(quantile("0.99", "trainyard_stage_duration_seconds", stage, ""), "sync p99"),
		target(quantile("0.99", "workqueue_queue_duration_seconds", queue, ""), "queue wait p99")))
}

// apiClientRow adds the "Kubernetes API client" row: requests by code and method,
// failures, latency and client-side throttling.
func (l *layout) apiClientRow() {
	l.row(row("Kubernetes API client"))
	l.add(8, 8, stacked(timeseries("Requests by status code", "API requests per second by HTTP status; <error> is a request that got no response.", "reqps",
		target(`sum by (code) (`+rate(`rest_client_requests_total{`+sel+`}`)+`)`, "{{code}}"))))
	l.add(8, 8, stacked(timeseries("Requests by method", "API requests per second by HTTP method: GET list/watch, PATCH server-side apply and status, DELETE.", "reqps",
		target(`sum by (method) (`+rate(`rest_client_requests_total{`+sel+`}`)+`)`, "{{method}}"))))
	l.add(8, 8, timeseries("Failed request share", "Share of API requests answered 429 (priority and fairness), 5xx, or not at all.", "percentunit",
		target(`sum(`+rate(`rest_client_requests_total{`+sel+`, code=~"429|5..|<error>"}`)+`)`+"\n/\n"+`sum(`+rate(`rest_client_requests_total{`+sel+`}`)+`)`, "failed")))
	l.add(12, 8, stacked(timeseries("API writes by verb and kind", "Writes the controller sends per second, retries included, by verb (create, update, patch, delete) and kind of the object (a subresource counts as its object: TrainJob is status and finalizer writes), over all replicas. A rate that stays up while no TrainJob changes is writes that do not converge (see docs/metrics.md).", "reqps",
		target(`sum by (verb, kind) (`+rate(`trainyard_api_writes_total{`+sel+`}`)+`) > 0`, "{{verb}} {{kind}}"))))
	l.add(12, 8, timeseries("Request latency p50 / p99", "API request latency by verb, as the controller sees it (network and API server).", "s",
		target(quantile("0.5", "rest_client_request_duration_seconds", sel, "verb"), "p50 {{verb}}"),
		target(quantile("0.99", "rest_client_request_duration_seconds", sel, "verb"), "p99 {{verb}}")))
	l.add(12, 8, timeseries("Client-side throttling p50 / p99", "Time requests waited in the controller's own rate limiter (config.clientConnection.qps/burst) before being sent. Anything above a few ms means the limit, not the API server, slows the pipeline.", "s",
		target(quantile("0.5", "rest_client_rate_limiter_duration_seconds", sel, "verb"), "p50 {{verb}}"),
		target(quantile("0.99", "rest_client_rate_limiter_duration_seconds", sel, "verb"), "p99 {{verb}}")))
}

// certificatesRow adds the "Webhook certificates" row: time to expiry and rotations.
func (l *layout) certificatesRow() {
	l.row(row("Webhook certificates"))
	l.add(12, 8, timeseries("Time to certificate expiry", "Time left before the self-managed serving certificate and CA expire, per pod. Each is renewed at two thirds of its lifetime: a line that reaches the last third without a jump is a rotation that failed (its errors are in the logs).", "s",
		target(`min by (certificate) (trainyard_certificate_expiry_timestamp_seconds{`+sel+`}) - time()`, "{{certificate}}")))
	l.add(12, 8, timeseries("Certificate rotations", "Rotations of the serving certificate and CA over the dashboard's range, over all pods.", "none",
		target(`sum by (certificate) (increase(trainyard_certificate_rotations_total{`+sel+`}[$__range]))`, "{{certificate}}")))
}

// processRow adds the "Process" row: syncs, CPU, memory, goroutines and open files
// by pod.
func (l *layout) processRow() {
	l.row(row("Process"))
	l.add(6, 8, timeseries("Syncs by pod", "Stage syncs per second by pod, the progress stage aside (it runs on every replica): only the leader runs the pipeline, so this shows which pod leads even without the leader gauge.", "ops",
		target(`sum by (pod) (`+rate(`trainyard_stage_syncs_total{`+sel+`, stage!="progress"}`)+`)`, "{{pod}}")))
	l.add(6, 8, timeseries("CPU", "CPU cores used by each controller pod.", "none",
		target(`sum by (pod) (`+rate(`process_cpu_seconds_total{`+sel+`}`)+`)`, "{{pod}}")))
	l.add(6, 8, timeseries("Memory", "Resident memory and Go heap in use by each pod; compare with the container memory limit.", "bytes",
		target(`sum by (pod) (process_resident_memory_bytes{`+sel+`})`, "{{pod}} resident"),
		target(`sum by (pod) (go_memstats_heap_inuse_bytes{`+sel+`})`, "{{pod}} heap in use")))
	l.add(6, 8, timeseries("Goroutines and open files", "Goroutines and open file descriptors by pod: a steady climb is a leak.", "none",
		target(`sum by (pod) (go_goroutines{`+sel+`})`, "{{pod}} goroutines"),
		target(`sum by (pod) (process_open_fds{`+sel+`})`, "{{pod}} open fds")))
}

func variables() []cog.Builder[dashboard.VariableModel] {
	text := func(s string) dashboard.StringOrArrayOfString { return dashboard.StringOrArrayOfString{String: ptr(s)} }
	query := func(name, label, description, q string, multi bool) cog.Builder[dashboard.VariableModel] {
		v := dashboard.NewQueryVariableBuilder(name).Label(label).Description(description).
			Datasource(ds).Definition(q).
			Query(dashboard.StringOrMap{Map: map[string]any{"query": q, "refId": "PrometheusVariableQueryEditor-VariableQuery"}}).
			Refresh(dashboard.VariableRefreshOnTimeRangeChanged).Sort(dashboard.VariableSortAlphabeticalAsc).
			Multi(multi).IncludeAll(multi).Options([]dashboard.VariableOption{})
		if multi {
			all := []string{"All"}
			v.Current(dashboard.VariableOption{Selected: ptr(true), Text: dashboard.StringOrArrayOfString{ArrayOfString: all},
				Value: dashboard.StringOrArrayOfString{ArrayOfString: []string{"$__all"}}})
		}
		return v
	}
	custom := func(name, label, description string, values []string, current string) cog.Builder[dashboard.VariableModel] {
		var options []dashboard.VariableOption
		for _, val := range values {
			options = append(options, dashboard.VariableOption{Selected: ptr(val == current), Text: text(val), Value: text(val)})
		}
		return dashboard.NewCustomVariableBuilder(name).Label(label).Description(description).
			Values(dashboard.StringOrMap{String: ptr(strings.Join(values, ","))}).
			Current(dashboard.VariableOption{Selected: ptr(true), Text: text(current), Value: text(current)}).
			Options(options)
	}
	return []cog.Builder[dashboard.VariableModel]{
		dashboard.NewDatasourceVariableBuilder("datasource").Label("Data source").Type("prometheus").
			Current(dashboard.VariableOption{Selected: ptr(true), Text: text("default"), Value: text("default")}),
		query("namespace", "Namespace", "Namespace of the Trainyard installation.",
			`label_values(trainyard_build_info, namespace)`, false),
		query("job", "Job", "Prometheus job of the installation (the metrics Service's name with a ServiceMonitor).",
			`label_values(trainyard_build_info{namespace="$namespace"}, job)`, false),
		query("stage", "Stage", "Pipeline stages to show.",
			`label_values(trainyard_stage_workers{namespace="$namespace", job="$job"}, stage)`, true),
		custom("slo_latency", "SLO latency (s)", "JobSet creation latency the SLO panels count as good; a bucket bound of trainyard_jobset_creation_latency_seconds.",
			[]string{"5", "10", "15", "30", "60", "120", "300"}, "30"),
		custom("slo_objective", "SLO objective", "Share of TrainJobs that must meet the SLO latency.",
			[]string{"0.9", "0.95", "0.99", "0.995", "0.999"}, "0.99"),
	}
}

// JSON returns the dashboard as indented JSON with a trailing newline.
func JSON() ([]byte, error) {
	d, err := Build()
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(d); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
