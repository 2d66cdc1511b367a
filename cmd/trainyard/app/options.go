// Package app builds and runs the Trainyard controller: options and configuration,
// clients, informers, the six-stage pipeline, leader election, and the metrics and
// health endpoints.
package app

import (
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	configv1alpha1 "github.com/trainyard/trainyard/pkg/apis/config/v1alpha1"
	"github.com/trainyard/trainyard/pkg/lease"
	"github.com/trainyard/trainyard/pkg/progress"
	"github.com/trainyard/trainyard/pkg/stages"
	"github.com/trainyard/trainyard/pkg/trainjob"
)

// Options are the command-line flags. Flags that the operator sets override the same
// setting in the --config file; unset flags leave the file's (or the default) value.
type Options struct {
	ConfigFile              string
	Kubeconfig              string
	MetricsBindAddress      string
	MetricsSecure           bool
	MetricsAuth             bool
	HealthProbeBindAddress  string
	LeaderElect             bool
	LeaderElectNamespace    string
	KubeAPIQPS              float32
	KubeAPIBurst            int32
	StageWorkers            map[string]string
	WebhookBindAddress      string
	WebhookRegisterURL      string
	StatusServerBindAddress string
	WatchNamespaces         []string
	ShutdownDelay           time.Duration
	LogFormat               string
	Verbosity               int
	Profiling               bool
}

// NewOptions returns Options holding the defaults shown in --help.
func NewOptions() *Options {
	return &Options{
		MetricsBindAddress:      configv1alpha1.DefaultMetricsBindAddress,
		MetricsSecure:           true,
		MetricsAuth:             true,
		HealthProbeBindAddress:  configv1alpha1.DefaultHealthProbeBindAddress,
		KubeAPIQPS:              configv1alpha1.DefaultClientQPS,
		KubeAPIBurst:            configv1alpha1.DefaultClientBurst,
		WebhookBindAddress:      configv1alpha1.DefaultWebhookBindAddress,
		StatusServerBindAddress: configv1alpha1.DefaultStatusServerBindAddress,
		LogFormat:               "json",
	}
}

// AddFlags registers the flags, named as operators know them from other controllers.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.ConfigFile, "config", o.ConfigFile, "Path to a config.trainyard.dev/v1alpha1 Configuration file. Flags given explicitly override it.")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Path to a kubeconfig. Empty means in-cluster configuration, or $KUBECONFIG.")
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", o.MetricsBindAddress, `Address of the Prometheus /metrics endpoint (HTTPS unless --metrics-secure=false); "0" disables it.`)
	fs.BoolVar(&o.MetricsSecure, "metrics-secure", o.MetricsSecure, "Serve /metrics over HTTPS (the controller's serving certificate, or a self-signed one when neither admission nor the progress server runs). false serves plain HTTP and, unless --metrics-auth is given, turns authentication off.")
	fs.BoolVar(&o.MetricsAuth, "metrics-auth", o.MetricsAuth, "Require a bearer token on /metrics (and /debug/pprof) that a TokenReview authenticates and a SubjectAccessReview authorizes for get on the URL path. Needs --metrics-secure. Defaults to the value of --metrics-secure.")
	fs.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", o.HealthProbeBindAddress, "Address of the /healthz and /readyz endpoints.")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "Elect a leader through a Lease before running the pipeline; required with more than one replica.")
	fs.StringVar(&o.LeaderElectNamespace, "leader-elect-namespace", o.LeaderElectNamespace, "Namespace of the leader election Lease. Defaults to the pod's namespace.")
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS, "Sustained queries per second to the Kubernetes API.")
	fs.Int32Var(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, "Burst of queries to the Kubernetes API.")
	fs.StringToStringVar(&o.StageWorkers, "stage-workers", o.StageWorkers, "Workers per stage, e.g. resolve_runtime=4,status=8 (stages: "+strings.Join(stages.Names(), ", ")+").")
	fs.StringVar(&o.WebhookBindAddress, "webhook-bind-address", o.WebhookBindAddress, `Address of the HTTPS admission server (validating and defaulting webhooks), served by every replica; "0" disables it.`)
	fs.StringVar(&o.StatusServerBindAddress, "status-server-bind-address", o.StatusServerBindAddress, `Address of the HTTPS training-progress server (trainer pods report status.trainerStatus; feature gate TrainJobStatus), served by every replica; its port is the port of the URL injected into trainer containers; "0" disables it.`)
	fs.StringVar(&o.WebhookRegisterURL, "webhook-register-url", o.WebhookRegisterURL, "For a controller outside the cluster: create the webhook configurations with this base URL (e.g. https://127.0.0.1:9443) and a self-managed CA. Empty leaves them to the Helm chart.")
	fs.StringSliceVar(&o.WatchNamespaces, "watch-namespaces", o.WatchNamespaces, "Namespaces to watch TrainJobs (and every namespaced object the controller reads) in, comma-separated; empty means every namespace.")
	fs.DurationVar(&o.ShutdownDelay, "shutdown-delay", o.ShutdownDelay, "How long to keep serving admission and progress reports after SIGTERM, with /readyz failing, so that a Service's clients stop using this replica first (shutdownDelay).")
	fs.StringVar(&o.LogFormat, "log-format", o.LogFormat, `Log format: "json" or "text".`)
	fs.IntVarP(&o.Verbosity, "v", "v", o.Verbosity, "Log verbosity: 0 normal, 2 decisions, 4 per-sync detail.")
	fs.BoolVar(&o.Profiling, "profiling", o.Profiling, "Serve Go's /debug/pprof profiles on the metrics endpoint. Off by default: profiles expose internals and cost CPU while taken.")
}

