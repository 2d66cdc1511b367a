package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"
)

// The real node's kubelet: its configuration, its identity towards the API
// server, and the API server's towards it.

// startKubelet writes the kubelet's identity and configuration and runs it.
// Its serving port is on the bridge address, which is also the node's
// InternalIP: the API server reaches it there for logs, exec and
// port-forward, with a client certificate the kubelet checks against the
// cluster CA.
func (c *Cluster) startKubelet(ctx context.Context) error {
	rn := c.realNode
	dir := filepath.Join(rn.Dir, "kubelet")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	kubeconfig, err := c.nodeKubeconfig(ctx, dir)
	if err != nil {
		return err
	}
	config := map[string]any{
		"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
		"address": rn.Gateway, "port": c.ports[Kubelet], "readOnlyPort": 0,
		"healthzBindAddress": "127.0.0.1", "healthzPort": c.ports[portKubeletHealth],
		"authentication": map[string]any{
			"anonymous": map[string]bool{"enabled": false},
			"webhook":   map[string]bool{"enabled": true},
			"x509":      map[string]string{"clientCAFile": c.pki.caFile()},
		},
		"authorization": map[string]string{"mode": "Webhook"},
		// This machine runs cgroup v1, which kubelet 1.36 refuses unless told.
		"failCgroupV1": false, "cgroupDriver": "cgroupfs", "cgroupRoot": rn.CgroupRoot,
		"failSwapOn": false,
		"clusterDNS": []string{rn.Gateway}, "clusterDomain": ClusterDomain,
		// No host resolv.conf: pods know only the cluster's DNS.
		"resolvConf":          "",
		"podLogsDir":          filepath.Join(rn.Dir, "pod-logs"),
		"maxPods":             110,
		"serializeImagePulls": false,
		// A shared development disk is often past the default thresholds; the
		// node must not evict or garbage-collect images because of other work.
		"evictionHard":                map[string]string{"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
		"imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
		"containerRuntimeEndpoint":  "unix://" + c.containerdSocket(),
		"staticPodPath":             "",
		"registerNode":              true,
		"nodeStatusReportFrequency": "10s",
	}
	configPath := filepath.Join(dir, "config.yaml")
	if err := writeYAML(configPath, config); err != nil {
		return err
	}
	return c.runComponent(ctx, componentSpec{
		name:   Kubelet,
		binary: c.bins.Path(Kubelet),
		args: []string{
			"--config=" + configPath,
			"--kubeconfig=" + kubeconfig,
			"--root-dir=" + filepath.Join(dir, "root"),
			"--cert-dir=" + filepath.Join(dir, "pki"),
			"--hostname-override=" + RealNodeName,
			"--node-ip=" + rn.Gateway,
			"--node-labels=" + LabelRealNode + "=true",
			"--v=2",
		},
		ports:   []int{c.ports[Kubelet], c.ports[portKubeletHealth]},
		ready:   httpProbe(http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/healthz", c.ports[portKubeletHealth]), "ok"),
		timeout: realNodeReadyTimeout,
	})
}

// nodeKubeconfig writes the kubelet's kubeconfig: a client certificate for
// system:node:<name> in group system:nodes, bound to the built-in system:node
// ClusterRole (the API server runs RBAC alone, without the Node authorizer).
func (c *Cluster) nodeKubeconfig(ctx context.Context, dir string) (string, error) {
	return c.identityKubeconfig(ctx, dir, "system:node:"+RealNodeName, "system:node", "system:nodes")
}

// identityKubeconfig writes <dir>/kubeconfig for a node component: a client
// certificate of the cluster CA for user (in groups), whom a ClusterRoleBinding
// named trainyard:<user's last part> binds to clusterRole. It returns the file.
func (c *Cluster) identityKubeconfig(ctx context.Context, dir, user, clusterRole string, groups ...string) (string, error) {
	certPEM, keyPEM, err := c.pki.clientCert(user, groups...)
	if err != nil {
		return "", err
	}
	short := user[strings.LastIndex(user, ":")+1:]
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "trainyard:" + short},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	if _, err := c.client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("binding %s to %s: %w", user, clusterRole, err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["trainyard"] = &clientcmdapi.Cluster{Server: c.serverURL(), CertificateAuthorityData: c.pki.caPEM}
	cfg.AuthInfos[short] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	cfg.Contexts["trainyard"] = &clientcmdapi.Context{Cluster: "trainyard", AuthInfo: short}
	cfg.CurrentContext = "trainyard"
	path := filepath.Join(dir, "kubeconfig")
	return path, clientcmd.WriteToFile(*cfg, path)
}

// kubeletClientCert writes the client certificate the API server presents to
// the kubelet (--kubelet-client-certificate) and returns its files.
func (c *Cluster) kubeletClientCert() (certFile, keyFile string, err error) {
	certPEM, keyPEM, err := c.pki.clientCert("kube-apiserver-kubelet-client", "system:masters")
	if err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(c.pki.dir, "kubelet-client.crt"), filepath.Join(c.pki.dir, "kubelet-client.key")
	return certFile, keyFile, errors.Join(os.WriteFile(certFile, certPEM, 0o644), os.WriteFile(keyFile, keyPEM, 0o600))
}

func writeYAML(path string, v any) error {
	data, err := yaml.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}
