package charttest

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/release"
	"sigs.k8s.io/yaml"
)

func TestSchemaRejectsMistakes(t *testing.T) {
	for values, wantInError := range map[string]string{
		// misspelt or invented keys, at every level
		`replicaCount: 2`: "replicaCount",
		`metrics: {servicemonitor: {enabled: true}}`:       "servicemonitor",
		`metrics: {serviceMonitor: {enable: true}}`:        "enable",
		`config: {stages: {gangScheduling: {workers: 2}}}`: "gangScheduling",
		`config: {stages: {status: {worker: 2}}}`:          "worker",
		`config: {clientConnection: {QPS: 10}}`:            "QPS",
		`securityContext: {readOnlyRootFileSystem: true}`:  "readOnlyRootFileSystem",
		`podSecurityContext: {runAsNonroot: true}`:         "runAsNonroot",
		`resources: {limit: {memory: 1Gi}}`:                "limit",
		`leaderElection: {leaseNamespace: x}`:              "leaseNamespace",
		`image: {tags: v1}`:                                "tags",
		`metrics: {prometheusRule: {stageErrorRatio: {thresold: 0.1, enabled: true, threshold: 0.1, minSyncs: 1, for: 1m, severity: x}}}`: "thresold",
		// wrong types and values
		`replicas: "2"`: "replicas",
		`replicas: -1`:  "replicas",
		`config: {stages: {status: {workers: 0}}}`:                                     "workers",
		`config: {clientConnection: {qps: "50"}}`:                                      "qps",
		`leaderElection: {leaseDuration: 15}`:                                          "leaseDuration",
		`leaderElection: {renewDeadline: ten seconds}`:                                 "renewDeadline",
		`logging: {format: yaml}`:                                                      "format",
		`image: {pullPolicy: Sometimes}`:                                               "pullPolicy",
		`image: {digest: "abc"}`:                                                       "digest",
		`metrics: {prometheusRule: {jobSetCreationSLO: {latencySeconds: 20}}}`:         "latencySeconds",
		`metrics: {prometheusRule: {jobSetCreationSLO: {objective: 99}}}`:              "objective",
		`metrics: {prometheusRule: {selector: '{job="x"}'}}`:                           "selector",
		`metrics: {prometheusRule: {progressReportFlood: {reportsPerSecond: 0}}}`:      "reportsPerSecond",
		`metrics: {prometheusRule: {progressReportFlood: {rejectedPerSecond: "5/s"}}}`: "rejectedPerSecond",
		`metrics: {prometheusRule: {progressWritesFailing: {threshold: 5}}}`:           "threshold",
		`metrics: {serviceMonitor: {interval: 30}}`:                                    "interval",
		`extraArgs: [v=4]`: "extraArgs",
		`podDisruptionBudget: {minAvailable: "half"}`:  "minAvailable",
		`config: {featureGates: {someFeature: true}}`:  "someFeature",
		`config: {featureGates: {SomeFeature: "yes"}}`: "SomeFeature",
		// watchNamespaces: namespace names, each once
		`watchNamespaces: team-a`:           "watchNamespaces",
		`watchNamespaces: [Team_A]`:         "watchNamespaces",
		`watchNamespaces: [team-a, team-a]`: "watchNamespaces",
		`watchNamespaces: [""]`:             "watchNamespaces",
		// admission
		`webhook: {enable: false}`:                        "enable",
		`webhook: {enabled: "false"}`:                     "enabled",
		`webhook: {port: 70000}`:                          "port",
		`webhook: {failurePolicy: Never}`:                 "failurePolicy",
		`webhook: {timeoutSeconds: 31}`:                   "timeoutSeconds",
		`webhook: {timeoutSeconds: 0}`:                    "timeoutSeconds",
		`webhook: {namespaceSelector: {matchNames: [a]}}`: "matchNames",
		`webhook: {namespaceSelector: {matchExpressions: [{key: a, operator: Equals}]}}`: "operator",
		`webhook: {certificates: {mode: certManager}}`:                                   "mode",
		`webhook: {certificates: {secretName: My_Secret}}`:                               "secretName",
		`webhook: {certificates: {caBundle: "-----BEGIN CERTIFICATE-----"}}`:             "caBundle",
		`webhook: {certificates: {certManager: {enabled: true}}}`:                        "enabled",
		`webhook: {certificates: {certManager: {issuerRef: {kind: ClusterIssuer}}}}`:     "name",
		`webhook: {certificates: {certManager: {issuerRef: {name: ca, namespace: x}}}}`:  "namespace",
		// network policy: NetworkPolicyPeers and egress rules as Kubernetes takes them
		`networkPolicy: {enable: true}`:                                                           "enable",
		`networkPolicy: {enabled: "true"}`:                                                        "enabled",
		`networkPolicy: {health: {from: []}}`:                                                     "health",
		`networkPolicy: {webhook: {from: {ipBlock: {cidr: 10.0.0.0/8}}}}`:                         "from",
		`networkPolicy: {webhook: {from: [{}]}}`:                                                  "from",
		`networkPolicy: {webhook: {from: [{ipblock: {cidr: 10.0.0.0/8}}]}}`:                       "ipblock",
		`networkPolicy: {webhook: {from: [{ipBlock: {cidr: 10.0.0.0}}]}}`:                         "cidr",
		`networkPolicy: {webhook: {from: [{ipBlock: {cidr: 10.0.0.0/8}, podSelector: {}}]}}`:      "from",
		`networkPolicy: {metrics: {from: [{namespaceSelector: {matchNames: [monitoring]}}]}}`:     "matchNames",
		`networkPolicy: {metrics: {enabled: "no"}}`:                                               "enabled",
		`networkPolicy: {progress: {namespaceSelector: {matchLabel: {team: ml}}}}`:                "matchLabel",
		`networkPolicy: {progress: {podSelector: []}}`:                                            "podSelector",
		`networkPolicy: {egress: [{to: [{ipBlock: {cidr: 10.0.0.1/32}}], port: [{port: 6443}]}]}`: "port",
		`networkPolicy: {egress: [{ports: [{port: 70000}]}]}`:                                     "port",
		`networkPolicy: {egress: [{ports: [{port: 443, protocol: HTTP}]}]}`:                       "protocol",
	} {
		t.Run(values, func(t *testing.T) {
			_, err := render(t, values, withMonitoring())
			errContains(t, err, "schema", wantInError)
		})
	}
}

