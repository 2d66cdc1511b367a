package monitoring

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/trainyard/trainyard/e2e/cluster"
)

// prom is the cluster's Prometheus, through its HTTP API.
type prom struct{ api promv1.API }

func newProm(t *testing.T, c *cluster.Cluster) prom {
	t.Helper()
	client, err := api.NewClient(api.Config{Address: c.PrometheusURL()})
	if err != nil {
		t.Fatal(err)
	}
	return prom{api: promv1.NewAPI(client)}
}

// query evaluates q now and returns its result; an error of Prometheus fails the test.
func (p prom) query(t *testing.T, q string) model.Value {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, warnings, _, err := p.api.Query(ctx, q, time.Now())
	if err != nil {
		t.Fatalf("query %s: %v", q, err)
	}
	if len(warnings) > 0 {
		t.Logf("query %s: warnings %v", q, warnings)
	}
	return v
}

// queryRange evaluates q from start to now every step, as a dashboard panel over that
// time range does, and returns the number of samples; an error fails the test.
func (p prom) queryRange(t *testing.T, q string, start time.Time, step time.Duration) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, _, _, err := p.api.QueryRange(ctx, q, promv1.Range{Start: start, End: time.Now(), Step: step})
	if err != nil {
		t.Fatalf("query %s: %v", q, err)
	}
	n := 0
	for _, s := range v.(model.Matrix) {
		n += len(s.Values) + len(s.Histograms)
	}
	return n
}

// firing returns the alerts in state firing, by name, with their labels.
func (p prom) firing(t *testing.T) map[string][]model.LabelSet {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := p.api.Alerts(ctx)
	if err != nil {
		t.Fatalf("alerts: %v", err)
	}
	out := map[string][]model.LabelSet{}
	for _, a := range res.Alerts {
		if a.State == promv1.AlertStateFiring {
			name := string(a.Labels[model.AlertNameLabel])
			out[name] = append(out[name], a.Labels)
		}
	}
	return out
}

// target returns the active target of scrape job, and whether there is one.
func (p prom) target(t *testing.T, job string) (promv1.ActiveTarget, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := p.api.Targets(ctx)
	if err != nil {
		t.Fatalf("targets: %v", err)
	}
	for _, tg := range res.Active {
		if tg.ScrapePool == job {
			return tg, true
		}
	}
	return promv1.ActiveTarget{}, false
}

// config returns the configuration Prometheus runs, as it prints it (defaults filled,
// secrets masked).
func (p prom) config(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := p.api.Config(ctx)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return res.YAML
}
