package realnode

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/utils/ptr"

	"github.com/trainyard/trainyard/e2e/cluster"
)

// The tests of routed Services (cluster.Options.RoutedServices): kube-proxy programs
// ClusterIPs on this machine as in a real cluster, which the chart's controller needs
// as a Pod (its webhooks called through their Service, trainers reporting through the
// progress Service, the controller reaching the API server through "kubernetes").

const pytorchImage = "docker.io/pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"

// runPod creates a pod of one container on the real node and returns its name.
func runPod(t *testing.T, c *cluster.Cluster, ns string, pod *corev1.Pod) {
	t.Helper()
	pod.Namespace = ns
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](0)
	if _, err := c.Client().CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitPodSucceeded waits for pod to end and fails the test, with its log, unless it
// succeeded; it returns the log.
func waitPodSucceeded(t *testing.T, c *cluster.Cluster, ns, name string, timeout time.Duration) string {
	t.Helper()
	var done *corev1.Pod
	cluster.Eventually(t, timeout, "pod "+name+" finished", func(ctx context.Context) (bool, string) {
		p, err := c.Client().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		done = p
		return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed, describePod(p)
	})
	log := podLog(t, c, ns, name, done.Spec.Containers[0].Name)
	if done.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("pod %s %s; its log:\n%s", name, describePod(done), log)
	}
	return log
}

// TestServicesRouteToPods serves a page from a busybox httpd pod behind a ClusterIP
// Service (port 80 → 8080) and reads it from another pod by the Service's DNS name and
// by its ClusterIP: kube-proxy's rules route both, and a ClusterIP without kube-proxy
// answers nothing.
func TestServicesRouteToPods(t *testing.T) {
	c := cluster.Shared(t)
	ns := cluster.NewNamespace(t, c)
	ctx := context.Background()
	svc, err := c.Client().CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	runPod(t, c, ns, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "c", Image: "busybox",
			Command:        []string{"sh", "-c", "mkdir -p /www && echo served-by-web-pod > /www/index.html && exec httpd -f -p 8080 -h /www"},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}}, PeriodSeconds: 1},
		}}},
	})
	name := "web." + ns + ".svc." + cluster.ClusterDomain
	script := fmt.Sprintf(`set -u
for target in %s %s; do
  until out=$(timeout 5 wget -qO- http://$target/); do sleep 1; done
  echo "$target: $out"
done`, name, svc.Spec.ClusterIP)
	runPod(t, c, ns, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "client"},
		Spec:       corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "busybox", Command: []string{"sh", "-c", script}}}},
	})
	log := waitPodSucceeded(t, c, ns, "client", 2*time.Minute)
	for _, target := range []string{name, svc.Spec.ClusterIP} {
		if !strings.Contains(log, target+": served-by-web-pod") {
			t.Errorf("the client did not read the page through %s; its log:\n%s", target, log)
		}
	}
}

// TestPodsReachTheAPIServerThroughItsService has a pod ask the API server who it is
// (a SelfSubjectReview) at https://kubernetes.default.svc with its service-account token
// and CA, as every in-cluster client does: the "kubernetes" Service routes to the API
// server, whose certificate names it, and the token authenticates.
func TestPodsReachTheAPIServerThroughItsService(t *testing.T) {
	c := cluster.Shared(t)
	ns := cluster.NewNamespace(t, c)
	script := `
import json, os, ssl, urllib.request
sa = "/var/run/secrets/kubernetes.io/serviceaccount"
host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
ctx = ssl.create_default_context(cafile=sa + "/ca.crt")
token = open(sa + "/token").read()
for url in ("https://kubernetes.default.svc", "https://%s:%s" % (host, port)):
    req = urllib.request.Request(url + "/apis/authentication.k8s.io/v1/selfsubjectreviews", method="POST",
        data=json.dumps({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}).encode(),
        headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
        print(url, "user:", json.load(resp)["status"]["userInfo"]["username"])
`
	runPod(t, c, ns, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "whoami"},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{
			Name: "c", Image: pytorchImage, Command: []string{"python3", "-c", script},
		}}},
	})
	log := waitPodSucceeded(t, c, ns, "whoami", trainingTimeout)
	want := "user: system:serviceaccount:" + ns + ":default"
	for _, url := range []string{"https://kubernetes.default.svc", "https://" + cluster.KubernetesServiceIP + ":443"} {
		if !strings.Contains(log, url+" "+want) {
			t.Errorf("the pod did not authenticate at %s as its service account; its log:\n%s", url, log)
		}
	}
}

// webhookScript is a validating webhook in Python: it denies every object it is sent,
// with a message the test looks for.
const webhookScript = `
import http.server, json, ssl
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {
            "uid": review["request"]["uid"], "allowed": False,
            "status": {"code": 403, "message": "denied by the in-cluster webhook, called through its Service"}}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
srv = http.server.ThreadingHTTPServer(("", 8443), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain("/tls/tls.crt", "/tls/tls.key")
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
srv.serve_forever()
`