// Config loads the --config file (strictly: unknown fields are errors), applies
// defaults, then the flags the operator set. It returns an error naming the file or the
// flag at fault.
func (o *Options) Config(fs *pflag.FlagSet) (*configv1alpha1.Configuration, error) {
	scheme := runtime.NewScheme()
	if err := configv1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	cfg, authInFile, err := o.readConfigFile(scheme)
	if err != nil {
		return nil, err
	}
	scheme.Default(cfg)
	o.applyFlags(fs, cfg, authInFile)
	if err := o.applyStageWorkers(cfg); err != nil {
		return nil, err
	}
	return cfg, validate(cfg)
}

// readConfigFile returns the Configuration of the --config file, decoded strictly with
// scheme (unknown fields are errors) and its defaults applied, or an empty one without
// --config; and whether the file itself sets metrics.auth.enabled (the decoded value
// may be its default). Errors name the file.
func (o *Options) readConfigFile(scheme *runtime.Scheme) (*configv1alpha1.Configuration, bool, error) {
	cfg := &configv1alpha1.Configuration{}
	if o.ConfigFile == "" {
		return cfg, false, nil
	}
	data, err := os.ReadFile(o.ConfigFile)
	if err != nil {
		return nil, false, fmt.Errorf("reading --config: %w", err)
	}
	codecs := serializer.NewCodecFactory(scheme, serializer.EnableStrict)
	if err := runtime.DecodeInto(codecs.UniversalDecoder(configv1alpha1.SchemeGroupVersion), data, cfg); err != nil {
		return nil, false, fmt.Errorf("decoding --config %s: %w", o.ConfigFile, err)
	}
	// The decoder applies the defaults: ask the raw file whether it sets the field.
	var raw struct {
		Metrics struct {
			Auth struct {
				Enabled *bool `json:"enabled"`
			} `json:"auth"`
		} `json:"metrics"`
	}
	authInFile := yaml.Unmarshal(data, &raw) == nil && raw.Metrics.Auth.Enabled != nil
	return cfg, authInFile, nil
}

// applyFlags sets in cfg the value of every flag of fs the operator set, except
// --stage-workers (applyStageWorkers). --metrics-secure alone also sets
// metrics.auth.enabled, unless the file (authInFile) or --metrics-auth sets it.
func (o *Options) applyFlags(fs *pflag.FlagSet, cfg *configv1alpha1.Configuration, authInFile bool) {
	set := func(name string) bool { return fs.Changed(name) }
	if set("kubeconfig") {
		cfg.ClientConnection.Kubeconfig = o.Kubeconfig
	}
	if set("metrics-bind-address") {
		cfg.Metrics.BindAddress = o.MetricsBindAddress
	}
	if set("metrics-secure") {
		cfg.Metrics.SecureServing = ptr.To(o.MetricsSecure)
		if !set("metrics-auth") && !authInFile {
			// auth.enabled defaults to secureServing: --metrics-secure=false alone asks for plain HTTP.
			cfg.Metrics.Auth.Enabled = ptr.To(o.MetricsSecure)
		}
	}
	if set("metrics-auth") {
		cfg.Metrics.Auth.Enabled = ptr.To(o.MetricsAuth)
	}
	if set("health-probe-bind-address") {
		cfg.Health.HealthProbeBindAddress = o.HealthProbeBindAddress
	}
	if set("leader-elect") {
		cfg.LeaderElection.LeaderElect = ptr.To(o.LeaderElect)
	}
	if set("leader-elect-namespace") {
		cfg.LeaderElection.ResourceNamespace = o.LeaderElectNamespace
	}
	if set("kube-api-qps") {
		cfg.ClientConnection.QPS = o.KubeAPIQPS
	}
	if set("kube-api-burst") {
		cfg.ClientConnection.Burst = o.KubeAPIBurst
	}
	if set("webhook-bind-address") {
		cfg.Webhook.BindAddress = o.WebhookBindAddress
	}
	if set("status-server-bind-address") {
		cfg.StatusServer.BindAddress = o.StatusServerBindAddress
	}
	if set("webhook-register-url") {
		cfg.Webhook.RegisterURL = o.WebhookRegisterURL
	}
	if set("watch-namespaces") {
		cfg.WatchNamespaces = o.WatchNamespaces
	}
	if set("shutdown-delay") {
		cfg.ShutdownDelay = &metav1.Duration{Duration: o.ShutdownDelay}
	}
}