// TestSchemaDocumentsEveryValue: every key the schema allows has a default
// (and therefore a comment) in values.yaml. Together with the schema's closed
// objects, which helm lint checks values.yaml against, the two files describe
// the same keys.
func TestSchemaDocumentsEveryValue(t *testing.T) {
	var schema map[string]any
	if err := json.Unmarshal(mustReadFile(t, chartDir+"/values.schema.json"), &schema); err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(mustReadFile(t, chartDir+"/values.yaml"), &values); err != nil {
		t.Fatal(err)
	}
	defs := schema["definitions"].(map[string]any)
	var missing []string
	var walk func(path string, s map[string]any, v any)
	walk = func(path string, s map[string]any, v any) {
		if ref, ok := s["$ref"].(string); ok {
			s = defs[strings.TrimPrefix(ref, "#/definitions/")].(map[string]any)
		}
		props, ok := s["properties"].(map[string]any)
		if !ok {
			return
		}
		if s["additionalProperties"] != false {
			t.Errorf("%s: object schema is not closed (additionalProperties: false)", path)
		}
		vm, _ := v.(map[string]any)
		for key, sub := range props {
			if path == "" && key == "global" {
				continue
			}
			// Kubernetes objects passed through whole (security contexts,
			// resources, probes, strategy) need not list every field.
			child, present := vm[key]
			if !present {
				if vm != nil && !passThrough(path) {
					missing = append(missing, strings.TrimPrefix(path+"."+key, "."))
				}
				continue
			}
			walk(path+"."+key, sub.(map[string]any), child)
		}
	}
	walk("", schema, values)
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("schema keys without a default in values.yaml: %v", missing)
	}
}

