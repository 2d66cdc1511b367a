package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Keys of Cluster.ports besides the component names, which key each
// component's main port.
const (
	portEtcdPeer     = "etcd-peer"
	portJobSetHealth = "jobset-health"
)

// allocatePorts picks a free 127.0.0.1 port for every listener, keeping
// Options.APIServerPort when set.
func (c *Cluster) allocatePorts() error {
	names := []string{Etcd, portEtcdPeer, KubeAPIServer, KubeControllerManager, KubeScheduler, JobSet, portJobSetHealth, Kwok}
	if c.opts.Kueue {
		names = append(names, Kueue, portKueueHealth)
	}
	if c.opts.Prometheus {
		names = append(names, Prometheus)
	}
	if c.opts.RealNode {
		names = append(names, Kubelet, portKubeletHealth, portCoreDNSHealth, portCoreDNSReady, Registry)
	}
	if c.opts.RoutedServices {
		names = append(names, portKubeProxyHealth, portKubeProxyMetrics)
	}
	free, err := freePorts(len(names))
	if err != nil {
		return err
	}
	c.ports = map[string]int{}
	for i, name := range names {
		c.ports[name] = free[i]
	}
	if c.opts.APIServerPort != 0 {
		c.ports[KubeAPIServer] = c.opts.APIServerPort
	}
	return nil
}

func (c *Cluster) startEtcd(ctx context.Context) error {
	client := fmt.Sprintf("http://127.0.0.1:%d", c.ports[Etcd])
	peer := fmt.Sprintf("http://127.0.0.1:%d", c.ports[portEtcdPeer])
	return c.runComponent(ctx, componentSpec{
		name:   Etcd,
		binary: c.bins.Path(Etcd),
		args: []string{
			"--name=trainyard",
			"--data-dir=" + filepath.Join(c.workDir, "etcd"),
			"--listen-client-urls=" + client, "--advertise-client-urls=" + client,
			"--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer,
			"--initial-cluster=trainyard=" + peer,
			// A throw-away cluster: durability is not worth the fsync cost.
			"--unsafe-no-fsync=true",
			// The 50,000-TrainJob benchmark with its raw-create limit holds ~250,000
			// objects and their history: past etcd's default 2 GiB quota (NOSPACE).
			"--quota-backend-bytes=8589934592",
		},
		ports: []int{c.ports[Etcd], c.ports[portEtcdPeer]},
		ready: httpProbe(http.DefaultClient, client+"/health", `"health":"true"`),
	})
}

func (c *Cluster) startAPIServer(ctx context.Context) error {
	dir := filepath.Join(c.workDir, KubeAPIServer)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	certDir, err := c.pki.servingCert(KubeAPIServer, "kubernetes", "kubernetes.default", "kubernetes.default.svc",
		"kubernetes.default.svc."+ClusterDomain, KubernetesServiceIP) // the names in-cluster clients dial
	if err != nil {
		return err
	}
	saKey, err := c.pki.serviceAccountKey()
	if err != nil {
		return err
	}
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(c.token+",admin,admin,system:masters\n"), 0o600); err != nil {
		return err
	}
	url := c.serverURL()
	args := []string{
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", c.ports[Etcd]),
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", c.ports[KubeAPIServer]),
		"--cert-dir=" + dir,
		"--tls-cert-file=" + filepath.Join(certDir, "tls.crt"),
		"--tls-private-key-file=" + filepath.Join(certDir, "tls.key"),
		"--client-ca-file=" + c.pki.caFile(),
		"--token-auth-file=" + tokens,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + saKey,
		"--service-account-signing-key-file=" + saKey,
		"--service-cluster-ip-range=" + ServiceCIDR,
		// The "kubernetes" Endpoints cannot hold a loopback address.
		"--endpoint-reconciler-type=none",
		"--allow-privileged=true",
		"--feature-gates=" + c.opts.FeatureGates,
		"--runtime-config=" + c.release().RuntimeConfig,
	}
	if c.opts.RealNode {
		certFile, keyFile, err := c.kubeletClientCert()
		if err != nil {
			return err
		}
		args = append(args, "--kubelet-client-certificate="+certFile, "--kubelet-client-key="+keyFile,
			"--kubelet-preferred-address-types=InternalIP")
	}
	if c.opts.AuditLog {
		policy := filepath.Join(dir, "audit-policy.yaml")
		if err := os.WriteFile(policy, []byte(auditPolicy), 0o644); err != nil {
			return err
		}
		args = append(args, "--audit-policy-file="+policy, "--audit-log-path="+c.AuditLogPath(),
			"--audit-log-format=json", "--audit-log-mode=blocking", "--audit-log-maxsize=0")
	}
	args = append(args, c.opts.APIServerFlags...)
	return c.runComponent(ctx, componentSpec{
		name:   KubeAPIServer,
		binary: c.bins.Path(KubeAPIServer),
		args:   args,
		ports:  []int{c.ports[KubeAPIServer]},
		ready:  httpProbe(c.tokenClient(), url+"/readyz", "ok"),
	})
}

