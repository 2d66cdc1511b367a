package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/trainyard/trainyard/e2e/dashboardpng"
)

// devScrapeInterval is the ServiceMonitor interval make dev scrapes at
// (monitoring.DefaultValues): rate()'s window is four of them, as Grafana's
// $__rate_interval would be.
const devScrapeInterval = 5 * time.Second

// drawDashboard waits until the cluster's Prometheus has scraped the controller
// after the TrainJob finished (the run's last sample, so the picture ends with
// it), then draws the dashboard's main panels (dashboardpng.MainPanels, the queries
// of charts/trainyard/dashboards/trainyard.json) over the run, start to now, into
// _output/dashboard.png, and returns the file's path. Errors: Prometheus does not
// answer, a panel's query has no data (named), or the file cannot be written.
func drawDashboard(ctx context.Context, root, promURL, job string, start time.Time, say func(string, ...any)) (string, error) {
	client, err := api.NewClient(api.Config{Address: promURL})
	if err != nil {
		return "", err
	}
	prom := promv1.NewAPI(client)
	// Two scrapes after now: the finished TrainJob counted, and rate() has a last pair.
	finished := time.Now()
	selector := fmt.Sprintf(`timestamp(up{job=%q})`, job)
	deadline := time.Now().Add(4 * devScrapeInterval)
	for scraped := 0; scraped < 2; {
		if time.Now().After(deadline) {
			return "", fmt.Errorf("Prometheus %s has not scraped job %s twice in the %s since the TrainJob finished", promURL, job, 4*devScrapeInterval)
		}
		v, _, _, err := prom.Query(ctx, selector, time.Now())
		if err == nil {
			if vec, ok := v.(model.Vector); ok && len(vec) > 0 {
				// The value is the last scrape's time, in seconds.
				if last := time.UnixMilli(int64(float64(vec[0].Value) * 1000)); last.After(finished) {
					scraped++
					finished = last
					continue
				}
			}
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(time.Second):
		}
	}
	data, err := os.ReadFile(filepath.Join(root, "charts", "trainyard", "dashboards", "trainyard.json"))
	if err != nil {
		return "", err
	}
	d, err := dashboardpng.ReadDashboard(data)
	if err != nil {
		return "", err
	}
	panels, err := d.Select(dashboardpng.MainPanels)
	if err != nil {
		return "", err
	}
	span := max(time.Minute, time.Since(start).Round(time.Second)+devScrapeInterval)
	scope := dashboardpng.Scope{Job: regexp.QuoteMeta(job), Range: span, RateInterval: 4 * devScrapeInterval}
	drawn, err := d.Fetch(ctx, prom, panels, scope, time.Now(), max(time.Second, (span/300).Round(time.Second)))
	if err != nil {
		return "", err
	}
	path := filepath.Join(root, "_output", "dashboard.png")
	if err := dashboardpng.Draw(drawn, path); err != nil {
		return "", err
	}
	say("the dashboard's main panels over this run (%s, from Prometheus %s): %s", span, promURL, path)
	return path, nil
}
