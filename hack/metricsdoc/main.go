// Command metricsdoc writes docs/metrics.md, the catalogue of every metric the
// controller exports, from the code that defines them: it builds the metrics
// on a fresh registry exactly as the binary does (metrics.New and
// metrics.RegisterClientMetrics), creates every labelled child, gathers the
// families for type, labels, label values and buckets, and takes each
// metric's meaning from its doc comment in pkg/metrics/names.go.
//
// Usage (from the repository root):
//
//	go run ./hack/metricsdoc            # rewrite docs/metrics.md
//	go run ./hack/metricsdoc -out FILE  # write elsewhere (hack/verify-metricsdoc.sh)
//
// It fails when a name declared in names.go is not exported, or an exported
// family is not declared there, so the catalogue cannot drift from the code.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/trainyard/trainyard/pkg/metrics"
	optimization "github.com/trainyard/trainyard/pkg/optimization/controller"
	"github.com/trainyard/trainyard/pkg/progress"
	"github.com/trainyard/trainyard/pkg/stages"
)

// stageNames are the pipeline's stages in order, then the progress stage (its
// own single-stage pipeline on every replica) and the OptimizationJob stage (its
// own on the leader): the values of the "stage" and "name" labels.
var stageNames = append(stages.Names(), progress.Name, optimization.Name)

// enumLabels are the labels whose values are a closed set that the catalogue
// lists. The values come from the gathered children, so they follow the code.
// Other labels (code, method, verb, host, version, ...) take values the
// process learns at run time and are described, not enumerated.
var enumLabels = map[string]bool{
	metrics.LabelName: true, metrics.LabelStage: true, metrics.LabelResult: true,
	metrics.LabelReason: true, metrics.LabelRuntimeKind: true, metrics.LabelPhase: true,
	metrics.LabelCertificate: true, metrics.LabelWebhook: true, metrics.LabelKind: true,
	metrics.LabelOperation: true, metrics.LabelCached: true, metrics.LabelEndpoint: true,
}

// isEnum reports whether mf's label l is a closed set: an enumLabels one, or the
// verb of trainyard_api_writes_total (Kubernetes verbs), which on the REST client
// metrics is any HTTP method.
func isEnum(mf *dto.MetricFamily, l string) bool {
	return enumLabels[l] || (l == metrics.LabelVerb && mf.GetName() == metrics.APIWritesTotal)
}

// runtimeLabels describes the labels whose values are not enumerated.
var runtimeLabels = map[string]string{
	"code":                 "HTTP status code, or `<error>` when no response arrived",
	"method":               "HTTP method (GET, PATCH, ...)",
	"verb":                 "HTTP method of the request",
	"host":                 "API server host:port",
	metrics.LabelVersion:   "the binary's version (`git describe`)",
	metrics.LabelGitCommit: "the commit it was built from",
	metrics.LabelGoVersion: "the Go toolchain that built it",
	metrics.LabelRuntime: fmt.Sprintf("the name of a TrainingRuntime or ClusterTrainingRuntime in the informer cache (the first %d by kind and name; "+
		"a runtime's series go when it is deleted), or `%s`", metrics.MaxRuntimeSeries, metrics.RuntimeOther),
}

func main() {
	out := flag.String("out", "docs/metrics.md", "file to write")
	names := flag.String("names", "pkg/metrics/names.go", "names.go to read the metric docs from")
	flag.Parse()
	if err := run(*out, *names); err != nil {
		fmt.Fprintln(os.Stderr, "metricsdoc:", err)
		os.Exit(1)
	}
}

func run(out, namesFile string) error {
	decls, err := readNames(namesFile)
	if err != nil {
		return err
	}
	families, err := gather()
	if err != nil {
		return err
	}
	doc, err := render(decls, families)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	return os.WriteFile(out, doc, 0o644)
}

// decl is one metric name constant of names.go.
type decl struct {
	name string // the metric name
	doc  string // its doc comment, one paragraph
}

// readNames returns the string constants of namesFile whose values look like
// metric names, in declaration order, with their doc comments.
func readNames(namesFile string) ([]decl, error) {
	f, err := parser.ParseFile(token.NewFileSet(), namesFile, nil, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	var decls []decl
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			if vs.Doc == nil || len(vs.Values) != 1 {
				continue // label names and values carry no doc block
			}
			lit, ok := vs.Values[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				continue
			}
			value, err := strconv.Unquote(lit.Value)
			if err != nil {
				return nil, err
			}
			decls = append(decls, decl{name: value, doc: meaning(vs.Names[0].Name, vs.Doc.Text())})
		}
	}
	if len(decls) == 0 {
		return nil, fmt.Errorf("%s: no documented metric names found", namesFile)
	}
	return decls, nil
}