// applyStageWorkers sets the workers of each stage --stage-workers names. It returns an
// error naming an unknown stage or a count that is not a 32-bit integer.
func (o *Options) applyStageWorkers(cfg *configv1alpha1.Configuration) error {
	for name, value := range o.StageWorkers {
		stage, ok := stages.Lookup(name)
		if !ok {
			return fmt.Errorf("--stage-workers: unknown stage %q (stages: %s)", name, strings.Join(stages.Names(), ", "))
		}
		n, err := strconv.ParseInt(value, 10, 32)
		if err != nil {
			return fmt.Errorf("--stage-workers %s=%q: not a number", name, value)
		}
		stage.Config(&cfg.Stages).Workers = ptr.To(int32(n))
	}
	return nil
}

// validateStatusServer checks statusServer (whether or not feature gate TrainJobStatus is
// on, so that turning the gate on never reveals a bad setting).
func validateStatusServer(cfg *configv1alpha1.Configuration) []string {
	var problems []string
	ss := cfg.StatusServer
	if ss.BindAddress != "0" {
		port, err := progress.Port(ss.BindAddress)
		if err != nil {
			problems = append(problems, fmt.Sprintf(`statusServer.bindAddress %v (or "0" to turn the progress server off)`, err))
		}
		// Same port as another endpoint: the second listener would fail at start-up.
		for _, other := range []struct{ field, addr string }{
			{"webhook.bindAddress", cfg.Webhook.BindAddress},
			{"metrics.bindAddress", cfg.Metrics.BindAddress},
			{"health.healthProbeBindAddress", cfg.Health.HealthProbeBindAddress},
		} {
			if p, err := progress.Port(other.addr); err == nil && p == port && port != 0 {
				problems = append(problems, fmt.Sprintf("statusServer.bindAddress %q and %s %q use the same port", ss.BindAddress, other.field, other.addr))
			}
		}
	}
	if ss.WritePeriod.Duration < time.Second {
		problems = append(problems, fmt.Sprintf("statusServer.writePeriod %s must be at least 1s", ss.WritePeriod.Duration))
	}
	if *ss.QPS <= 0 || *ss.Burst < 1 || *ss.NamespaceQPS <= 0 || *ss.NamespaceBurst < 1 {
		problems = append(problems, "statusServer.qps and statusServer.namespaceQPS must be positive, statusServer.burst and statusServer.namespaceBurst at least 1")
	}
	if *ss.MaxReportsInFlight < 1 || *ss.MaxKeepAliveConnections < 1 || *ss.MaxConnections <= *ss.MaxKeepAliveConnections {
		problems = append(problems, fmt.Sprintf("statusServer.maxReportsInFlight (%d) and statusServer.maxKeepAliveConnections (%d) must be at least 1, "+
			"and statusServer.maxConnections (%d) above maxKeepAliveConnections", *ss.MaxReportsInFlight, *ss.MaxKeepAliveConnections, *ss.MaxConnections))
	}
	if *ss.MaxPendingReportBytes < configv1alpha1.MinStatusMaxPendingReportBytes {
		problems = append(problems, fmt.Sprintf("statusServer.maxPendingReportBytes (%d) must be at least %d (1 MiB): a smaller bound could refuse every large report",
			*ss.MaxPendingReportBytes, configv1alpha1.MinStatusMaxPendingReportBytes))
	}
	return problems
}

// validateWatchNamespaces checks that each watched namespace is a namespace name
// (a DNS-1123 label, as the API server requires of Namespaces) and appears once.
func validateWatchNamespaces(watched []string) []string {
	var problems []string
	seen := map[string]bool{}
	for i, ns := range watched {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			problems = append(problems, fmt.Sprintf("watchNamespaces[%d] (--watch-namespaces) %q must be a namespace name: %s", i, ns, strings.Join(errs, ", ")))
		}
		if trainjob.IsSystemNamespace(ns) {
			problems = append(problems, fmt.Sprintf("watchNamespaces[%d] (--watch-namespaces) %q is a system namespace (%s): Trainyard builds no TrainJob there; remove it",
				i, ns, strings.Join(trainjob.SystemNamespaces, ", ")))
		}
		if seen[ns] {
			problems = append(problems, fmt.Sprintf("watchNamespaces[%d] (--watch-namespaces) %q is listed twice", i, ns))
		}
		seen[ns] = true
	}
	return problems
}