// TestAPIServerCallsAWebhookThroughItsService registers a validating webhook whose
// clientConfig names a Service (port 443 → the pod's 8443), as the chart's does: the
// API server dials the Service's ClusterIP, which only kube-proxy's rules on this
// machine route, and the webhook's denial reaches the client.
func TestAPIServerCallsAWebhookThroughItsService(t *testing.T) {
	c := cluster.Shared(t)
	ns := cluster.NewNamespace(t, c)
	ctx := context.Background()
	// client-go's self-signed pair: the serving certificate followed by its CA, which
	// is also the caBundle the API server verifies it with.
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("denier."+ns+".svc", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client().CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "denier-tls"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client().CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "denier"},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "denier"}, Ports: []corev1.ServicePort{{Port: 443, TargetPort: intstr.FromInt32(8443)}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	runPod(t, c, ns, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "denier", Labels: map[string]string{"app": "denier"}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "c", Image: pytorchImage, Command: []string{"python3", "-c", webhookScript},
				VolumeMounts: []corev1.VolumeMount{{Name: "tls", MountPath: "/tls"}},
			}},
			Volumes: []corev1.Volume{{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "denier-tls"}}}},
		},
	})
	webhookName := "denier." + ns + ".trainyard.dev"
	_, err = c.Client().AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-denier"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: webhookName,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				Service:  &admissionregistrationv1.ServiceReference{Namespace: ns, Name: "denier", Path: ptr.To("/validate"), Port: ptr.To[int32](443)},
				CABundle: certPEM,
			},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
			}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
			ObjectSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{"trainyard.dev/deny": "true"}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To[int32](5),
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client().AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), ns+"-denier", metav1.DeleteOptions{})
	})
	const want = "denied by the in-cluster webhook, called through its Service"
	// The API server loads a new webhook configuration from its own watch, a moment
	// after the create: until then a ConfigMap is admitted without a call (deleted and
	// tried again). Once loaded, the call fails until the pod serves (failurePolicy
	// Fail: "failed calling webhook"), then the webhook denies; from then on a
	// ConfigMap admitted means the webhook was not called.
	loaded := false
	cluster.Eventually(t, trainingTimeout, "a ConfigMap denied by the webhook through its Service", func(ctx context.Context) (bool, string) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "denied-", Labels: map[string]string{"trainyard.dev/deny": "true"}}}
		created, err := c.Client().CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
		switch {
		case err == nil && loaded:
			t.Fatal("a ConfigMap the webhook denies was admitted after the API server had called the webhook: the webhook was not called")
		case err == nil:
			_ = c.Client().CoreV1().ConfigMaps(ns).Delete(ctx, created.Name, metav1.DeleteOptions{})
			return false, "admitted: the API server has not loaded the webhook configuration yet"
		}
		loaded = loaded || strings.Contains(err.Error(), webhookName)
		return strings.Contains(err.Error(), want), err.Error()
	})
}

// TestAServiceNeverSendsAPacketOffTheMachine gives a Service an endpoint outside the
// pod network and connects to its ClusterIP from this machine, where kube-proxy's DNAT
// applies in the output path: the guard must drop the translated packet. The endpoint
// is an address behind a veth pair into a network namespace made for the test
// (198.18.0.0/24, a benchmarking range), so even without the guard nothing leaves the
// machine, and the veth's transmit counter shows whether the guard held (checked by
// hand: with the guard table deleted, the connection attempts leave through it).
func TestAServiceNeverSendsAPacketOffTheMachine(t *testing.T) {
	c := cluster.Shared(t)
	ns := cluster.NewNamespace(t, c)
	ctx := context.Background()
	const netns, link, peer, endpoint = "trainyard-e2e-outside", "tyoutside0", "tyoutside1", "198.18.0.2"
	cleanup := func() {
		_ = exec.Command("ip", "link", "del", link).Run()
		_ = exec.Command("ip", "netns", "del", netns).Run()
	}
	cleanup()
	t.Cleanup(cleanup)
	for _, args := range [][]string{
		{"netns", "add", netns},
		{"link", "add", link, "type", "veth", "peer", "name", peer},
		{"link", "set", peer, "netns", netns},
		{"addr", "add", "198.18.0.1/24", "dev", link},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	// No IPv6 on the link: its neighbour discovery would count as packets sent.
	if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+link+"/disable_ipv6", []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"link", "set", link, "up"}, {"-n", netns, "link", "set", peer, "up"}} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	svc, err := c.Client().CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "elsewhere"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client().DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "elsewhere-1", Labels: map[string]string{discoveryv1.LabelServiceName: "elsewhere"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{endpoint}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](80), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	txBefore := txPackets(t, link)
	// kube-proxy syncs within a second or two; the guard must hold the whole time.
	deadline := time.Now().Add(20 * time.Second)
	var attempts int
	for time.Now().Before(deadline) {
		attempts++
		if conn, err := net.DialTimeout("tcp", net.JoinHostPort(svc.Spec.ClusterIP, "80"), 500*time.Millisecond); err == nil {
			conn.Close()
			t.Fatalf("connected to %s, which nothing on this machine serves", svc.Spec.ClusterIP)
		}
		if sent := txPackets(t, link) - txBefore; sent > 0 {
			t.Fatalf("%d packets for the Service's outside endpoint left through %s: the guard did not drop them", sent, link)
		}
	}
	out, err := exec.Command("nft", "list", "table", "inet", "trainyard-services").CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("counter packets")) || bytes.Contains(out, []byte("counter packets 0 ")) {
		t.Errorf("after %d connection attempts the guard dropped nothing (or is gone): %v\n%s", attempts, err, out)
	}
}

// txPackets reads the transmit packet counter of link.
func txPackets(t *testing.T, link string) int {
	t.Helper()
	data, err := os.ReadFile("/sys/class/net/" + link + "/statistics/tx_packets")
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	return n
}
