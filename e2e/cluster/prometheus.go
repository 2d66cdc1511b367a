package cluster

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// PrometheusGlobal is the global section of the configuration the cluster's Prometheus
// starts with ([Options.Prometheus]) and that [Cluster.ConfigurePrometheus] keeps: an
// evaluation interval short enough for tests to see rules with a shortened `for:` fire
// within seconds. A scrape config sets its own interval (a ServiceMonitor's interval).
const PrometheusGlobal = "global:\n  scrape_interval: 5s\n  evaluation_interval: 2s\n"

// PrometheusURL returns the base URL of the cluster's Prometheus server
// (Options.Prometheus), e.g. "http://127.0.0.1:41234"; "" without one.
func (c *Cluster) PrometheusURL() string {
	if !c.opts.Prometheus {
		return ""
	}
	return fmt.Sprintf("http://127.0.0.1:%d", c.ports[Prometheus])
}

// PrometheusDir returns the folder of the cluster's Prometheus configuration, beside
// which a scrape config's credentials_file can be written; "" without one.
func (c *Cluster) PrometheusDir() string {
	switch {
	case !c.opts.Prometheus:
		return ""
	case c.prometheusDir != "":
		return c.prometheusDir
	}
	return filepath.Join(c.workDir, Prometheus)
}

// startPrometheus runs Prometheus (PrometheusSource) with PrometheusGlobal and no scrape
// configs, its TSDB in the cluster's data folder, listening on 127.0.0.1 with the
// lifecycle API on, so that [Cluster.ConfigurePrometheus] can reload it.
func (c *Cluster) startPrometheus(ctx context.Context) error {
	dir := c.PrometheusDir()
	if err := os.MkdirAll(filepath.Join(dir, "rules"), 0o755); err != nil {
		return err
	}
	config := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(config, []byte(PrometheusGlobal), 0o644); err != nil {
		return err
	}
	url := c.PrometheusURL()
	return c.runComponent(ctx, componentSpec{
		name:   Prometheus,
		binary: c.bins.Path(Prometheus),
		args: []string{
			"--config.file=" + config,
			"--storage.tsdb.path=" + filepath.Join(dir, "data"),
			"--storage.tsdb.retention.time=1d",
			fmt.Sprintf("--web.listen-address=127.0.0.1:%d", c.ports[Prometheus]),
			"--web.enable-lifecycle",
		},
		ports: []int{c.ports[Prometheus]},
		ready: httpProbe(http.DefaultClient, url+"/-/ready", "Ready"),
	})
}

// ConfigurePrometheus replaces the cluster's Prometheus configuration with
// PrometheusGlobal, scrapeConfigs (YAML of the scrape_configs list, indented as a
// top-level key's value) and the rule files rules (file name -> YAML of a rules file:
// `groups:`), then reloads it. It returns once Prometheus has loaded them. Errors:
// no Prometheus (Options.Prometheus), a file cannot be written, or Prometheus refuses
// the configuration (its reason is in the error).
func (c *Cluster) ConfigurePrometheus(ctx context.Context, scrapeConfigs string, rules map[string]string) error {
	dir := c.PrometheusDir()
	if dir == "" {
		return fmt.Errorf("the cluster runs no Prometheus: start it with Options.Prometheus")
	}
	rulesDir := filepath.Join(dir, "rules")
	if err := os.RemoveAll(rulesDir); err != nil {
		return err
	}
	if err := os.MkdirAll(rulesDir, 0o755); err != nil {
		return err
	}
	var files []string
	for _, name := range slices.Sorted(maps.Keys(rules)) {
		path := filepath.Join(rulesDir, name)
		if err := os.WriteFile(path, []byte(rules[name]), 0o644); err != nil {
			return err
		}
		files = append(files, path)
	}
	var b strings.Builder
	b.WriteString(PrometheusGlobal)
	if len(files) > 0 {
		b.WriteString("rule_files:\n")
		for _, f := range files {
			fmt.Fprintf(&b, "  - %q\n", f)
		}
	}
	if strings.TrimSpace(scrapeConfigs) != "" {
		b.WriteString("scrape_configs:\n" + scrapeConfigs)
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.PrometheusURL()+"/-/reload", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("reloading Prometheus: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("Prometheus refused its configuration (%s): %s (config: %s, log: %s)",
			resp.Status, strings.TrimSpace(string(body)), filepath.Join(dir, "prometheus.yml"), filepath.Join(c.opts.LogDir, Prometheus+".log"))
	}
	return nil
}
