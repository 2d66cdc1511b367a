package cluster

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// StopComponent stops the running component name (Etcd, KubeAPIServer, ...)
// as Down does (SIGTERM to its process group, SIGKILL after 10s) and waits
// until its ports are free, so that [Cluster.StartComponent] can start it
// again in place. Its data stays. Errors: no such component was started
// here (an attached cluster has none), or its ports stay busy.
func (c *Cluster) StopComponent(name string) error {
	p, err := c.component(name)
	if err != nil {
		return err
	}
	p.stop(stopGrace)
	return waitPortsFree(p.ports, 5*time.Second)
}

// StartComponent starts the stopped component name again with the same
// binary, flags, ports and data folder, and waits until it is ready as [Up]
// does (within Options.StartTimeout). Clients of the cluster reconnect by
// themselves. Errors: no such component, it still runs, or a *StartError.
func (c *Cluster) StartComponent(ctx context.Context, name string) error {
	old, err := c.component(name)
	if err != nil {
		return err
	}
	select {
	case <-old.exited:
	default:
		return fmt.Errorf("%s is still running (pid %d): stop it first", name, old.pid)
	}
	start := time.Now()
	_, err = startProcess(ctx, old.spec, old.logPath, c.opts.Detach, func(p *process) {
		c.mu.Lock()
		if i := slices.Index(c.procs, old); i >= 0 {
			c.procs[i] = p // keep the start order, which Down reverses
		}
		c.mu.Unlock()
		if err := c.writeState(); err != nil {
			fmt.Fprintf(c.opts.Progress, "warning: %v\n", err)
		}
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(c.opts.Progress, "%s started again, ready in %s\n", name, time.Since(start).Round(100*time.Millisecond))
	return nil
}

// component returns the last process started for name.
func (c *Cluster) component(name string) (*process, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range slices.Backward(c.procs) {
		if p.name == name {
			return p, nil
		}
	}
	return nil, fmt.Errorf("no component %q was started by this process", name)
}

// UserKubeconfig writes a kubeconfig in the cluster's data folder that
// authenticates as user, member of groups, with a client certificate the
// cluster CA signs, and returns its path. Two processes given different
// users are told apart in the audit log (user.username). Errors: an
// attached cluster (no CA key here), or writing the file.
func (c *Cluster) UserKubeconfig(user string, groups ...string) (string, error) {
	if c.pki == nil {
		return "", fmt.Errorf("the cluster was not started by this process: no CA to sign a client certificate")
	}
	certPEM, keyPEM, err := c.pki.clientCert(user, groups...)
	if err != nil {
		return "", err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["trainyard"] = &clientcmdapi.Cluster{Server: c.serverURL(), CertificateAuthorityData: c.pki.caPEM}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	cfg.Contexts["trainyard"] = &clientcmdapi.Context{Cluster: "trainyard", AuthInfo: user, Namespace: "default"}
	cfg.CurrentContext = "trainyard"
	path := filepath.Join(c.workDir, "user-"+user+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	return path, nil
}

// auditLogFile is the audit log's name in StateDir (Options.AuditLog).
const auditLogFile = "audit.log"

// AuditLogPath returns where kube-apiserver writes its audit log with
// Options.AuditLog: <StateDir>/audit.log.
func (c *Cluster) AuditLogPath() string { return filepath.Join(c.opts.StateDir, auditLogFile) }

// auditPolicy logs, once each when the response is complete, the writes to
// Trainyard's and JobSet's resources (and their subresources, e.g.
// trainjobs/status) at level Metadata, and nothing else.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
  resources:
  - group: trainer.kubeflow.org
  - group: jobset.x-k8s.io
- level: None
`

// AuditEvent is the part of an audit.k8s.io/v1 Event the tests read.
type AuditEvent struct {
	// Stage is "ResponseComplete" (or "Panic"); the policy omits RequestReceived.
	Stage string `json:"stage"`
	// Verb is the API verb: create, update, patch, delete, ...
	Verb string `json:"verb"`
	User struct {
		Username string   `json:"username"`
		Groups   []string `json:"groups"`
	} `json:"user"`
	UserAgent string `json:"userAgent"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
		APIGroup    string `json:"apiGroup"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int32 `json:"code"`
	} `json:"responseStatus"`
	// RequestReceivedTimestamp is when the API server received the request,
	// StageTimestamp when it completed it (microsecond precision).
	RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
	StageTimestamp           time.Time `json:"stageTimestamp"`
}

// Code is the HTTP status code of the response, 0 when none was recorded.
func (e AuditEvent) Code() int32 {
	if e.ResponseStatus == nil {
		return 0
	}
	return e.ResponseStatus.Code
}

// Succeeded reports a 2xx response: the write happened.
func (e AuditEvent) Succeeded() bool { return e.Code() >= 200 && e.Code() < 300 }

// ReadAuditLog parses the whole audit log at path (JSON lines, as Options.AuditLog
// writes it) in file order, which is the order the API server completed the requests
// in. A last line cut short by a write in progress is left out. Errors: the file
// cannot be read, or a complete line is not JSON.
func ReadAuditLog(path string) ([]AuditEvent, error) {
	return NewAuditLogReader(path).Read()
}

// AuditLogReader reads an audit log incrementally: each Read returns the events
// completed since the previous one, so a test that polls the log does not parse it
// all again, and a test can skip what earlier tests left (one Read at its start).
type AuditLogReader struct {
	path   string
	offset int64 // just past the last complete line read
}

// NewAuditLogReader returns a reader of the audit log at path from its beginning.
func NewAuditLogReader(path string) *AuditLogReader { return &AuditLogReader{path: path} }

// Read returns the events of the complete lines written since the previous Read, in
// file order; a line still being written is left for the next Read. Errors: the file
// cannot be read, or a complete line is not JSON (the reader then stays before it).
func (r *AuditLogReader) Read() ([]AuditEvent, error) {
	f, err := os.Open(r.path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(r.offset, io.SeekStart); err != nil {
		return nil, err
	}
	var events []AuditEvent
	br := bufio.NewReaderSize(f, 1<<20)
	for {
		line, err := br.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return events, nil // a partial last line is a write in progress
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", r.path, err)
		}
		var e AuditEvent
		if err := json.Unmarshal(line, &e); err != nil {
			return nil, fmt.Errorf("%s: at byte %d: %w", r.path, r.offset, err)
		}
		events = append(events, e)
		r.offset += int64(len(line))
	}
}

// StartJobSetController starts the JobSet controller and installs its admission
// webhooks in a cluster started with Options.WithoutJobSetController, as [Up]
// does without it, and returns once a dry-run JobSet is defaulted. The scale
// benchmark's peer mode times admission with it off, then the lifecycle with it
// on, on one control plane. Errors: it already runs, or a *StartError.
func (c *Cluster) StartJobSetController(ctx context.Context) error {
	if _, err := c.component(JobSet); err == nil {
		return fmt.Errorf("%s already runs", JobSet)
	}
	if err := c.startJobSet(ctx); err != nil {
		return err
	}
	return c.installJobSetWebhooks(ctx)
}

// ServingCert writes a serving certificate for 127.0.0.1 and localhost, signed
// by the cluster's CA, as tls.crt and tls.key into a folder of the cluster's
// data named after name, and returns that folder: for a webhook or metrics
// server a test runs beside the cluster.
func (c *Cluster) ServingCert(name string) (string, error) {
	if c.pki == nil {
		return "", fmt.Errorf("serving certificate %s: an attached cluster has no CA key", name)
	}
	return c.pki.servingCert(name)
}