// tokenClient is an HTTP client that trusts the cluster CA and sends the
// admin token, for probes before client-go is set up.
func (c *Cluster) tokenClient() *http.Client { return c.tokenClientFor("") }

// tokenClientFor is tokenClient verifying the API server's certificate for
// serverName, "" for the address dialed: a forwarder's address is not in it.
func (c *Cluster) tokenClientFor(serverName string) *http.Client {
	pool := newCertPool(c.pki.caPEM)
	return &http.Client{
		Timeout: 2 * time.Second,
		Transport: bearerTransport{token: c.token, base: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12},
		}},
	}
}

// componentKubeconfig is the kubeconfig the components use. It lives in the
// data folder, with them, not in StateDir where users may overwrite it.
func (c *Cluster) componentKubeconfig() string {
	return filepath.Join(c.workDir, "admin.kubeconfig")
}

// kubeComponentArgs are the flags kube-controller-manager and
// kube-scheduler share: kubeconfigs, a loopback secure port for /healthz and
// no leader election.
func (c *Cluster) kubeComponentArgs(name, kubeconfig string) []string {
	return []string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		// No front proxy or client certificates here: do not look up their
		// CAs (which are absent and would only fill the log with errors).
		"--authentication-skip-lookup=true",
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", c.ports[name]),
		"--cert-dir=" + filepath.Join(c.workDir, name),
		"--leader-elect=false",
		"--feature-gates=" + c.opts.FeatureGates,
	}
}

// controllers run by kube-controller-manager. Without node-lifecycle new
// nodes keep the not-ready taint; without resourceclaim no ResourceClaim is
// made from a ResourceClaimTemplate.
var controllers = []string{
	"job-controller",
	"garbage-collector-controller",
	"namespace-controller",
	"serviceaccount-controller",
	// Writes tokens into Secrets of type kubernetes.io/service-account-token, such as
	// the chart's metrics scraper token its ServiceMonitor reads (e2e/monitoring).
	"serviceaccount-token-controller",
	"resourceclaim-controller",
	"node-lifecycle-controller",
	"pod-garbage-collector-controller",
	"ttl-after-finished-controller",
	"podgroup-protection-controller",
}

// realNodeControllers are the controllers real pods need besides: without
// endpointslice no headless Service resolves to its pods (JobSet's pod
// hostnames), without root-ca-certificate-publisher every pod waits on its
// service-account volume's kube-root-ca.crt ConfigMap, without deployment and
// replicaset a Deployment (the Helm chart's controller, e2e/helm) makes no pods and
// never rolls.
var realNodeControllers = []string{"endpointslice-controller", "root-ca-certificate-publisher-controller",
	"deployment-controller", "replicaset-controller"}

func (c *Cluster) startControllerManager(ctx context.Context) error {
	kubeconfig := c.componentKubeconfig()
	enabled := controllers
	if c.opts.RealNode {
		enabled = append(slices.Clone(controllers), realNodeControllers...)
	}
	args := append(c.kubeComponentArgs(KubeControllerManager, kubeconfig),
		"--controllers="+strings.Join(enabled, ","),
		"--use-service-account-credentials=false",
		// The key kube-apiserver verifies tokens with, for serviceaccount-token-controller.
		"--service-account-private-key-file="+c.pki.serviceAccountKeyFile(),
		// Published in every namespace as ConfigMap kube-root-ca.crt, which each
		// pod's service-account volume mounts.
		"--root-ca-file="+c.pki.caFile(),
	)
	return c.runComponent(ctx, componentSpec{
		name:   KubeControllerManager,
		binary: c.bins.Path(KubeControllerManager),
		args:   args,
		ports:  []int{c.ports[KubeControllerManager]},
		ready:  httpProbe(insecureLoopbackClient(), fmt.Sprintf("https://127.0.0.1:%d/healthz", c.ports[KubeControllerManager]), "ok"),
	})
}

func (c *Cluster) startScheduler(ctx context.Context) error {
	kubeconfig := c.componentKubeconfig()
	return c.runComponent(ctx, componentSpec{
		name:   KubeScheduler,
		binary: c.bins.Path(KubeScheduler),
		args:   c.kubeComponentArgs(KubeScheduler, kubeconfig),
		ports:  []int{c.ports[KubeScheduler]},
		ready:  httpProbe(insecureLoopbackClient(), fmt.Sprintf("https://127.0.0.1:%d/healthz", c.ports[KubeScheduler]), "ok"),
	})
}

