package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	componentbaseconfigv1alpha1 "k8s.io/component-base/config/v1alpha1"
	"k8s.io/utils/ptr"

	configv1alpha1 "github.com/trainyard/trainyard/pkg/apis/config/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages"
)

// defaults is the configuration with no file and no flags.
func defaults() *configv1alpha1.Configuration {
	return &configv1alpha1.Configuration{
		ClientConnection: componentbaseconfigv1alpha1.ClientConnectionConfiguration{
			QPS:                500,
			Burst:              1000,
			ContentType:        "application/vnd.kubernetes.protobuf",
			AcceptContentTypes: "application/vnd.kubernetes.protobuf,application/json",
		},
		LeaderElection: componentbaseconfigv1alpha1.LeaderElectionConfiguration{
			LeaderElect:   ptr.To(false),
			ResourceLock:  "leases",
			ResourceName:  "trainyard-controller",
			LeaseDuration: metav1.Duration{Duration: 15 * time.Second},
			RenewDeadline: metav1.Duration{Duration: 10 * time.Second},
			RetryPeriod:   metav1.Duration{Duration: 2 * time.Second},
		},
		Metrics: configv1alpha1.MetricsConfiguration{BindAddress: ":8080", SecureServing: ptr.To(true),
			Auth: configv1alpha1.MetricsAuthConfiguration{Enabled: ptr.To(true)}},
		Health: configv1alpha1.HealthConfiguration{HealthProbeBindAddress: ":8081"},
		Stages: configv1alpha1.StagesConfiguration{
			ResolveRuntime: configv1alpha1.StageConfiguration{Workers: ptr.To[int32](4)},
			MergePatches:   configv1alpha1.StageConfiguration{Workers: ptr.To[int32](4)},
			MLPolicy:       configv1alpha1.StageConfiguration{Workers: ptr.To[int32](4)},
			Gang:           configv1alpha1.StageConfiguration{Workers: ptr.To[int32](4)},
			DRAClaims:      configv1alpha1.StageConfiguration{Workers: ptr.To[int32](4)},
			Status:         configv1alpha1.StageConfiguration{Workers: ptr.To[int32](32)},
		},
		RateLimit: configv1alpha1.RateLimitConfiguration{
			BaseDelay: &metav1.Duration{Duration: 5 * time.Millisecond},
			MaxDelay:  &metav1.Duration{Duration: 5 * time.Minute},
			QPS:       ptr.To[float32](10),
			Burst:     ptr.To[int32](100),

			RefusalThreshold: ptr.To[int32](5),
			RefusalDelay:     &metav1.Duration{Duration: 10 * time.Minute},
		},
		Webhook: configv1alpha1.WebhookConfiguration{
			BindAddress:                        ":9443",
			ServiceName:                        "trainyard-webhook",
			ValidatingWebhookConfigurationName: "trainyard-validator",
			MutatingWebhookConfigurationName:   "trainyard-defaulter",
			Certificates: configv1alpha1.WebhookCertificates{
				Mode: "SelfManaged", SecretName: "trainyard-webhook-certs", CertDir: "/tmp/k8s-webhook-server/serving-certs",
				CAValidity: &metav1.Duration{Duration: 26280 * time.Hour}, ServingValidity: &metav1.Duration{Duration: 2160 * time.Hour},
				CAPublishDelay: &metav1.Duration{Duration: 5 * time.Minute},
			},
		},
		Consistency: configv1alpha1.ConsistencyConfiguration{
			SweepPeriod:  &metav1.Duration{Duration: time.Minute},
			LagThreshold: &metav1.Duration{Duration: 5 * time.Minute},
		},
		StatusServer: configv1alpha1.StatusServerConfiguration{
			BindAddress:    ":10443",
			WritePeriod:    &metav1.Duration{Duration: 10 * time.Second},
			QPS:            ptr.To[float32](50),
			Burst:          ptr.To[int32](100),
			NamespaceQPS:   ptr.To[float32](10),
			NamespaceBurst: ptr.To[int32](20),

			MaxConnections:          ptr.To[int32](5120),
			MaxKeepAliveConnections: ptr.To[int32](4096),
			MaxReportsInFlight:      ptr.To[int32](256),
			MaxPendingReportBytes:   ptr.To[int64](32 << 20),
		},
		SideObjects:   configv1alpha1.SideObjectsConfiguration{SecretNameKeySecret: "trainyard-secret-name-key"},
		ShutdownDelay: &metav1.Duration{},
	}
}

