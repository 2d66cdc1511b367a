package progress

import (
	"fmt"
	"net"
	"strconv"

	configv1alpha1 "github.com/trainyard/trainyard/pkg/apis/config/v1alpha1"
	"github.com/trainyard/trainyard/pkg/progress/wire"
)

// EnabledByDefault is FeatureGate's value when the configuration does not set it: on in
// Trainyard (upstream Trainer v2.3 ships it off, as alpha). The SDK and dashboards read
// status.trainerStatus, and Trainyard bounds the writes it causes (statusServer.writePeriod,
// qps, namespaceQPS), which removes upstream's reason for keeping it off: one status write
// per report per TrainJob.
const EnabledByDefault = true

// Enabled reports whether feature gate TrainJobStatus is on in cfg:
// cfg.FeatureGates["TrainJobStatus"] when set, else EnabledByDefault.
func Enabled(cfg *configv1alpha1.Configuration) bool {
	if on, ok := cfg.FeatureGates[wire.FeatureGate]; ok {
		return on
	}
	return EnabledByDefault
}

// Serving reports whether the progress server runs and trainer containers are told about
// it: the gate is on (Enabled) and statusServer.bindAddress is not "0". Everything of
// KEP-2779 hangs on it: the server, the injection into trainer containers (the ML policy
// plugin mlpolicy.TrainerStatus) and the CA ConfigMaps (CAPublisher).
func Serving(cfg *configv1alpha1.Configuration) bool {
	return Enabled(cfg) && cfg.StatusServer.BindAddress != "0"
}

// Port returns the port of bindAddress ("host:port" or ":port"), which must be a number
// from 1 to 65535: it is also the port of the URL injected into trainer containers, so a
// service name such as ":https" is refused.
func Port(bindAddress string) (int, error) {
	_, p, err := net.SplitHostPort(bindAddress)
	if err != nil {
		return 0, fmt.Errorf("%q is not host:port: %w", bindAddress, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("%q: the port must be a number from 1 to 65535", bindAddress)
	}
	return n, nil
}

// BaseURL is the progress server's address as trainer pods reach it, upstream's form:
// https://<serviceName>.<controllerNamespace>.svc:<port>. serviceName is the Service in
// front of the controller pods (webhook.serviceName: upstream also uses its webhook
// Service), which must expose port and forward it to the same container port.
func BaseURL(serviceName, controllerNamespace string, port int) string {
	return fmt.Sprintf("https://%s.%s.svc:%d", serviceName, controllerNamespace, port)
}

// URLFunc returns the function giving the KUBEFLOW_TRAINER_SERVER_URL of a TrainJob,
// BaseURL(cfg.Webhook.ServiceName, controllerNamespace, port of
// cfg.StatusServer.BindAddress) + Path(namespace, name), for mlpolicy.TrainerStatus and
// stages.Options.ProgressURL. It returns nil when the progress server is off (!Serving),
// which turns the injection off, and an error when the bind address has no numeric port.
// cfg must be defaulted.
func URLFunc(cfg *configv1alpha1.Configuration, controllerNamespace string) (func(namespace, name string) string, error) {
	if !Serving(cfg) {
		return nil, nil
	}
	port, err := Port(cfg.StatusServer.BindAddress)
	if err != nil {
		return nil, fmt.Errorf("statusServer.bindAddress %w", err)
	}
	base := BaseURL(cfg.Webhook.ServiceName, controllerNamespace, port)
	return func(namespace, name string) string { return base + wire.Path(namespace, name) }, nil
}