// jobSetConfig is the JobSet controller's Configuration: our own serving
// certificate instead of its internal cert management, no leader election,
// no metrics, and loopback listeners.
const jobSetConfig = `apiVersion: config.jobset.x-k8s.io/v1alpha1
kind: Configuration
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
metrics:
  bindAddress: "0"
health:
  healthProbeBindAddress: 127.0.0.1:%d
webhook:
  host: 127.0.0.1
  port: %d
  certDir: %s
`

func (c *Cluster) startJobSet(ctx context.Context) error {
	kubeconfig := c.componentKubeconfig()
	certDir, err := c.pki.servingCert(JobSet)
	if err != nil {
		return err
	}
	config := filepath.Join(c.workDir, "jobset-config.yaml")
	data := fmt.Sprintf(jobSetConfig, c.ports[portJobSetHealth], c.ports[JobSet], certDir)
	if err := os.WriteFile(config, []byte(data), 0o644); err != nil {
		return err
	}
	return c.runComponent(ctx, componentSpec{
		name:   JobSet,
		binary: c.bins.Path(JobSet),
		args:   []string{"--config=" + config, "--kubeconfig=" + kubeconfig},
		ports:  []int{c.ports[JobSet], c.ports[portJobSetHealth]},
		// readyz includes the webhook server's started check.
		ready: httpProbe(http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/readyz", c.ports[portJobSetHealth]), "ok"),
	})
}

// kwokFakeNodeAnnotation marks the nodes kwok manages.
const kwokFakeNodeAnnotation = "kwok.x-k8s.io/node"

func (c *Cluster) startKwok(ctx context.Context) error {
	kubeconfig := c.componentKubeconfig()
	stages, err := c.kwokStages()
	if err != nil {
		return err
	}
	return c.runComponent(ctx, componentSpec{
		name:   Kwok,
		binary: c.bins.Path(Kwok),
		args: []string{
			"--kubeconfig=" + kubeconfig,
			"--config=" + stages,
			"--manage-all-nodes=false",
			"--manage-nodes-with-annotation-selector=" + kwokFakeNodeAnnotation + "=fake",
			"--node-lease-duration-seconds=40",
			"--cidr=10.0.0.0/16",
			fmt.Sprintf("--server-address=127.0.0.1:%d", c.ports[Kwok]),
		},
		ports: []int{c.ports[Kwok]},
		ready: httpProbe(http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/healthz", c.ports[Kwok]), ""),
	})
}

// kwokStages concatenates kwok's own node stages (initialise, heartbeat via
// leases) with Trainyard's pod stages into one config file.
func (c *Cluster) kwokStages() (string, error) {
	var b strings.Builder
	for _, asset := range []string{assetKwokNodeInit, assetKwokNodeLease} {
		data, err := os.ReadFile(c.bins.Path(asset))
		if err != nil {
			return "", err
		}
		b.Write(data)
		b.WriteString("\n---\n")
	}
	pods, err := assets.ReadFile("assets/pod-stages.yaml")
	if err != nil {
		return "", err
	}
	b.Write(pods)
	path := filepath.Join(c.workDir, "kwok-stages.yaml")
	return path, os.WriteFile(path, []byte(b.String()), 0o644)
}

// httpProbe succeeds when GET url answers 200 with a body containing want.
func httpProbe(client *http.Client, url, want string) probe {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
			return fmt.Errorf("GET %s: %s %q", url, resp.Status, strings.TrimSpace(string(body)))
		}
		return nil
	}
}

// insecureLoopbackClient probes the health endpoints of
// kube-controller-manager and kube-scheduler, which serve self-signed
// certificates they generate at start. It only ever dials 127.0.0.1.
func insecureLoopbackClient() *http.Client {
	dialer := &net.Dialer{Timeout: 2 * time.Second}
	return &http.Client{
		Timeout: 2 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}, //nolint:gosec // loopback health probe only
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				host, port, err := net.SplitHostPort(addr)
				if err != nil || host != "127.0.0.1" {
					return nil, fmt.Errorf("refusing to probe %s: only 127.0.0.1 is allowed", addr)
				}
				return dialer.DialContext(ctx, network, net.JoinHostPort(host, port))
			},
		},
	}
}

type bearerTransport struct {
	token string
	base  http.RoundTripper
}

func (t bearerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+t.token)
	return t.base.RoundTrip(req)
}