// fileConfig is a configuration file that sets a bit of everything.
const fileConfig = `apiVersion: config.trainyard.dev/v1alpha1
kind: Configuration
clientConnection:
  qps: 200
  burst: 400
leaderElection:
  leaderElect: true
  resourceNamespace: trainyard-system
metrics:
  bindAddress: ":9090"
health:
  healthProbeBindAddress: ":9091"
stages:
  status:
    workers: 32
  mlPolicy:
    workers: 2
rateLimit:
  baseDelay: 10ms
  qps: 50
consistency:
  sweepPeriod: 0s
statusServer:
  bindAddress: ":11443"
  writePeriod: 30s
  namespaceQPS: 2
featureGates:
  Foo: true
  TrainJobStatus: false
`

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// config parses args as the command line and returns Options.Config's result.
func config(t *testing.T, args ...string) (*configv1alpha1.Configuration, error) {
	t.Helper()
	opts := NewOptions()
	fs := pflag.NewFlagSet("trainyard", pflag.ContinueOnError)
	opts.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parsing %v: %v", args, err)
	}
	return opts.Config(fs)
}

func TestConfig(t *testing.T) {
	file := writeFile(t, fileConfig)
	fromFile := func() *configv1alpha1.Configuration {
		c := defaults()
		c.TypeMeta = metav1.TypeMeta{APIVersion: "config.trainyard.dev/v1alpha1", Kind: "Configuration"}
		c.ClientConnection.QPS, c.ClientConnection.Burst = 200, 400
		c.LeaderElection.LeaderElect = ptr.To(true)
		c.LeaderElection.ResourceNamespace = "trainyard-system"
		c.Metrics.BindAddress = ":9090"
		c.Health.HealthProbeBindAddress = ":9091"
		c.Stages.Status.Workers = ptr.To[int32](32)
		c.Stages.MLPolicy.Workers = ptr.To[int32](2)
		c.RateLimit.BaseDelay = &metav1.Duration{Duration: 10 * time.Millisecond}
		c.RateLimit.QPS = ptr.To[float32](50)
		c.Consistency.SweepPeriod = &metav1.Duration{}
		c.StatusServer.BindAddress = ":11443"
		c.StatusServer.WritePeriod = &metav1.Duration{Duration: 30 * time.Second}
		c.StatusServer.NamespaceQPS = ptr.To[float32](2)
		c.FeatureGates = map[string]bool{"Foo": true, "TrainJobStatus": false}
		return c
	}

	cases := map[string]struct {
		args []string
		want func() *configv1alpha1.Configuration
	}{
		"defaults": {
			want: defaults,
		},
		"flags without a file": {
			args: []string{"--kubeconfig=/kc", "--metrics-bind-address=0", "--health-probe-bind-address=:1",
				"--leader-elect", "--leader-elect-namespace=ns", "--kube-api-qps=7", "--kube-api-burst=9",
				"--stage-workers=resolve_runtime=1,merge_patches=2,ml_policy=3,gang_scheduling=5,dra_claims=6,status=7"},
			want: func() *configv1alpha1.Configuration {
				c := defaults()
				c.ClientConnection.Kubeconfig = "/kc"
				c.Metrics.BindAddress = "0"
				c.Health.HealthProbeBindAddress = ":1"
				c.LeaderElection.LeaderElect = ptr.To(true)
				c.LeaderElection.ResourceNamespace = "ns"
				c.ClientConnection.QPS, c.ClientConnection.Burst = 7, 9
				c.Stages.ResolveRuntime.Workers = ptr.To[int32](1)
				c.Stages.MergePatches.Workers = ptr.To[int32](2)
				c.Stages.MLPolicy.Workers = ptr.To[int32](3)
				c.Stages.Gang.Workers = ptr.To[int32](5)
				c.Stages.DRAClaims.Workers = ptr.To[int32](6)
				c.Stages.Status.Workers = ptr.To[int32](7)
				return c
			},
		},
		"file overrides defaults": {
			args: []string{"--config=" + file},
			want: fromFile,
		},
		"flags given explicitly override the file": {
			args: []string{"--config=" + file, "--kube-api-qps=5", "--metrics-bind-address=:7070",
				"--leader-elect=false", "--stage-workers=status=3"},
			want: func() *configv1alpha1.Configuration {
				c := fromFile()
				c.ClientConnection.QPS = 5
				c.Metrics.BindAddress = ":7070"
				c.LeaderElection.LeaderElect = ptr.To(false)
				c.Stages.Status.Workers = ptr.To[int32](3)
				return c
			},
		},
		"flags left at their default do not override the file": {
			// Same values as the defaults, but not given: the file wins.
			args: []string{"--config=" + file, "--log-format=text"},
			want: fromFile,
		},
		"watched namespaces from the file": {
			args: []string{"--config=" + writeFile(t, "apiVersion: config.trainyard.dev/v1alpha1\nkind: Configuration\nwatchNamespaces: [team-a, team-b]\n")},
			want: func() *configv1alpha1.Configuration {
				c := defaults()
				c.Kind, c.APIVersion = "Configuration", "config.trainyard.dev/v1alpha1"
				c.WatchNamespaces = []string{"team-a", "team-b"}
				return c
			},
		},
		"--watch-namespaces overrides the file": {
			args: []string{"--config=" + writeFile(t, "apiVersion: config.trainyard.dev/v1alpha1\nkind: Configuration\nwatchNamespaces: [team-a]\n"), "--watch-namespaces=team-c,team-d"},
			want: func() *configv1alpha1.Configuration {
				c := defaults()
				c.Kind, c.APIVersion = "Configuration", "config.trainyard.dev/v1alpha1"
				c.WatchNamespaces = []string{"team-c", "team-d"}
				return c
			},
		},
		"--shutdown-delay overrides the file": {
			args: []string{"--config=" + writeFile(t, "apiVersion: config.trainyard.dev/v1alpha1\nkind: Configuration\nshutdownDelay: 5s\n"), "--shutdown-delay=7s"},
			want: func() *configv1alpha1.Configuration {
				c := defaults()
				c.Kind, c.APIVersion = "Configuration", "config.trainyard.dev/v1alpha1"
				c.ShutdownDelay = &metav1.Duration{Duration: 7 * time.Second}
				return c
			},
		},
		"--metrics-secure=false alone asks for plain HTTP without auth": {
			args: []string{"--metrics-secure=false"},
			want: func() *configv1alpha1.Configuration {
				c := defaults()
				c.Metrics.SecureServing, c.Metrics.Auth.Enabled = ptr.To(false), ptr.To(false)
				return c
			},
		},
		"--metrics-secure=false with a file that leaves metrics alone": {
			// The decoder defaults auth on from the file; the file did not ask for it.
			args: []string{"--config=" + writeFile(t, "apiVersion: config.trainyard.dev/v1alpha1\nkind: Configuration\n"), "--metrics-secure=false"},
			want: func() *configv1alpha1.Configuration {
				c := defaults()
				c.Kind, c.APIVersion = "Configuration", "config.trainyard.dev/v1alpha1"
				c.Metrics.SecureServing, c.Metrics.Auth.Enabled = ptr.To(false), ptr.To(false)
				return c
			},
		},
		"plain HTTP from the file defaults auth off": {
			args: []string{"--config=" + writeFile(t, "apiVersion: config.trainyard.dev/v1alpha1\nkind: Configuration\nmetrics:\n  secureServing: false\n")},
			want: func() *configv1alpha1.Configuration {
				c := defaults()
				c.TypeMeta = metav1.TypeMeta{APIVersion: "config.trainyard.dev/v1alpha1", Kind: "Configuration"}
				c.Metrics.SecureServing, c.Metrics.Auth.Enabled = ptr.To(false), ptr.To(false)
				return c
			},
		},
		"HTTPS without auth": {
			args: []string{"--metrics-auth=false"},
			want: func() *configv1alpha1.Configuration {
				c := defaults()
				c.Metrics.Auth.Enabled = ptr.To(false)
				return c
			},
		},
		"flag equal to the default, given explicitly, still overrides the file": {
			args: []string{"--config=" + file, "--kube-api-qps=50", "--health-probe-bind-address=:8081"},
			want: func() *configv1alpha1.Configuration {
				c := fromFile()
				c.ClientConnection.QPS = 50
				c.Health.HealthProbeBindAddress = ":8081"
				return c
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := config(t, tc.args...)
			if err != nil {
				t.Fatalf("Config: %v", err)
			}
			if diff := cmp.Diff(tc.want(), got); diff != "" {
				t.Errorf("Config (-want +got):\n%s", diff)
			}
		})
	}
}

