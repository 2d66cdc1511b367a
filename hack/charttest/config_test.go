package charttest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/utils/ptr"

	configv1alpha1 "github.com/trainyard/trainyard/pkg/apis/config/v1alpha1"
)

// decodeConfig decodes a configuration file the way the controller does:
// strictly (an unknown or duplicate field is an error), then defaulted.
func decodeConfig(t *testing.T, data []byte) *configv1alpha1.Configuration {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := configv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	cfg := &configv1alpha1.Configuration{}
	codecs := serializer.NewCodecFactory(scheme, serializer.EnableStrict)
	if err := runtime.DecodeInto(codecs.UniversalDecoder(configv1alpha1.SchemeGroupVersion), data, cfg); err != nil {
		t.Fatalf("the controller would reject the chart's config.yaml: %v\n%s", err, data)
	}
	scheme.Default(cfg)
	return cfg
}

func TestConfigFile(t *testing.T) {
	t.Run("defaults", func(t *testing.T) {
		r := mustRender(t, ``)
		cfg := decodeConfig(t, configFile(t, r, fullname+"-config"))
		// The chart's defaults equal the binary's, so that leaving a value
		// alone never changes behaviour.
		want := &configv1alpha1.Configuration{}
		scheme := runtime.NewScheme()
		_ = configv1alpha1.AddToScheme(scheme)
		scheme.Default(want)
		want.TypeMeta = cfg.TypeMeta
		// What the chart sets on purpose, differently from the binary's defaults:
		le := &want.LeaderElection
		*le.LeaderElect = true
		le.ResourceNamespace = namespace
		// The progress server's gate, explicit (the binary's default is on too).
		want.FeatureGates = map[string]bool{"TrainJobStatus": true}
		// In a cluster a terminating replica serves on while Services drop it; a
		// process outside one (make run) has nothing to wait for.
		want.ShutdownDelay.Duration = 5 * time.Second
		if diff := cmp.Diff(want, cfg); diff != "" {
			t.Errorf("chart defaults differ from the binary's (-binary +chart):\n%s", diff)
		}
	})
	t.Run("values reach the file", func(t *testing.T) {
		r := mustRender(t, combinations["everything"], withMonitoring())
		cfg := decodeConfig(t, configFile(t, r, "trainyard-ty-config"))
		got := map[string]any{
			"qps": cfg.ClientConnection.QPS, "burst": cfg.ClientConnection.Burst,
			"leaderElect": *cfg.LeaderElection.LeaderElect, "lease": cfg.LeaderElection.ResourceNamespace + "/" + cfg.LeaderElection.ResourceName,
			"leaseDuration": cfg.LeaderElection.LeaseDuration.Duration, "renewDeadline": cfg.LeaderElection.RenewDeadline.Duration,
			"retryPeriod": cfg.LeaderElection.RetryPeriod.Duration,
			"workers": []int32{*cfg.Stages.ResolveRuntime.Workers, *cfg.Stages.MergePatches.Workers, *cfg.Stages.MLPolicy.Workers,
				*cfg.Stages.Gang.Workers, *cfg.Stages.DRAClaims.Workers, *cfg.Stages.Status.Workers},
			"baseDelay": cfg.RateLimit.BaseDelay.Duration, "maxDelay": cfg.RateLimit.MaxDelay.Duration,
			"retryQPS": *cfg.RateLimit.QPS, "retryBurst": *cfg.RateLimit.Burst,
			"refusalThreshold": *cfg.RateLimit.RefusalThreshold, "refusalDelay": cfg.RateLimit.RefusalDelay.Duration,
			"featureGates": cfg.FeatureGates, "shutdownDelay": cfg.ShutdownDelay.Duration,
			"webhook":      cfg.Webhook,
			"statusServer": cfg.StatusServer,
		}
		want := map[string]any{
			"qps": float32(300), "burst": int32(500),
			"leaderElect": true, "lease": "kube-system/ty-lease",
			"leaseDuration": 30 * time.Second, "renewDeadline": 20 * time.Second, "retryPeriod": 4 * time.Second,
			"workers":   []int32{2, 3, 5, 6, 7, 16},
			"baseDelay": 10 * time.Millisecond, "maxDelay": 2 * time.Minute,
			"retryQPS": float32(20), "retryBurst": int32(200),
			"refusalThreshold": int32(3), "refusalDelay": 20 * time.Minute,
			"featureGates": map[string]bool{"SomeFeature": true, "TrainJobStatus": true}, "shutdownDelay": 12 * time.Second,
			"statusServer": configv1alpha1.StatusServerConfiguration{
				BindAddress: ":11443", WritePeriod: &metav1.Duration{Duration: 30 * time.Second},
				QPS: ptr.To[float32](100), Burst: ptr.To[int32](200),
				NamespaceQPS: ptr.To[float32](5), NamespaceBurst: ptr.To[int32](8),
				MaxConnections: ptr.To[int32](500), MaxKeepAliveConnections: ptr.To[int32](400), MaxReportsInFlight: ptr.To[int32](50),
				MaxPendingReportBytes: ptr.To[int64](2097152),
			},
			"webhook": configv1alpha1.WebhookConfiguration{
				BindAddress:                        ":10250",
				ServiceName:                        "trainyard-ty-webhook",
				ValidatingWebhookConfigurationName: "trainyard-ty-validator",
				MutatingWebhookConfigurationName:   "trainyard-ty-defaulter",
				Certificates: configv1alpha1.WebhookCertificates{
					Mode:            configv1alpha1.CertificatesProvided,
					SecretName:      configv1alpha1.DefaultWebhookSecretName, // unused in mode Provided
					CertDir:         configv1alpha1.DefaultWebhookCertDir,
					CAValidity:      &metav1.Duration{Duration: configv1alpha1.DefaultCAValidity},
					ServingValidity: &metav1.Duration{Duration: configv1alpha1.DefaultServingValidity},
					CAPublishDelay:  &metav1.Duration{Duration: configv1alpha1.DefaultCAPublishDelay},
				},
			},
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("configuration (-want +got):\n%s", diff)
		}
	})
}