// passThrough reports whether the values at path are a Kubernetes object
// whose schema lists fields the defaults do not set.
func passThrough(path string) bool {
	return slices.Contains([]string{
		".podSecurityContext", ".securityContext", ".securityContext.capabilities", ".resources",
		".resources.requests", ".resources.limits", ".livenessProbe", ".readinessProbe",
		".podSecurityContext.seccompProfile", ".strategy", ".affinity",
		".webhook.namespaceSelector", ".webhook.certificates.certManager.issuerRef",
		".networkPolicy.progress.namespaceSelector", ".networkPolicy.progress.podSelector",
	}, path)
}

// Helm stores each release revision, chart files included, gzipped and
// base64-encoded in one Secret, which the API server caps at 1 MiB.
const releaseSecretLimit = 1 << 20

// encodedReleaseSize is the size of the release Secret's data: Helm's storage
// encoding (JSON, gzip at best compression, base64) of a release.
func encodedReleaseSize(t *testing.T, rel *release.Release) int {
	t.Helper()
	b, err := json.Marshal(rel)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodedLen(buf.Len())
}

// TestReleaseFitsInASecret measures the release Secret of an install with
// every option on, as shipped (CRDs in crds/), and of the alternative the
// chart does not take (CRDs also rendered as templates for a crds.install
// toggle): it logs both and fails when the shipped layout comes within 25% of
// the limit.
func TestReleaseFitsInASecret(t *testing.T) {
	ch := loadChart(t)
	r := mustRender(t, combinations["everything"], withMonitoring())
	var manifest strings.Builder
	for name, text := range r.files {
		if strings.HasSuffix(name, ".yaml") {
			fmt.Fprintf(&manifest, "---\n# Source: %s\n%s\n", name, text)
		}
	}
	vals, _ := yaml.YAMLToJSON([]byte(combinations["everything"]))
	var config map[string]any
	_ = json.Unmarshal(vals, &config)
	rel := func(c *chart.Chart, manifest string) *release.Release {
		return &release.Release{
			Name: releaseName, Namespace: namespace, Version: 1, Chart: c, Config: config, Manifest: manifest,
			Info: &release.Info{Status: release.StatusDeployed, Notes: r.files["templates/NOTES.txt"]},
		}
	}
	shipped := encodedReleaseSize(t, rel(ch, manifest.String()))

	// The alternative: the same chart with the CRDs rendered into the manifest.
	var crds strings.Builder
	for _, c := range ch.CRDObjects() {
		fmt.Fprintf(&crds, "---\n# Source: trainyard/templates/crds.yaml\n%s\n", c.File.Data)
	}
	templated := encodedReleaseSize(t, rel(ch, manifest.String()+crds.String()))

	// And a chart without the CRDs at all, for scale.
	dir := t.TempDir()
	copyChartWithoutCRDs(t, dir)
	bare, err := loader.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	without := encodedReleaseSize(t, rel(bare, manifest.String()))

	pct := func(n int) string {
		return fmt.Sprintf("%d bytes (%.0f%% of 1 MiB)", n, 100*float64(n)/releaseSecretLimit)
	}
	t.Logf("release Secret, CRDs in crds/ (shipped):         %s", pct(shipped))
	t.Logf("release Secret, CRDs also rendered as templates: %s", pct(templated))
	t.Logf("release Secret, chart without CRDs:              %s", pct(without))
	if shipped > releaseSecretLimit*3/4 {
		t.Errorf("the release Secret would be %s; keep a quarter of the limit free for CRD growth", pct(shipped))
	}
}

func copyChartWithoutCRDs(t *testing.T, dst string) {
	t.Helper()
	err := filepath.WalkDir(chartDir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(chartDir, path)
		if d.IsDir() {
			if rel == "crds" {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}