func TestConfigErrors(t *testing.T) {
	unknownField := writeFile(t, "apiVersion: config.trainyard.dev/v1alpha1\nkind: Configuration\nmetrics:\n  bindAdress: \":9090\"\n")
	zeroWorkers := writeFile(t, "apiVersion: config.trainyard.dev/v1alpha1\nkind: Configuration\nstages:\n  gang:\n    workers: 0\n")
	badRateLimit := writeFile(t, "apiVersion: config.trainyard.dev/v1alpha1\nkind: Configuration\nrateLimit:\n  baseDelay: 1m\n  maxDelay: 1s\n")
	badSweep := writeFile(t, "apiVersion: config.trainyard.dev/v1alpha1\nkind: Configuration\nconsistency:\n  sweepPeriod: -1m\n")
	wrongKind := writeFile(t, "apiVersion: config.trainyard.dev/v1alpha1\nkind: Settings\n")
	missing := filepath.Join(t.TempDir(), "absent.yaml")

	cases := map[string]struct {
		args []string
		// wantIn are substrings the error must contain: what is at fault and where.
		wantIn []string
	}{
		"unknown field in the file": {
			args:   []string{"--config=" + unknownField},
			wantIn: []string{"--config", unknownField, "bindAdress"},
		},
		"unknown kind in the file": {
			args:   []string{"--config=" + wrongKind},
			wantIn: []string{"--config", wrongKind},
		},
		"missing file": {
			args:   []string{"--config=" + missing},
			wantIn: []string{"--config", missing},
		},
		"unknown stage": {
			args:   []string{"--stage-workers=resolve=2"},
			wantIn: []string{"--stage-workers", `"resolve"`, "resolve_runtime"},
		},
		"not a number": {
			args:   []string{"--stage-workers=status=many"},
			wantIn: []string{"--stage-workers", "status", `"many"`, "not a number"},
		},
		"a number followed by junk": {
			args:   []string{"--stage-workers=status=4x"},
			wantIn: []string{"--stage-workers", "status", `"4x"`, "not a number"},
		},
		"a fraction": {
			args:   []string{"--stage-workers=status=1.5"},
			wantIn: []string{"--stage-workers", "status", `"1.5"`, "not a number"},
		},
		"zero workers from the flag": {
			args:   []string{"--stage-workers=ml_policy=0"},
			wantIn: []string{"stages.mlPolicy.workers", "--stage-workers ml_policy=N", "must be at least 1"},
		},
		"negative workers from the flag": {
			args:   []string{"--stage-workers=status=-1"},
			wantIn: []string{"stages.status.workers", "--stage-workers status=N", "must be at least 1"},
		},
		"zero workers from the file": {
			args:   []string{"--config=" + zeroWorkers},
			wantIn: []string{"stages.gang.workers", "must be at least 1"},
		},
		"negative QPS": {
			args:   []string{"--kube-api-qps=-1"},
			wantIn: []string{"clientConnection.qps"},
		},
		"serving certificate outliving its CA": {
			args:   []string{"--config=" + writeFile(t, "apiVersion: config.trainyard.dev/v1alpha1\nkind: Configuration\nwebhook:\n  certificates:\n    caValidity: 1h\n    servingValidity: 2h\n")},
			wantIn: []string{"webhook.certificates.servingValidity", "caValidity"},
		},
		"a CA served before it is published": {
			args:   []string{"--config=" + writeFile(t, "apiVersion: config.trainyard.dev/v1alpha1\nkind: Configuration\nwebhook:\n  certificates:\n    caPublishDelay: 0s\n")},
			wantIn: []string{"webhook.certificates.caPublishDelay 0s must be positive", "unset for the default 5m0s"},
		},
		"negative sweep period": {
			args:   []string{"--config=" + badSweep},
			wantIn: []string{"consistency.sweepPeriod"},
		},
		"lease renewal outlasting the lease (two leaders)": {
			args:   []string{"--config=" + writeFile(t, "apiVersion: config.trainyard.dev/v1alpha1\nkind: Configuration\nleaderElection:\n  leaderElect: true\n  leaseDuration: 15s\n  renewDeadline: 14s\n  retryPeriod: 2s\n")},
			wantIn: []string{"leaderElection.renewDeadline + retryPeriod", "leaseDuration (15s)"},
		},
		"lease duration in fractions of a second (the Lease records whole seconds)": {
			args:   []string{"--config=" + writeFile(t, "apiVersion: config.trainyard.dev/v1alpha1\nkind: Configuration\nleaderElection:\n  leaderElect: true\n  leaseDuration: 12500ms\n  renewDeadline: 10s\n  retryPeriod: 2s\n")},
			wantIn: []string{"leaderElection.leaseDuration (12.5s)", "whole number of seconds"},
		},
		"renew deadline within the retry jitter (client-go panics on it)": {
			args:   []string{"--config=" + writeFile(t, "apiVersion: config.trainyard.dev/v1alpha1\nkind: Configuration\nleaderElection:\n  leaderElect: true\n  leaseDuration: 15s\n  renewDeadline: 2s\n  retryPeriod: 2s\n")},
			wantIn: []string{"leaderElection.renewDeadline (2s)", "retryPeriod (2s)"},
		},
		"status server port that is not a number": {
			args:   []string{"--config=" + writeFile(t, "apiVersion: config.trainyard.dev/v1alpha1\nkind: Configuration\nstatusServer:\n  bindAddress: \":https\"\n")},
			wantIn: []string{"statusServer.bindAddress", `":https"`, "number"},
		},
		"status server without a port": {
			args:   []string{"--config=" + writeFile(t, "apiVersion: config.trainyard.dev/v1alpha1\nkind: Configuration\nstatusServer:\n  bindAddress: \"10443\"\n")},
			wantIn: []string{"statusServer.bindAddress", `"10443"`, `"0"`},
		},
		"status server on the webhook's port": {
			args:   []string{"--config=" + writeFile(t, "apiVersion: config.trainyard.dev/v1alpha1\nkind: Configuration\nstatusServer:\n  bindAddress: \"127.0.0.1:9443\"\n")},
			wantIn: []string{"statusServer.bindAddress", "webhook.bindAddress", "same port"},
		},
		"status server on the metrics port given by flag": {
			args:   []string{"--metrics-bind-address=:10443"},
			wantIn: []string{"statusServer.bindAddress", "metrics.bindAddress", "same port"},
		},
		"status write period below a second": {
			args:   []string{"--config=" + writeFile(t, "apiVersion: config.trainyard.dev/v1alpha1\nkind: Configuration\nstatusServer:\n  writePeriod: 100ms\n")},
			wantIn: []string{"statusServer.writePeriod", "at least 1s"},
		},
		"status write rate of zero": {
			args:   []string{"--config=" + writeFile(t, "apiVersion: config.trainyard.dev/v1alpha1\nkind: Configuration\nstatusServer:\n  namespaceBurst: 0\n")},
			wantIn: []string{"statusServer.namespaceBurst"},
		},
		"status server keeping as many connections open as it accepts": {
			args:   []string{"--config=" + writeFile(t, "apiVersion: config.trainyard.dev/v1alpha1\nkind: Configuration\nstatusServer:\n  maxConnections: 100\n  maxKeepAliveConnections: 100\n")},
			wantIn: []string{"statusServer.maxConnections (100)", "above maxKeepAliveConnections"},
		},
		"status server with no report in flight": {
			args:   []string{"--config=" + writeFile(t, "apiVersion: config.trainyard.dev/v1alpha1\nkind: Configuration\nstatusServer:\n  maxReportsInFlight: 0\n")},
			wantIn: []string{"statusServer.maxReportsInFlight (0)"},
		},
		"status server bounding pending reports below one MiB": {
			args:   []string{"--config=" + writeFile(t, "apiVersion: config.trainyard.dev/v1alpha1\nkind: Configuration\nstatusServer:\n  maxPendingReportBytes: 65536\n")},
			wantIn: []string{"statusServer.maxPendingReportBytes (65536)", "at least 1048576"},
		},
		"metrics auth over plain HTTP from flags": {
			args:   []string{"--metrics-secure=false", "--metrics-auth"},
			wantIn: []string{"metrics.auth.enabled", "--metrics-auth", "metrics.secureServing", "--metrics-secure", "plain HTTP"},
		},
		"metrics auth over plain HTTP from the file": {
			args:   []string{"--config=" + writeFile(t, "apiVersion: config.trainyard.dev/v1alpha1\nkind: Configuration\nmetrics:\n  auth:\n    enabled: true\n"), "--metrics-secure=false"},
			wantIn: []string{"metrics.auth.enabled", "metrics.secureServing"},
		},
		"a watched namespace that is not a namespace name": {
			args:   []string{"--watch-namespaces=team-a,Team_B"},
			wantIn: []string{"watchNamespaces[1]", "--watch-namespaces", `"Team_B"`, "namespace name"},
		},
		"a negative shutdown delay": {
			args:   []string{"--config=" + writeFile(t, "apiVersion: config.trainyard.dev/v1alpha1\nkind: Configuration\nshutdownDelay: -1s\n")},
			wantIn: []string{"shutdownDelay", "-1s", "between 0s and 1m"},
		},
		"a watched namespace listed twice": {
			args:   []string{"--config=" + writeFile(t, "apiVersion: config.trainyard.dev/v1alpha1\nkind: Configuration\nwatchNamespaces: [team-a, team-b, team-a]\n")},
			wantIn: []string{"watchNamespaces[2]", `"team-a"`, "listed twice"},
		},
		"watching a system namespace": {
			args:   []string{"--watch-namespaces=team-a,kube-system"},
			wantIn: []string{"watchNamespaces[1]", `"kube-system"`, "system namespace", "remove it"},
		},
		"an empty watched namespace": {
			args:   []string{"--config=" + writeFile(t, "apiVersion: config.trainyard.dev/v1alpha1\nkind: Configuration\nwatchNamespaces: [\"\"]\n")},
			wantIn: []string{"watchNamespaces[0]", "namespace name"},
		},
		"base delay above max delay": {
			args:   []string{"--config=" + badRateLimit},
			wantIn: []string{"rateLimit.baseDelay", "rateLimit.maxDelay"},
		},
		"refusal threshold 0": {
			args:   []string{"--config=" + writeFile(t, "apiVersion: config.trainyard.dev/v1alpha1\nkind: Configuration\nrateLimit:\n  refusalThreshold: 0\n")},
			wantIn: []string{"rateLimit.refusalThreshold"},
		},
		"negative refusal delay": {
			args:   []string{"--config=" + writeFile(t, "apiVersion: config.trainyard.dev/v1alpha1\nkind: Configuration\nrateLimit:\n  refusalDelay: -1m\n")},
			wantIn: []string{"rateLimit.refusalDelay"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := config(t, tc.args...)
			if err == nil {
				t.Fatalf("Config = %+v, want an error", got)
			}
			for _, s := range tc.wantIn {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
}

func TestNewOptionsShowsDefaults(t *testing.T) {
	o := NewOptions()
	d := defaults()
	if o.MetricsBindAddress != d.Metrics.BindAddress || o.HealthProbeBindAddress != d.Health.HealthProbeBindAddress ||
		o.KubeAPIQPS != d.ClientConnection.QPS || o.KubeAPIBurst != d.ClientConnection.Burst || o.LeaderElect ||
		o.MetricsSecure != *d.Metrics.SecureServing || o.MetricsAuth != *d.Metrics.Auth.Enabled {
		t.Errorf("NewOptions() = %+v, does not show the configuration defaults", o)
	}
}

// TestStageWorkersNameTheFileField: for every stage, zero workers in the file are
// reported under the file's own field name (decoded strictly, so a wrong name would be
// an unknown-field error instead).
func TestStageWorkersNameTheFileField(t *testing.T) {
	for _, s := range stages.All() {
		stage, field := s.Name, s.ConfigField()
		t.Run(stage, func(t *testing.T) {
			if field == "" {
				t.Fatalf("stage %q has no configuration field name", stage)
			}
			file := writeFile(t, "apiVersion: config.trainyard.dev/v1alpha1\nkind: Configuration\nstages:\n  "+field+":\n    workers: 0\n")
			_, err := config(t, "--config="+file)
			want := "stages." + field + ".workers (--stage-workers " + stage + "=N) must be at least 1"
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("Config error = %v, want it to contain %q", err, want)
			}
			if err != nil && strings.Contains(err.Error(), "unknown field") {
				t.Errorf("stages.%s is not a field of the configuration file: %v", field, err)
			}
		})
	}
}

// TestStatusServerOff: "0" turns the progress server off and is not a port to check.
func TestStatusServerOff(t *testing.T) {
	file := writeFile(t, "apiVersion: config.trainyard.dev/v1alpha1\nkind: Configuration\nstatusServer:\n  bindAddress: \"0\"\n")
	got, err := config(t, "--config="+file, "--metrics-bind-address=0")
	if err != nil {
		t.Fatalf("Config: %v", err)
	}
	if got.StatusServer.BindAddress != "0" {
		t.Errorf("statusServer.bindAddress = %q, want \"0\"", got.StatusServer.BindAddress)
	}
}
