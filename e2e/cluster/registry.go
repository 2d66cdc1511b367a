package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// Registry names the binary of [RegistrySource].
const Registry = "registry"

// RegistrySource is distribution's OCI registry (the CNCF Distribution
// project's) with filesystem storage only, built from
// hack/kube-bins/registry/cmd/registry, a main of our own around
// distribution's registry package: upstream's command also links the S3, GCS
// and Azure drivers, which take a cold build from about 3.7 to 6.5
// CPU-minutes. A real node's containerd pulls the images of package
// e2e/images from it through registry mirrors, so pods name them as
// upstream's runtimes do (docker.io/..., ghcr.io/..., registry.k8s.io/...).
// It is not part of [Sources]: build it with [BuildSources] (or append it to
// what a cluster with a real node builds), configure it with
// [WriteRegistryConfig] and run
//
//	<Binaries.Path(Registry)> serve <config file>
//
// with [RegistryEnv] added to its environment; it is ready once
// [RegistryConfig.HealthURL] answers 200.
var RegistrySource = Source{
	Name: "registry", Module: "github.com/distribution/distribution/v3", Version: "v3.1.2",
	Binaries: map[string]string{Registry: "github.com/trainyard/trainyard/hack/kube-bins/registry/cmd/registry"},
}

// RegistryEnv is added to the registry's environment: no OpenTelemetry
// exporter, which by default sends traces to an OTLP collector on localhost
// that the cluster does not run and logs every failure to.
var RegistryEnv = []string{"OTEL_TRACES_EXPORTER=none"}

// RegistryConfig is what [WriteRegistryConfig] writes.
type RegistryConfig struct {
	// Addr is where the registry serves plain HTTP (no TLS: containerd is
	// told the mirror is http://), e.g. "127.0.0.1:5000". Required.
	Addr string
	// RootDir is the filesystem storage root; created if missing. Required.
	RootDir string
}

// HealthURL is a URL the registry answers 200 once it serves, and 503 while
// its storage fails the health check: the API's version check, /v2/, with no
// authentication configured.
func (c RegistryConfig) HealthURL() string { return "http://" + c.Addr + "/v2/" }

// WriteRegistryConfig writes the registry's configuration file to path (mode
// 0644): plain HTTP on cfg.Addr, no authentication, filesystem storage under
// cfg.RootDir with deletes enabled, a storage health check every 10 s (3
// failures turn /v2/ into 503), no upload purging (a cluster lives for
// minutes), info-level text logs with the access log. It fails on an empty
// field or a write error.
func WriteRegistryConfig(path string, cfg RegistryConfig) error {
	if cfg.Addr == "" || cfg.RootDir == "" {
		return fmt.Errorf("registry config: Addr and RootDir are required, got %+v", cfg)
	}
	root, err := filepath.Abs(cfg.RootDir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return fmt.Errorf("registry storage: %w", err)
	}
	// JSON strings are YAML strings, so strconv.Quote keeps any path valid.
	yaml := `version: 0.1
log:
  level: info
  formatter: text
storage:
  filesystem:
    rootdirectory: ` + strconv.Quote(root) + `
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: ` + strconv.Quote(cfg.Addr) + `
health:
  storagedriver:
    enabled: true
    interval: 10s
    threshold: 3
`
	return os.WriteFile(path, []byte(yaml), 0o644)
}
