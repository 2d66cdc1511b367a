// Command dashboardpng draws the main panels of Trainyard's Grafana dashboard —
// stage latency p50/p99 per stage, queue wait, queue depth and the keys in
// flight, API writes by verb and kind, TrainJobs by phase — from a Prometheus's
// range queries into a PNG, and prints the PNG's path. The queries are the
// dashboard's own (charts/trainyard/dashboards/trainyard.json), so the picture
// is what Grafana would show. It fails, naming the query, when a panel's query
// returns no data.
//
// Usage, from e2e/:
//
//	go run ./cmd/dashboardpng --prometheus-url=http://127.0.0.1:9090 [--out=../_output/dashboard.png] [--since=15m]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"

	"github.com/trainyard/trainyard/e2e/dashboardpng"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "dashboardpng:", err)
		os.Exit(1)
	}
}

func run() error {
	promURL := flag.String("prometheus-url", "", "base URL of the Prometheus HTTP API to query (required), e.g. http://127.0.0.1:9090")
	out := flag.String("out", "../_output/dashboard.png", "PNG to write")
	dash := flag.String("dashboard", "../charts/trainyard/dashboards/trainyard.json", "Grafana dashboard JSON to read the panels' queries from")
	since := flag.Duration("since", 15*time.Minute, "time range drawn, ending now")
	step := flag.Duration("step", 0, "range query resolution; 0: the range over 300 points, at least 1s")
	rateInterval := flag.Duration("rate-interval", time.Minute, "window of rate() ($__rate_interval): at least 4 scrape intervals")
	namespace := flag.String("namespace", "", "regular expression the series' namespace label must match; empty: any (the host process's series have none)")
	job := flag.String("job", "", "regular expression the series' job label must match; empty: any")
	timeout := flag.Duration("timeout", time.Minute, "deadline for all the queries")
	flag.Parse()

	if *promURL == "" {
		return errors.New("--prometheus-url is required: the Prometheus that scraped the controller, e.g. --prometheus-url=http://127.0.0.1:9090")
	}
	if *since <= 0 || *rateInterval <= 0 || *step < 0 {
		return errors.New("--since and --rate-interval must be positive, --step at least 0")
	}
	if *step == 0 {
		*step = max(time.Second, (*since / 300).Round(time.Second))
	}
	data, err := os.ReadFile(*dash)
	if err != nil {
		return fmt.Errorf("--dashboard: %w", err)
	}
	d, err := dashboardpng.ReadDashboard(data)
	if err != nil {
		return err
	}
	panels, err := d.Select(dashboardpng.MainPanels)
	if err != nil {
		return err
	}
	client, err := api.NewClient(api.Config{Address: *promURL})
	if err != nil {
		return fmt.Errorf("--prometheus-url: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	scope := dashboardpng.Scope{Namespace: *namespace, Job: *job, Range: *since, RateInterval: *rateInterval}
	drawn, err := d.Fetch(ctx, promv1.NewAPI(client), panels, scope, time.Now(), *step)
	if err != nil {
		return err
	}
	path, err := filepath.Abs(*out)
	if err != nil {
		return err
	}
	if err := dashboardpng.Draw(drawn, path); err != nil {
		return err
	}
	fmt.Println(path)
	return nil
}
