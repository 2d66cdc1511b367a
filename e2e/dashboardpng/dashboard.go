// Package dashboardpng draws the main panels of Trainyard's Grafana dashboard
// (charts/trainyard/dashboards/trainyard.json) into a PNG from a Prometheus's
// range queries: the queries are read from the dashboard itself, so the picture
// is the dashboard, without a Grafana. cmd/dashboardpng is its command.
package dashboardpng

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/prometheus/common/model"
)

// MainPanels are the titles of the panels drawn, in the picture's order (left to
// right, top to bottom): stage latency p50/p99 per stage, queue wait, queue depth
// and the keys in flight, API writes by verb and kind, TrainJobs by phase.
var MainPanels = []string{
	"Processing time p50 / p99",
	"Queue wait p50 / p99",
	"Queue depth",
	"TrainJobs past the first stage",
	"API writes by verb and kind",
	"TrainJobs by phase",
}

// Panel is one dashboard panel: its title, Grafana unit id (s, ops, none, ...) and
// queries.
type Panel struct {
	Title   string
	Unit    string
	Queries []Query
}

// Query is one PromQL target of a panel, as written in the dashboard: Grafana
// variables ($namespace, $__rate_interval, ...) unexpanded, legend a Grafana legend
// template ("p99 {{stage}}").
type Query struct {
	RefID  string
	Expr   string
	Legend string
}

// Dashboard is what the picture needs of the dashboard JSON: its panels and the
// current values of its custom variables (the SLO latency and objective).
type Dashboard struct {
	Panels map[string]Panel
	Vars   map[string]string
}

// ReadDashboard parses Grafana dashboard JSON (the classic model: panels, rows'
// nested panels, templating). Errors: JSON that does not parse.
func ReadDashboard(data []byte) (*Dashboard, error) {
	type panel struct {
		Title       string `json:"title"`
		Type        string `json:"type"`
		FieldConfig struct {
			Defaults struct {
				Unit string `json:"unit"`
			} `json:"defaults"`
		} `json:"fieldConfig"`
		Targets []struct {
			RefID        string `json:"refId"`
			Expr         string `json:"expr"`
			LegendFormat string `json:"legendFormat"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var raw struct {
		Panels     []json.RawMessage `json:"panels"`
		Templating struct {
			List []struct {
				Name    string `json:"name"`
				Type    string `json:"type"`
				Current struct {
					Value any `json:"value"`
				} `json:"current"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("dashboard JSON: %w", err)
	}
	d := &Dashboard{Panels: map[string]Panel{}, Vars: map[string]string{}}
	for _, v := range raw.Templating.List {
		if s, ok := v.Current.Value.(string); ok && v.Type == "custom" {
			d.Vars[v.Name] = s
		}
	}
	var walk func([]json.RawMessage) error
	walk = func(panels []json.RawMessage) error {
		for _, r := range panels {
			var p panel
			if err := json.Unmarshal(r, &p); err != nil {
				return fmt.Errorf("dashboard JSON: panel: %w", err)
			}
			if p.Type == "timeseries" {
				out := Panel{Title: p.Title, Unit: p.FieldConfig.Defaults.Unit}
				for _, t := range p.Targets {
					out.Queries = append(out.Queries, Query{RefID: t.RefID, Expr: t.Expr, Legend: t.LegendFormat})
				}
				d.Panels[p.Title] = out
			}
			if err := walk(p.Panels); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(raw.Panels); err != nil {
		return nil, err
	}
	return d, nil
}

// Select returns the time series panels titled titles, in that order. Errors: a
// title the dashboard has no time series panel of.
func (d *Dashboard) Select(titles []string) ([]Panel, error) {
	var out []Panel
	for _, t := range titles {
		p, ok := d.Panels[t]
		if !ok {
			return nil, fmt.Errorf("the dashboard has no time series panel %q", t)
		}
		out = append(out, p)
	}
	return out, nil
}

// Scope is what Grafana's variables stand for in a picture.
type Scope struct {
	// Namespace and Job are regular expressions the namespace and job labels of
	// the series must match; empty means any (".*", which also matches a series
	// without the label, as the host process's scrape has no namespace).
	Namespace, Job string
	// Range is the time range drawn ($__range).
	Range time.Duration
	// RateInterval is rate()'s window ($__rate_interval); at least 4 scrape intervals.
	RateInterval time.Duration
}

// grafanaVar matches Grafana variable references: $var, ${var}, ${var:format}.
var grafanaVar = regexp.MustCompile(`\$\{([A-Za-z0-9_]+)(?::[a-z]+)?\}|\$([A-Za-z0-9_]+)`)

// Expand returns expr with the dashboard's variables replaced for scope: the
// installation's selector by regular expression matchers, every stage ($stage is
// a multi-value variable shown as "All"), the custom variables' current values.
// Errors: a variable the dashboard does not define.
func (d *Dashboard) Expand(expr string, scope Scope) (string, error) {
	re := func(s string) string {
		if s == "" {
			return ".*"
		}
		return s
	}
	expr = strings.NewReplacer(
		`namespace="$namespace"`, fmt.Sprintf(`namespace=~%q`, re(scope.Namespace)),
		`job="$job"`, fmt.Sprintf(`job=~%q`, re(scope.Job)),
	).Replace(expr)
	var undefined []string
	out := grafanaVar.ReplaceAllStringFunc(expr, func(ref string) string {
		m := grafanaVar.FindStringSubmatch(ref)
		switch name := m[1] + m[2]; name {
		case "__rate_interval":
			return model.Duration(scope.RateInterval).String()
		case "__range":
			return model.Duration(scope.Range).String()
		case "stage":
			return ".*"
		default:
			if v, ok := d.Vars[name]; ok {
				return v
			}
			undefined = append(undefined, name)
			return ref
		}
	})
	if len(undefined) > 0 {
		return "", fmt.Errorf("query %q uses variables the picture cannot fill: %v", expr, undefined)
	}
	return out, nil
}

// legendLabel matches a label reference of a Grafana legend template.
var legendLabel = regexp.MustCompile(`\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}`)

// Legend renders a Grafana legend template for a series' labels; an empty
// template gives the series' labels, as Grafana shows it.
func Legend(template string, metric model.Metric) string {
	if template == "" {
		return metric.String()
	}
	return legendLabel.ReplaceAllStringFunc(template, func(ref string) string {
		return string(metric[model.LabelName(legendLabel.FindStringSubmatch(ref)[1])])
	})
}