// validate rejects settings the controller cannot run with, naming the field.
func validate(cfg *configv1alpha1.Configuration) error {
	var problems []string
	for _, stage := range stages.All() {
		if w := stage.Config(&cfg.Stages).Workers; w == nil || *w < 1 {
			problems = append(problems, fmt.Sprintf("stages.%s.workers (--stage-workers %s=N) must be at least 1", stage.ConfigField(), stage.Name))
		}
	}
	if cfg.ClientConnection.QPS < 0 || cfg.ClientConnection.Burst < 0 {
		problems = append(problems, "clientConnection.qps and clientConnection.burst must not be negative")
	}
	if rl := cfg.RateLimit; rl.BaseDelay.Duration <= 0 || rl.MaxDelay.Duration < rl.BaseDelay.Duration {
		problems = append(problems, "rateLimit.baseDelay must be positive and not above rateLimit.maxDelay")
	}
	if rl := cfg.RateLimit; *rl.RefusalThreshold < 1 || rl.RefusalDelay.Duration <= 0 {
		problems = append(problems, "rateLimit.refusalThreshold must be at least 1 and rateLimit.refusalDelay positive")
	}
	if c := cfg.Webhook.Certificates; c.ServingValidity.Duration <= 0 || c.CAValidity.Duration < c.ServingValidity.Duration {
		problems = append(problems, "webhook.certificates.servingValidity must be positive and not above webhook.certificates.caValidity")
	}
	if d := cfg.Webhook.Certificates.CAPublishDelay.Duration; d <= 0 {
		problems = append(problems, fmt.Sprintf("webhook.certificates.caPublishDelay %v must be positive: it is the time the servers' clients "+
			"(API servers, the kubelets refreshing trainer pods' ca.crt) get to see a new CA before a certificate it signed is served; "+
			"leave it unset for the default %v", d, configv1alpha1.DefaultCAPublishDelay))
	}
	switch wh := cfg.Webhook; {
	case wh.Certificates.Mode != configv1alpha1.CertificatesSelfManaged && wh.Certificates.Mode != configv1alpha1.CertificatesProvided:
		problems = append(problems, fmt.Sprintf("webhook.certificates.mode %q must be %q or %q", wh.Certificates.Mode, configv1alpha1.CertificatesSelfManaged, configv1alpha1.CertificatesProvided))
	case wh.RegisterURL != "" && wh.Certificates.Mode != configv1alpha1.CertificatesSelfManaged:
		problems = append(problems, "webhook.registerURL (--webhook-register-url) needs webhook.certificates.mode SelfManaged: the registered configurations carry the CA the controller manages")
	case wh.RegisterURL != "":
		if u, err := url.Parse(wh.RegisterURL); err != nil || u.Scheme != "https" || u.Host == "" || (u.Path != "" && u.Path != "/") {
			problems = append(problems, fmt.Sprintf("webhook.registerURL %q (--webhook-register-url) must be https://host:port, with no path", wh.RegisterURL))
		}
	}
	problems = append(problems, lease.Validate(cfg.LeaderElection)...)
	if c := cfg.Consistency; c.SweepPeriod.Duration < 0 || c.LagThreshold.Duration <= 0 {
		problems = append(problems, `consistency.sweepPeriod must not be negative ("0s" turns the sweep off) and consistency.lagThreshold must be positive`)
	}
	problems = append(problems, validateStatusServer(cfg)...)
	if d := cfg.ShutdownDelay.Duration; d < 0 || d > time.Minute {
		problems = append(problems, fmt.Sprintf("shutdownDelay %s must be between 0s and 1m: a replica reports not ready and serves on for that long after SIGTERM", d))
	}
	if errs := validation.IsDNS1123Subdomain(cfg.SideObjects.SecretNameKeySecret); len(errs) > 0 {
		problems = append(problems, fmt.Sprintf("sideObjects.secretNameKeySecret %q must be a Secret name: %s", cfg.SideObjects.SecretNameKeySecret, strings.Join(errs, ", ")))
	}
	problems = append(problems, validateWatchNamespaces(cfg.WatchNamespaces)...)
	if m := cfg.Metrics; m.BindAddress != "0" && !ptrBool(m.SecureServing) && ptrBool(m.Auth.Enabled) {
		problems = append(problems, "metrics.auth.enabled (--metrics-auth) needs metrics.secureServing (--metrics-secure): bearer tokens must not be sent over plain HTTP; set metrics.auth.enabled to false for a plain-HTTP endpoint")
	}
	if len(problems) > 0 {
		return fmt.Errorf("invalid configuration: %s", strings.Join(problems, "; "))
	}
	return nil
}