// meaning turns the doc comment of constant ident into catalogue prose: one
// paragraph, without the Go identifier ("StageWorkers is a gauge" becomes "A
// gauge") and without the closing "Labels: ..." sentence, which the catalogue
// lists from the registry instead.
func meaning(ident, doc string) string {
	text := strings.Join(strings.Fields(doc), " ")
	if rest, ok := strings.CutPrefix(text, ident+" is "); ok && rest != "" {
		text = strings.ToUpper(rest[:1]) + rest[1:]
	}
	if i := strings.LastIndex(text, " Labels: "); i >= 0 && strings.HasSuffix(text, ".") && !strings.Contains(text[i+1:len(text)-1], ". ") {
		text = text[:i]
	}
	return text
}

// gather builds the metrics as the binary does and returns every family by name.
func gather() (map[string]*dto.MetricFamily, error) {
	reg := prometheus.NewRegistry()
	metrics.Catalogue(reg, stageNames)

	mfs, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	byName := make(map[string]*dto.MetricFamily, len(mfs))
	for _, mf := range mfs {
		byName[mf.GetName()] = mf
	}
	return byName, nil
}

// render returns docs/metrics.md for the metrics declared in names.go (decls, in their
// order) and the families the registry gathered, by name: the preamble, a table of
// every metric with its series count, and a section per metric. It fails when decls
// and families disagree (checkDeclared).
func render(decls []decl, families map[string]*dto.MetricFamily) ([]byte, error) {
	if err := checkDeclared(decls, families); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString(preamble)
	writeTable(&b, decls, families)
	writeSections(&b, decls, families)
	return b.Bytes(), nil
}

// checkDeclared returns an error listing, sorted, every name declared in names.go that
// is not exported and every exported family not declared there; nil when they agree.
func checkDeclared(decls []decl, families map[string]*dto.MetricFamily) error {
	var problems []string
	declared := map[string]bool{}
	for _, d := range decls {
		declared[d.name] = true
		if families[d.name] == nil {
			problems = append(problems, fmt.Sprintf("%s is declared in names.go but not exported", d.name))
		}
	}
	for name := range families {
		if !declared[name] {
			problems = append(problems, fmt.Sprintf("%s is exported but not declared (with a doc comment) in names.go", name))
		}
	}
	if len(problems) > 0 {
		slices.Sort(problems)
		return fmt.Errorf("names.go and the registry disagree:\n  %s", strings.Join(problems, "\n  "))
	}
	return nil
}

// preamble opens docs/metrics.md: where the metrics are served and their conventions.
const preamble = `<!-- Code generated by hack/metricsdoc from pkg/metrics. DO NOT EDIT. -->
<!-- Regenerate with: go run ./hack/metricsdoc ; checked by hack/verify-metricsdoc.sh -->

# Metrics

The controller serves Prometheus metrics in the text and OpenMetrics formats on
` + "`--metrics-bind-address`" + ` (default ` + "`:8080`" + `, path ` + "`/metrics`" + `; the Helm chart's Service port
` + "`https-metrics`" + `), over HTTPS to callers whose bearer token may ` + "`get /metrics`" + ` (` + "`metrics.secureServing`" + ` and
` + "`metrics.auth.enabled`" + `, see [compatibility.md](compatibility.md#metrics-endpoint)). This page lists every metric it defines. It also exports the Go runtime
(` + "`go_*`" + `) and process (` + "`process_*`" + `) collectors of client_golang.

Conventions:

- Trainyard's own metrics start with ` + "`trainyard_`" + `. The work queue and REST client metrics keep
  client-go's standard names (` + "`workqueue_*`" + `, ` + "`rest_client_*`" + `) so stock controller dashboards
  work; the work queue label ` + "`name`" + ` is the stage.
- Every label is a closed set but ` + "`runtime`" + `: no label carries a TrainJob's namespace, name or UID, so the number
  of series does not grow with the number of TrainJobs. ` + "`runtime`" + ` names only runtimes that exist, at most 50 (see below).
- Every stage × result and stage × reason series exists from start-up at zero, so ` + "`rate()`" + ` and
  ratios have data before the first sync.
- Histograms have classic buckets (listed below; upper bounds in seconds) and are also native
  histograms (bucket factor 1.1, at most 100 buckets) for scrapers that negotiate them. When your
  Prometheus ingests native histograms, keep the classic ones too (scrape_classic_histograms) for the
  chart's alerts and dashboard, which use ` + "`_bucket`" + ` series.
- With leader election, followers run informers but no pipeline: they export the stage gauges
  (` + "`trainyard_stage_workers`" + `, ` + "`trainyard_trainjobs`" + `) too, so aggregate those with ` + "`max`" + `, and
  counters and histograms with ` + "`sum`" + `. The exception is the ` + "`progress`" + ` stage, which writes the
  progress trainer pods report to whichever replica they reach, and runs on every replica.

`