var (
	binaryOnce sync.Once
	binaryPath string
	binaryErr  error
)

// controllerBinary returns the controller binary: $TRAINYARD_BIN, or one built
// from the repository (reusing Go's build cache, so only the first run is slow).
func controllerBinary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("TRAINYARD_BIN"); bin != "" {
		return bin
	}
	binaryOnce.Do(func() {
		dir, err := os.MkdirTemp("", "charttest-bin")
		if err != nil {
			binaryErr = err
			return
		}
		binaryPath = filepath.Join(dir, "trainyard")
		cmd := exec.Command("go", "build", "-o", binaryPath, "./cmd/trainyard")
		cmd.Dir = repoRoot
		cmd.Env = append(os.Environ(), "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			binaryErr = errors.New(string(out))
		}
	})
	if binaryErr != nil {
		t.Fatalf("building the controller: %v", binaryErr)
	}
	return binaryPath
}

// TestBinaryAcceptsChart runs the real controller with the Deployment's
// arguments and the ConfigMap's file. It exits 2 on a flag or configuration it
// rejects (chart and binary have drifted apart), and otherwise gets as far as
// loading the (deliberately missing) kubeconfig and exits 1.
func TestBinaryAcceptsChart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the controller")
	}
	bin := controllerBinary(t)
	for _, name := range []string{"defaults", "everything", "single-no-leader-election", "cert-manager", "provided", "no-webhook", "no-status-server", "no-metrics-auth", "plain-http-metrics"} {
		t.Run(name, func(t *testing.T) {
			r := mustRender(t, combinations[name], withMonitoring(), withCertManager())
			d := into[appsv1.Deployment](t, r.ofKind("Deployment")[0])
			c := d.Spec.Template.Spec.Containers[0]
			dir := t.TempDir()
			var cmName string
			for _, v := range d.Spec.Template.Spec.Volumes {
				if v.ConfigMap != nil {
					cmName = v.ConfigMap.Name
				}
			}
			if err := os.WriteFile(filepath.Join(dir, "config.yaml"), configFile(t, r, cmName), 0o644); err != nil {
				t.Fatal(err)
			}
			var args []string
			for _, a := range c.Args {
				if strings.HasPrefix(a, "--config=") {
					if a != "--config=/etc/trainyard/config.yaml" {
						t.Fatalf("config flag %q does not point at the mounted file", a)
					}
					a = "--config=" + filepath.Join(dir, "config.yaml")
				}
				args = append(args, a)
			}
			args = append(args, "--kubeconfig="+filepath.Join(dir, "missing-kubeconfig"))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, args...)
			cmd.Env = []string{"POD_NAMESPACE=" + namespace}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("controller %v: %v (stderr: %s)", args, err, stderr.String())
			}
			if exit.ExitCode() != 1 || !strings.Contains(stderr.String(), "loading Kubernetes client configuration") {
				t.Fatalf("controller rejected the chart's arguments or configuration (exit %d):\n%s\nargs: %q",
					exit.ExitCode(), stderr.String(), args)
			}
		})
	}
}
