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
)

// SetDefaults_Configuration fills every unset field of c with its documented default.
// Called by the generated defaulter (scheme.Default) after decoding.
func SetDefaults_Configuration(c *Configuration) {
	cc := &c.ClientConnection
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

	le := &c.LeaderElection
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

	if c.Metrics.BindAddress == "" {
		c.Metrics.BindAddress = DefaultMetricsBindAddress
	}
	if c.Metrics.SecureServing == nil {
		c.Metrics.SecureServing = ptr.To(true)
	}
	if c.Metrics.Auth.Enabled == nil {
		c.Metrics.Auth.Enabled = ptr.To(*c.Metrics.SecureServing)
	}
	if c.Health.HealthProbeBindAddress == "" {
		c.Health.HealthProbeBindAddress = DefaultHealthProbeBindAddress
	}

	if c.Stages.Status.Workers == nil {
		c.Stages.Status.Workers = ptr.To[int32](DefaultStatusWorkers)
	}
	// Every other stage, whichever the stage table holds: a new field needs no line here.
	stages := reflect.ValueOf(&c.Stages).Elem()
	for i := range stages.NumField() {
		if s := stages.Field(i).Addr().Interface().(*StageConfiguration); s.Workers == nil {
			s.Workers = ptr.To[int32](DefaultStageWorkers)
		}
	}

	rl := &c.RateLimit
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

	setString(&c.SideObjects.SecretNameKeySecret, DefaultSecretNameKeySecret)

	wh := &c.Webhook
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

	if c.Consistency.SweepPeriod == nil {
		c.Consistency.SweepPeriod = &metav1.Duration{Duration: DefaultSweepPeriod}
	}
	if c.Consistency.LagThreshold == nil {
		c.Consistency.LagThreshold = &metav1.Duration{Duration: DefaultLagThreshold}
	}

	ss := &c.StatusServer
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