// writeTable writes the table of every metric of decls (name, type, labels, series per
// replica) and the total of the fixed series.
func writeTable(b *bytes.Buffer, decls []decl, families map[string]*dto.MetricFamily) {
	b.WriteString("| Metric | Type | Labels | Series per replica |\n| --- | --- | --- | --- |\n")
	total := 0
	for _, d := range decls {
		mf := families[d.name]
		n, fixed := series(mf)
		count := strconv.Itoa(n)
		if fixed {
			total += n
		} else {
			count = fmt.Sprintf("%d per %s combination", n, strings.Join(codeList(runtimeLabelNames(mf)), " × "))
		}
		fmt.Fprintf(b, "| [`%s`](#%s) | %s | %s | %s |\n", d.name, d.name, typeName(mf), strings.Join(codeList(labelNames(mf)), ", "), count)
	}
	fmt.Fprintf(b, "\nFixed series per replica: %d, plus the REST client series, which grow with the status codes and verbs seen (typically under 200), and the `%s` series, 5 per runtime in the cache (at most %d) plus %d.\n", total, metrics.TrainJobsByRuntime, 5*metrics.MaxRuntimeSeries, 15)
}

// writeSections writes a section per metric of decls: its doc comment, type, labels
// (enumLabels' values listed, runtimeLabels' described), buckets (upper bounds in
// seconds) and help.
func writeSections(b *bytes.Buffer, decls []decl, families map[string]*dto.MetricFamily) {
	for _, d := range decls {
		mf := families[d.name]
		fmt.Fprintf(b, "\n## %s\n\n", d.name)
		fmt.Fprintf(b, "%s\n\n", d.doc)
		fmt.Fprintf(b, "- Type: %s\n", typeName(mf))
		for _, l := range labelNames(mf) {
			if isEnum(mf, l) {
				fmt.Fprintf(b, "- Label `%s`: %s\n", l, strings.Join(codeList(labelValues(mf, l)), ", "))
			} else {
				fmt.Fprintf(b, "- Label `%s`: %s\n", l, runtimeLabels[l])
			}
		}
		if bounds := buckets(mf); len(bounds) > 0 {
			fmt.Fprintf(b, "- Buckets: %s\n", strings.Join(bounds, ", "))
		}
		fmt.Fprintf(b, "- Help: %s\n", mf.GetHelp())
	}
}

func typeName(mf *dto.MetricFamily) string {
	return strings.ToLower(mf.GetType().String())
}

// labelNames returns mf's label names: the stage first, then the others in
// alphabetical order (the order Prometheus gathers them in).
func labelNames(mf *dto.MetricFamily) []string {
	var names []string
	for _, lp := range mf.GetMetric()[0].GetLabel() {
		names = append(names, lp.GetName())
	}
	slices.SortStableFunc(names, func(a, b string) int {
		return stageFirst(a) - stageFirst(b)
	})
	return names
}

func stageFirst(label string) int {
	if label == metrics.LabelStage || label == metrics.LabelName {
		return 0
	}
	return 1
}

// labelValues returns the values label takes across mf's children, in the
// order the code creates them.
// series returns the number of series mf exports per child set as gathered
// here (a histogram child is its buckets plus +Inf, _sum and _count), and
// whether that number is fixed: false when a label takes run-time values.
func series(mf *dto.MetricFamily) (int, bool) {
	per := 1
	if h := mf.GetMetric()[0].GetHistogram(); h != nil {
		per = len(h.GetBucket()) + 3
	}
	if names := runtimeLabelNames(mf); len(names) > 0 && mf.GetName() != metrics.BuildInfo {
		// Per combination of the run-time labels (a runtime is its kind and name):
		// the children over the combinations.
		combos := map[string]bool{}
		for _, m := range mf.GetMetric() {
			var key []string
			for _, l := range append(names, metrics.LabelRuntimeKind) {
				key = append(key, labelValue(m, l))
			}
			combos[strings.Join(key, "\x00")] = true
		}
		return per * len(mf.GetMetric()) / len(combos), false
	}
	return per * len(mf.GetMetric()), true
}

// runtimeLabelNames returns mf's labels that are not closed sets.
func runtimeLabelNames(mf *dto.MetricFamily) []string {
	var names []string
	for _, l := range labelNames(mf) {
		if !isEnum(mf, l) {
			names = append(names, l)
		}
	}
	return names
}

// labelValue returns m's value of label, "" when it has none.
func labelValue(m *dto.Metric, label string) string {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == label {
			return lp.GetValue()
		}
	}
	return ""
}

func labelValues(mf *dto.MetricFamily, label string) []string {
	var values []string
	for _, m := range mf.GetMetric() {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == label && !slices.Contains(values, lp.GetValue()) {
				values = append(values, lp.GetValue())
			}
		}
	}
	// Children are gathered sorted by label values; present stages in
	// pipeline order instead.
	if label == metrics.LabelStage || label == metrics.LabelName {
		slices.SortStableFunc(values, func(a, b string) int {
			return slices.Index(stageNames, a) - slices.Index(stageNames, b)
		})
	}
	return values
}

func buckets(mf *dto.MetricFamily) []string {
	h := mf.GetMetric()[0].GetHistogram()
	if h == nil {
		return nil
	}
	var bounds []string
	for _, bk := range h.GetBucket() {
		bounds = append(bounds, strconv.FormatFloat(bk.GetUpperBound(), 'g', -1, 64))
	}
	return bounds
}

func codeList(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = "`" + v + "`"
	}
	return out
}
