// Package monitoring runs the chart's monitoring against a real Prometheus (issue 39):
// the Prometheus server of the local control plane (cluster.Options.Prometheus) scrapes
// the controller process with the scrape configuration the chart's ServiceMonitor would
// make Prometheus Operator generate ([ScrapeConfig]), authenticated as the chart's
// metrics scraper, and evaluates the chart's recording and alerting rules. Its tests
// show that every recording rule and dashboard query returns data after a workload, that
// no alert fires in a healthy run, and that local faults fire the alerts meant for them.
package monitoring

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// Target is where a ServiceMonitor endpoint's scrape goes when the controller runs as a
// host process instead of Pods behind the metrics Service: the labels Prometheus
// Operator's relabelings would give a Pod of that Service.
type Target struct {
	// Address is the host:port of the controller's /metrics.
	Address string
	// Namespace and Service are the metrics Service's; Pod names the process.
	Namespace, Service, Pod string
	// CredentialsFile holds the value of the Secret key the endpoint's
	// authorization.credentials names: Prometheus Operator copies that value into the
	// configuration, a file keeps it out of Prometheus' config page.
	CredentialsFile string
}

// ScrapeConfig returns, as YAML of one scrape_configs entry, the scrape configuration
// Prometheus Operator generates for endpoint i of the ServiceMonitor sm, with the
// Kubernetes service discovery replaced by a static target carrying the labels the
// operator's relabelings set (job = the Service's name, as the chart sets no jobLabel;
// namespace, service, pod, endpoint = the port's name). The fields the operator maps:
// interval -> scrape_interval, scrapeTimeout -> scrape_timeout, path -> metrics_path,
// scheme, tlsConfig (insecureSkipVerify, serverName) -> tls_config, authorization
// (type, credentials) -> authorization (credentials from target.CredentialsFile),
// relabelings -> relabel_configs, metricRelabelings -> metric_relabel_configs.
// Errors: no endpoint i, or a field this mapping does not know (named, so a chart
// change cannot be silently dropped).
func ScrapeConfig(sm *unstructured.Unstructured, i int, target Target) (string, error) {
	endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if i >= len(endpoints) {
		return "", fmt.Errorf("ServiceMonitor %s/%s has %d endpoints, no endpoint %d", sm.GetNamespace(), sm.GetName(), len(endpoints), i)
	}
	ep, ok := endpoints[i].(map[string]any)
	if !ok {
		return "", fmt.Errorf("ServiceMonitor %s/%s: spec.endpoints[%d] is not an object", sm.GetNamespace(), sm.GetName(), i)
	}
	field := func(name string) string {
		return fmt.Sprintf("ServiceMonitor %s/%s spec.endpoints[%d].%s", sm.GetNamespace(), sm.GetName(), i, name)
	}
	port, _ := ep["port"].(string)
	cfg := map[string]any{
		"job_name":       fmt.Sprintf("serviceMonitor/%s/%s/%d", sm.GetNamespace(), sm.GetName(), i),
		"honor_labels":   false,
		"static_configs": []any{map[string]any{"targets": []any{target.Address}, "labels": map[string]any{"job": target.Service, "namespace": target.Namespace, "service": target.Service, "pod": target.Pod, "endpoint": port}}},
	}
	for _, key := range slices.Sorted(maps.Keys(ep)) {
		v := ep[key]
		switch key {
		case "port":
		case "path":
			cfg["metrics_path"] = v
		case "scheme":
			cfg["scheme"] = v
		case "interval":
			cfg["scrape_interval"] = v
		case "scrapeTimeout":
			cfg["scrape_timeout"] = v
		case "tlsConfig":
			tls := map[string]any{}
			for k, tv := range v.(map[string]any) {
				switch k {
				case "insecureSkipVerify":
					tls["insecure_skip_verify"] = tv
				case "serverName":
					tls["server_name"] = tv
				default:
					return "", fmt.Errorf("%s: no mapping for a host-process target (supported: insecureSkipVerify, serverName)", field("tlsConfig."+k))
				}
			}
			cfg["tls_config"] = tls
		case "authorization":
			a := v.(map[string]any)
			typ, _ := a["type"].(string)
			if typ == "" {
				typ = "Bearer" // the operator's default
			}
			if _, ok := a["credentials"].(map[string]any); !ok {
				return "", fmt.Errorf("%s: want a Secret key selector", field("authorization.credentials"))
			}
			if target.CredentialsFile == "" {
				return "", fmt.Errorf("%s names a Secret but the target has no CredentialsFile with its value", field("authorization"))
			}
			cfg["authorization"] = map[string]any{"type": typ, "credentials_file": target.CredentialsFile}
		case "relabelings", "metricRelabelings":
			rules, err := relabelConfigs(v, field(key))
			if err != nil {
				return "", err
			}
			cfg[map[string]string{"relabelings": "relabel_configs", "metricRelabelings": "metric_relabel_configs"}[key]] = rules
		default:
			return "", fmt.Errorf("%s: no mapping to a scrape config here; add it to monitoring.ScrapeConfig", field(key))
		}
	}
	out, err := yaml.Marshal([]any{cfg})
	return string(out), err
}

// relabelConfigs maps Prometheus Operator RelabelConfigs (camelCase) to Prometheus'
// relabel_configs (snake_case; action lower case, as Prometheus writes it).
func relabelConfigs(v any, field string) ([]any, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%s: want a list", field)
	}
	names := map[string]string{"sourceLabels": "source_labels", "separator": "separator", "targetLabel": "target_label",
		"regex": "regex", "modulus": "modulus", "replacement": "replacement", "action": "action"}
	var out []any
	for j, r := range list {
		rule, ok := r.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s[%d]: want an object", field, j)
		}
		m := map[string]any{}
		for k, rv := range rule {
			name, ok := names[k]
			if !ok {
				return nil, fmt.Errorf("%s[%d].%s: not a RelabelConfig field", field, j, k)
			}
			if k == "action" {
				rv = strings.ToLower(fmt.Sprint(rv))
			}
			m[name] = rv
		}
		out = append(out, m)
	}
	return out, nil
}
