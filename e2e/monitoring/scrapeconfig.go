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
	"regexp"
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
	cfg, ep, err := endpointConfig(sm, i, target.CredentialsFile)
	if err != nil {
		return "", err
	}
	port, _ := ep["port"].(string)
	cfg["static_configs"] = []any{map[string]any{"targets": []any{target.Address}, "labels": map[string]any{"job": target.Service, "namespace": target.Namespace, "service": target.Service, "pod": target.Pod, "endpoint": port}}}
	out, err := yaml.Marshal([]any{cfg})
	return string(out), err
}

// Discovery is how Prometheus, running on the host rather than in the cluster, finds
// the Pods behind a ServiceMonitor's Service ([DiscoveredScrapeConfig]).
type Discovery struct {
	// KubeconfigFile names the API server Prometheus' Kubernetes service discovery
	// watches and its credentials (in a cluster, the Pod's service account).
	KubeconfigFile string
	// CredentialsFile holds the value of the Secret key the endpoint's
	// authorization.credentials names, as for [Target].
	CredentialsFile string
}

// DiscoveredScrapeConfig returns, as YAML of one scrape_configs entry, the scrape
// configuration Prometheus Operator generates for endpoint i of the ServiceMonitor sm
// with its EndpointSlice service discovery (the operator's serviceDiscoveryRole
// EndpointSlice): kubernetes_sd_configs of role endpointslice in the namespaces of
// spec.namespaceSelector.matchNames (the ServiceMonitor's own when empty), then the
// operator's relabelings in its order: keep the Services whose labels match
// spec.selector.matchLabels, keep the endpoint's port (by name), set node or pod from
// the endpoint's target, namespace, service, pod, container, drop Pods that Failed or
// Succeeded, job = the Service's name (the chart sets no jobLabel), endpoint = the
// port's name, then the ServiceMonitor's relabelings. The endpoint's other fields map
// as in [ScrapeConfig]. Left out: the hashmod sharding relabelings (one shard keeps
// every target). Errors: a selector or endpoint field this mapping does not know
// (matchExpressions, targetPort, namespaceSelector.any), named.
func DiscoveredScrapeConfig(sm *unstructured.Unstructured, i int, d Discovery) (string, error) {
	cfg, ep, err := endpointConfig(sm, i, d.CredentialsFile)
	if err != nil {
		return "", err
	}
	field := func(name string) string {
		return fmt.Sprintf("ServiceMonitor %s/%s spec.%s", sm.GetNamespace(), sm.GetName(), name)
	}
	spec, _, _ := unstructured.NestedMap(sm.Object, "spec")
	for key := range spec {
		switch key {
		case "endpoints", "selector", "namespaceSelector":
		default:
			return "", fmt.Errorf("%s: no mapping to a scrape config here; add it to monitoring.DiscoveredScrapeConfig", field(key))
		}
	}
	namespaces, _, _ := unstructured.NestedStringSlice(sm.Object, "spec", "namespaceSelector", "matchNames")
	if all, _, _ := unstructured.NestedBool(sm.Object, "spec", "namespaceSelector", "any"); all {
		return "", fmt.Errorf("%s: every namespace is not mapped here; name them in matchNames", field("namespaceSelector.any"))
	}
	if len(namespaces) == 0 {
		namespaces = []string{sm.GetNamespace()}
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(sm.Object, "spec", "selector", "matchExpressions"); found {
		return "", fmt.Errorf("%s: not mapped here; select the Service with matchLabels", field("selector.matchExpressions"))
	}
	matchLabels, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	if len(matchLabels) == 0 {
		return "", fmt.Errorf("%s: empty; a ServiceMonitor that selects every Service is not mapped here", field("selector.matchLabels"))
	}
	port, _ := ep["port"].(string)
	if port == "" {
		return "", fmt.Errorf("%s: want the Service port's name (targetPort is not mapped here)", field(fmt.Sprintf("endpoints[%d].port", i)))
	}
	sdConfig := map[string]any{"role": "endpointslice", "namespaces": map[string]any{"names": toAny(namespaces)}}
	if d.KubeconfigFile != "" {
		sdConfig["kubeconfig_file"] = d.KubeconfigFile
	}
	cfg["kubernetes_sd_configs"] = []any{sdConfig}
	target := []any{"__meta_kubernetes_endpointslice_address_target_kind", "__meta_kubernetes_endpointslice_address_target_name"}
	relabel := []any{
		map[string]any{"source_labels": []any{"job"}, "target_label": "__tmp_prometheus_job_name"},
	}
	for _, k := range slices.Sorted(maps.Keys(matchLabels)) {
		name := labelName(k)
		relabel = append(relabel, map[string]any{"action": "keep",
			"source_labels": []any{"__meta_kubernetes_service_label_" + name, "__meta_kubernetes_service_labelpresent_" + name},
			"regex":         "(" + regexp.QuoteMeta(matchLabels[k]) + ");true"})
	}
	relabel = append(relabel,
		map[string]any{"action": "keep", "source_labels": []any{"__meta_kubernetes_endpointslice_port_name"}, "regex": regexp.QuoteMeta(port)},
		map[string]any{"source_labels": target, "separator": ";", "regex": "Node;(.*)", "replacement": "${1}", "target_label": "node"},
		map[string]any{"source_labels": target, "separator": ";", "regex": "Pod;(.*)", "replacement": "${1}", "target_label": "pod"},
		map[string]any{"source_labels": []any{"__meta_kubernetes_namespace"}, "target_label": "namespace"},
		map[string]any{"source_labels": []any{"__meta_kubernetes_service_name"}, "target_label": "service"},
		map[string]any{"source_labels": []any{"__meta_kubernetes_pod_name"}, "target_label": "pod"},
		map[string]any{"source_labels": []any{"__meta_kubernetes_pod_container_name"}, "target_label": "container"},
		map[string]any{"action": "drop", "source_labels": []any{"__meta_kubernetes_pod_phase"}, "regex": "(Failed|Succeeded)"},
		map[string]any{"source_labels": []any{"__meta_kubernetes_service_name"}, "target_label": "job", "replacement": "${1}"},
		map[string]any{"target_label": "endpoint", "replacement": port},
	)
	if own, ok := cfg["relabel_configs"].([]any); ok {
		relabel = append(relabel, own...)
	}
	cfg["relabel_configs"] = relabel
	out, err := yaml.Marshal([]any{cfg})
	return string(out), err
}

// labelName is a Kubernetes label key as Prometheus' service discovery names it in a
// meta label: every character outside [a-zA-Z0-9_] becomes "_".
func labelName(key string) string {
	return regexp.MustCompile(`[^a-zA-Z0-9_]`).ReplaceAllString(key, "_")
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// endpointConfig maps the fields of endpoint i of sm that do not depend on how the
// targets are found (see [ScrapeConfig]) into a scrape config, and returns it with the
// endpoint. credentialsFile holds the authorization Secret's value.
func endpointConfig(sm *unstructured.Unstructured, i int, credentialsFile string) (map[string]any, map[string]any, error) {
	endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if i >= len(endpoints) {
		return nil, nil, fmt.Errorf("ServiceMonitor %s/%s has %d endpoints, no endpoint %d", sm.GetNamespace(), sm.GetName(), len(endpoints), i)
	}
	ep, ok := endpoints[i].(map[string]any)
	if !ok {
		return nil, nil, fmt.Errorf("ServiceMonitor %s/%s: spec.endpoints[%d] is not an object", sm.GetNamespace(), sm.GetName(), i)
	}
	field := func(name string) string {
		return fmt.Sprintf("ServiceMonitor %s/%s spec.endpoints[%d].%s", sm.GetNamespace(), sm.GetName(), i, name)
	}
	cfg := map[string]any{
		"job_name":     fmt.Sprintf("serviceMonitor/%s/%s/%d", sm.GetNamespace(), sm.GetName(), i),
		"honor_labels": false,
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
					return nil, nil, fmt.Errorf("%s: no mapping for a host-process target (supported: insecureSkipVerify, serverName)", field("tlsConfig."+k))
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
				return nil, nil, fmt.Errorf("%s: want a Secret key selector", field("authorization.credentials"))
			}
			if credentialsFile == "" {
				return nil, nil, fmt.Errorf("%s names a Secret but the target has no CredentialsFile with its value", field("authorization"))
			}
			cfg["authorization"] = map[string]any{"type": typ, "credentials_file": credentialsFile}
		case "relabelings", "metricRelabelings":
			rules, err := relabelConfigs(v, field(key))
			if err != nil {
				return nil, nil, err
			}
			cfg[map[string]string{"relabelings": "relabel_configs", "metricRelabelings": "metric_relabel_configs"}[key]] = rules
		default:
			return nil, nil, fmt.Errorf("%s: no mapping to a scrape config here; add it to monitoring.ScrapeConfig", field(key))
		}
	}
	return cfg, ep, nil
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
