package charttest

import (
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// statusServerView is what the chart renders for the progress server (KEP-2779).
type statusServerView struct {
	gate          bool   // featureGates.TrainJobStatus
	bindAddress   string // statusServer.bindAddress
	containerPort int32  // container port status-server (0: none)
	servicePort   *corev1.ServicePort
	serviceName   string // webhook.serviceName, the host of the injected URL
}

func viewStatusServer(t *testing.T, r *rendered, configMap string) statusServerView {
	t.Helper()
	cfg := decodeConfig(t, configFile(t, r, configMap))
	gate, ok := cfg.FeatureGates[wireConst(t, "FeatureGate")]
	if !ok {
		t.Errorf("featureGates %v: the chart must set %s explicitly", cfg.FeatureGates, wireConst(t, "FeatureGate"))
	}
	v := statusServerView{gate: gate, bindAddress: cfg.StatusServer.BindAddress, serviceName: cfg.Webhook.ServiceName}
	d := into[appsv1.Deployment](t, r.ofKind("Deployment")[0])
	v.containerPort = findPort(d.Spec.Template.Spec.Containers[0].Ports, "status-server")
	for _, o := range r.ofKind("Service") {
		if o.GetName() == cfg.Webhook.ServiceName {
			v.servicePort = servicePort(into[corev1.Service](t, o), "status-server")
		}
	}
	return v
}

func TestStatusServer(t *testing.T) {
	t.Run("on by default, on upstream's port, behind the webhook Service", func(t *testing.T) {
		v := viewStatusServer(t, mustRender(t, ``), fullname+"-config")
		if !v.gate || v.bindAddress != ":10443" || v.containerPort != 10443 {
			t.Errorf("gate %v, bindAddress %q, container port %d; want true, \":10443\", 10443", v.gate, v.bindAddress, v.containerPort)
		}
		// The URL the controller injects is https://<webhook.serviceName>.<ns>.svc:<port of
		// bindAddress>: that Service must serve that port, on the container's port.
		if p := v.servicePort; p == nil || p.Port != 10443 || p.TargetPort != intstr.FromString("status-server") || p.Protocol != corev1.ProtocolTCP {
			t.Errorf("Service %s port status-server = %+v, want 10443 → status-server", v.serviceName, p)
		}
		if v.serviceName != fullname+"-webhook" {
			t.Errorf("webhook.serviceName %q, want the chart's webhook Service", v.serviceName)
		}
	})
	t.Run("port follows the value everywhere", func(t *testing.T) {
		v := viewStatusServer(t, mustRender(t, `statusServer: {port: 12443}`), fullname+"-config")
		if v.bindAddress != ":12443" || v.containerPort != 12443 || v.servicePort == nil || v.servicePort.Port != 12443 {
			t.Errorf("bindAddress %q, container port %d, Service port %+v; want 12443 everywhere", v.bindAddress, v.containerPort, v.servicePort)
		}
	})
	for name, values := range map[string]string{
		"off":        `statusServer: {enabled: false}`,
		"no webhook": `webhook: {enabled: false}`,
	} {
		t.Run(name, func(t *testing.T) {
			r := mustRender(t, values)
			v := viewStatusServer(t, r, fullname+"-config")
			if v.gate || v.bindAddress != "0" || v.containerPort != 0 || v.servicePort != nil {
				t.Errorf("gate %v, bindAddress %q, container port %d, Service port %+v; want the server off", v.gate, v.bindAddress, v.containerPort, v.servicePort)
			}
			// The other settings stay valid for the binary.
			cfg := decodeConfig(t, configFile(t, r, fullname+"-config"))
			if cfg.StatusServer.WritePeriod.Duration == 0 || *cfg.StatusServer.QPS == 0 {
				t.Errorf("statusServer %+v", cfg.StatusServer)
			}
		})
	}
	t.Run("the gate has one place", func(t *testing.T) {
		_, err := render(t, `config: {featureGates: {TrainJobStatus: false}}`)
		errContains(t, err, "config.featureGates.TrainJobStatus", "statusServer.enabled")
	})
	for _, port := range []string{"8080", "8081", "9443"} {
		t.Run("port "+port+" is taken", func(t *testing.T) {
			_, err := render(t, fmt.Sprintf(`statusServer: {port: %s}`, port))
			errContains(t, err, "statusServer.port "+port)
		})
	}
	t.Run("a taken port does not matter while off", func(t *testing.T) {
		mustRender(t, `statusServer: {enabled: false, port: 9443}`)
	})
	t.Run("NOTES mention it", func(t *testing.T) {
		notes := mustRender(t, ``).files["templates/NOTES.txt"]
		if !strings.Contains(notes, "Progress server") || !strings.Contains(notes, "10443") {
			t.Errorf("NOTES.txt does not mention the progress server:\n%s", notes)
		}
		if notes := mustRender(t, `statusServer: {enabled: false}`).files["templates/NOTES.txt"]; !strings.Contains(notes, "Progress server:  off") {
			t.Errorf("NOTES.txt does not say the progress server is off:\n%s", notes)
		}
	})
}
