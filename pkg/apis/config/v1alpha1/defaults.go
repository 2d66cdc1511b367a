/*
Copyright The Trainyard Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package v1alpha1

import (
	"reflect"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	componentbaseconfigv1alpha1 "k8s.io/component-base/config/v1alpha1"
	"k8s.io/utils/ptr"
)

// Defaults of the Configuration fields, exported so flags can show them.
const (
	DefaultMetricsBindAddress      = ":8080"
	DefaultHealthProbeBindAddress  = ":8081"
	DefaultClientQPS               = 500
	DefaultClientBurst             = 1000
	DefaultLeaseName               = "trainyard-controller"
	DefaultStageWorkers            = 4
	DefaultStatusWorkers           = 32
	DefaultRetryBaseDelay          = 5 * time.Millisecond
	DefaultRetryMaxDelay           = 5 * time.Minute
	DefaultRetryQPS                = 10
	DefaultRetryBurst              = 100
	DefaultRefusalThreshold        = 5
	DefaultRefusalDelay            = 10 * time.Minute
	DefaultWebhookBindAddress      = ":9443"
	DefaultWebhookServiceName      = "trainyard-webhook"
	DefaultWebhookSecretName       = "trainyard-webhook-certs"
	DefaultSecretNameKeySecret     = "trainyard-secret-name-key"
	DefaultWebhookCertDir          = "/tmp/k8s-webhook-server/serving-certs"
	DefaultValidatingWebhookName   = "trainyard-validator"
	DefaultMutatingWebhookName     = "trainyard-defaulter"
	DefaultCAValidity              = 3 * 365 * 24 * time.Hour
	DefaultServingValidity         = 90 * 24 * time.Hour
	DefaultCAPublishDelay          = 5 * time.Minute
	DefaultSweepPeriod             = time.Minute
	DefaultLagThreshold            = 5 * time.Minute
	DefaultStatusServerBindAddress = ":10443"
	DefaultStatusWritePeriod       = 10 * time.Second
	DefaultStatusWriteQPS          = 50
	DefaultStatusWriteBurst        = 100
	DefaultStatusNamespaceQPS      = 10
	DefaultStatusNamespaceBurst    = 20
	// The progress server's bounds: see StatusServerConfiguration and package progress.
	DefaultStatusMaxConnections          = 5120
	DefaultStatusMaxKeepAliveConnections = 4096
	DefaultStatusMaxReportsInFlight      = 256
	// DefaultStatusMaxPendingReportBytes and MinStatusMaxPendingReportBytes:
	// statusServer.maxPendingReportBytes, 32 MiB and at least 1 MiB.
	DefaultStatusMaxPendingReportBytes = 32 << 20
	MinStatusMaxPendingReportBytes     = 1 << 20
)

// SetDefaults_Configuration fills every unset field of c with its documented default.
// Called by the generated defaulter (scheme.Default) after decoding.
func SetDefaults_Configuration(c *Configuration) {
	defaultClientConnection(&c.ClientConnection)
	defaultLeaderElection(&c.LeaderElection)
	defaultMetrics(&c.Metrics)
	if c.Health.HealthProbeBindAddress == "" {
		c.Health.HealthProbeBindAddress = DefaultHealthProbeBindAddress
	}
	defaultStages(&c.Stages)
	defaultRateLimit(&c.RateLimit)
	setString(&c.SideObjects.SecretNameKeySecret, DefaultSecretNameKeySecret)
	defaultWebhook(&c.Webhook)
	defaultConsistency(&c.Consistency)
	defaultStatusServer(&c.StatusServer)
	if c.ShutdownDelay == nil {
		c.ShutdownDelay = &metav1.Duration{}
	}
}

// defaultClientConnection fills the unset fields of the API client's configuration:
// DefaultClientQPS, DefaultClientBurst, and protobuf content types.
func defaultClientConnection(cc *componentbaseconfigv1alpha1.ClientConnectionConfiguration) {
	if cc.QPS == 0 {
		cc.QPS = DefaultClientQPS
	}
	if cc.Burst == 0 {
		cc.Burst = DefaultClientBurst
	}
	if cc.ContentType == "" {
		// Protobuf for built-in kinds; CRDs fall back to JSON automatically.
		cc.ContentType = "application/vnd.kubernetes.protobuf"
	}
	if cc.AcceptContentTypes == "" {
		cc.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	}
}

// defaultLeaderElection fills the unset fields of leader election: off, a Lease named
// DefaultLeaseName, durations of 15s lease, 10s renew deadline and 2s retry.
func defaultLeaderElection(le *componentbaseconfigv1alpha1.LeaderElectionConfiguration) {
	if le.LeaderElect == nil {
		le.LeaderElect = ptr.To(false)
	}
	if le.ResourceLock == "" {
		le.ResourceLock = "leases"
	}
	if le.ResourceName == "" {
		le.ResourceName = DefaultLeaseName
	}
	setDuration(&le.LeaseDuration, 15*time.Second)
	setDuration(&le.RenewDeadline, 10*time.Second)
	setDuration(&le.RetryPeriod, 2*time.Second)
}

// defaultMetrics fills the unset fields of the /metrics endpoint: DefaultMetricsBindAddress,
// HTTPS, and authentication as secureServing is.
func defaultMetrics(m *MetricsConfiguration) {
	if m.BindAddress == "" {
		m.BindAddress = DefaultMetricsBindAddress
	}
	if m.SecureServing == nil {
		m.SecureServing = ptr.To(true)
	}
	if m.Auth.Enabled == nil {
		m.Auth.Enabled = ptr.To(*m.SecureServing)
	}
}

// defaultStages fills every stage's unset workers: DefaultStatusWorkers for the status
// stage, DefaultStageWorkers for the others.
func defaultStages(st *StagesConfiguration) {
	if st.Status.Workers == nil {
		st.Status.Workers = ptr.To[int32](DefaultStatusWorkers)
	}
	// Every other stage, whichever the stage table holds: a new field needs no line here.
	stages := reflect.ValueOf(st).Elem()
	for i := range stages.NumField() {
		if s := stages.Field(i).Addr().Interface().(*StageConfiguration); s.Workers == nil {
			s.Workers = ptr.To[int32](DefaultStageWorkers)
		}
	}
}

// defaultRateLimit fills the unset fields of the stage queues' retry limits and the
// refusals' (DefaultRetry*, DefaultRefusal*).
func defaultRateLimit(rl *RateLimitConfiguration) {
	if rl.BaseDelay == nil {
		rl.BaseDelay = &metav1.Duration{Duration: DefaultRetryBaseDelay}
	}
	if rl.MaxDelay == nil {
		rl.MaxDelay = &metav1.Duration{Duration: DefaultRetryMaxDelay}
	}
	if rl.QPS == nil {
		rl.QPS = ptr.To[float32](DefaultRetryQPS)
	}
	if rl.Burst == nil {
		rl.Burst = ptr.To[int32](DefaultRetryBurst)
	}
	if rl.RefusalThreshold == nil {
		rl.RefusalThreshold = ptr.To[int32](DefaultRefusalThreshold)
	}
	if rl.RefusalDelay == nil {
		rl.RefusalDelay = &metav1.Duration{Duration: DefaultRefusalDelay}
	}
}

// defaultWebhook fills the unset fields of the admission server and its self-managed
// certificates (DefaultWebhook*, DefaultValidatingWebhookName,
// DefaultMutatingWebhookName, DefaultCAValidity, DefaultServingValidity,
// DefaultCAPublishDelay).
func defaultWebhook(wh *WebhookConfiguration) {
	setString(&wh.BindAddress, DefaultWebhookBindAddress)
	setString(&wh.ServiceName, DefaultWebhookServiceName)
	setString(&wh.ValidatingWebhookConfigurationName, DefaultValidatingWebhookName)
	setString(&wh.MutatingWebhookConfigurationName, DefaultMutatingWebhookName)
	setString(&wh.Certificates.Mode, CertificatesSelfManaged)
	setString(&wh.Certificates.SecretName, DefaultWebhookSecretName)
	setString(&wh.Certificates.CertDir, DefaultWebhookCertDir)
	if wh.Certificates.CAValidity == nil {
		wh.Certificates.CAValidity = &metav1.Duration{Duration: DefaultCAValidity}
	}
	if wh.Certificates.ServingValidity == nil {
		wh.Certificates.ServingValidity = &metav1.Duration{Duration: DefaultServingValidity}
	}
	if wh.Certificates.CAPublishDelay == nil {
		wh.Certificates.CAPublishDelay = &metav1.Duration{Duration: DefaultCAPublishDelay}
	}
}

// defaultConsistency fills the unset fields of the consistency sweep: DefaultSweepPeriod,
// DefaultLagThreshold.
func defaultConsistency(cs *ConsistencyConfiguration) {
	if cs.SweepPeriod == nil {
		cs.SweepPeriod = &metav1.Duration{Duration: DefaultSweepPeriod}
	}
	if cs.LagThreshold == nil {
		cs.LagThreshold = &metav1.Duration{Duration: DefaultLagThreshold}
	}
}

// defaultStatusServer fills the unset fields of the progress server: its address, its
// write period and limits (DefaultStatusWrite*, DefaultStatusNamespace*) and its bounds
// (DefaultStatusMax*).
func defaultStatusServer(ss *StatusServerConfiguration) {
	setString(&ss.BindAddress, DefaultStatusServerBindAddress)
	if ss.WritePeriod == nil {
		ss.WritePeriod = &metav1.Duration{Duration: DefaultStatusWritePeriod}
	}
	if ss.QPS == nil {
		ss.QPS = ptr.To[float32](DefaultStatusWriteQPS)
	}
	if ss.Burst == nil {
		ss.Burst = ptr.To[int32](DefaultStatusWriteBurst)
	}
	if ss.NamespaceQPS == nil {
		ss.NamespaceQPS = ptr.To[float32](DefaultStatusNamespaceQPS)
	}
	if ss.NamespaceBurst == nil {
		ss.NamespaceBurst = ptr.To[int32](DefaultStatusNamespaceBurst)
	}
	if ss.MaxConnections == nil {
		ss.MaxConnections = ptr.To[int32](DefaultStatusMaxConnections)
	}
	if ss.MaxKeepAliveConnections == nil {
		ss.MaxKeepAliveConnections = ptr.To[int32](DefaultStatusMaxKeepAliveConnections)
	}
	if ss.MaxReportsInFlight == nil {
		ss.MaxReportsInFlight = ptr.To[int32](DefaultStatusMaxReportsInFlight)
	}
	if ss.MaxPendingReportBytes == nil {
		ss.MaxPendingReportBytes = ptr.To[int64](DefaultStatusMaxPendingReportBytes)
	}
}

func setString(s *string, def string) {
	if *s == "" {
		*s = def
	}
}

func setDuration(d *metav1.Duration, def time.Duration) {
	if d.Duration == 0 {
		d.Duration = def
	}
}
