package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Cluster is a running local control plane, either started by [Up] (then
// [Cluster.Down] stops it) or attached to by [Attach].
type Cluster struct {
	opts       Options
	bins       *Binaries
	workDir    string // removed by Down; "" when attached
	kubeconfig string
	restConfig *rest.Config
	client     kubernetes.Interface
	dynamic    dynamic.Interface
	apiext     apiextensionsclient.Interface
	// prometheusDir is the Prometheus component's folder of an attached cluster.
	prometheusDir string

	pki       *pki
	realNode  *RealNodeState // nil without Options.RealNode
	token     string
	ports     map[string]int // see allocatePorts
	mu        sync.Mutex     // guards procs and the state file
	procs     []*process     // in start order
	downOnce  sync.Once
	downErr   error
	startedAt time.Time
}

// Up builds (or reuses) the binaries and starts a cluster as described in the
// package documentation. It returns once the API server is ready, every CRD
// is established, the JobSet webhooks admit requests (unless
// opts.WithoutJobSetController) and opts.Nodes fake nodes are Ready and
// untainted: about 10s on 2 cores with cached binaries.
//
// Up refuses to start when StateDir's state file names a live cluster (run
// DownFromState or `localcluster down` first); a stale one, left by a
// process that died, is cleaned up. On error, everything started so far is
// stopped again; a component that fails is reported as a *StartError naming
// its log file, within opts.StartTimeout.
func Up(ctx context.Context, opts Options) (_ *Cluster, err error) {
	if err := opts.withDefaults(); err != nil {
		return nil, err
	}
	bins, err := BuildAll(ctx, opts)
	if err != nil {
		return nil, err
	}
	if err := prepareStateDir(opts); err != nil {
		return nil, err
	}
	workDir, err := os.MkdirTemp(opts.TempDir, workDirPrefix)
	if err != nil {
		return nil, fmt.Errorf("creating data dir: %w", err)
	}
	c := &Cluster{
		opts: opts, bins: bins, workDir: workDir, startedAt: time.Now(),
		kubeconfig: filepath.Join(opts.StateDir, "kubeconfig"),
		token:      randomToken(),
	}
	defer func() {
		if err != nil {
			if downErr := c.Down(); downErr != nil {
				err = errors.Join(err, fmt.Errorf("cleaning up after the failed start: %w", downErr))
			}
		}
	}()
	if err := c.writeState(); err != nil { // records workDir before any process exists
		return nil, err
	}
	if err := c.start(ctx); err != nil {
		return nil, err
	}
	fmt.Fprintf(opts.Progress, "cluster ready in %s; logs in %s\n", time.Since(c.startedAt).Round(100*time.Millisecond), opts.LogDir)
	return c, nil
}

// BuildAll builds the cluster's binaries (Build of opts.Build) and, with
// opts.RealNode, its images (opts.Images.Prepare) beside them: a cold start pays
// the longer of the two, not their sum (each ~30 minutes cold on 2 cores). The
// first error cancels the other build and is the one returned, saying which build
// it stopped.
func BuildAll(ctx context.Context, opts Options) (*Binaries, error) {
	if !opts.RealNode || opts.Images == nil {
		return Build(ctx, opts.Build)
	}
	return buildBeside(ctx,
		func(ctx context.Context) error { return opts.Images.Prepare(ctx, opts.Progress) },
		func(ctx context.Context) (*Binaries, error) { return Build(ctx, opts.Build) })
}

// buildBeside runs images beside binaries; the first to fail stops the other.
func buildBeside(ctx context.Context, images func(context.Context) error, binaries func(context.Context) (*Binaries, error)) (*Binaries, error) {
	ctx, failures := newFirstFailure(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := images(ctx); err != nil {
			failures.fail("the real node's images", fmt.Errorf("building the real node's images: %w", err))
		}
	}()
	bins, err := binaries(ctx)
	failures.fail("the control plane's binaries", err)
	<-done
	if err := failures.Err(); err != nil {
		return nil, err
	}
	return bins, nil
}

// workDirPrefix names the data folders Up creates; DownFromState only ever
// removes folders named so.
const workDirPrefix = "trainyard-cluster-"

// start runs the startup sequence. Steps that only need the API server run
// concurrently to keep a warm start short on two cores.
func (c *Cluster) start(ctx context.Context) error {
	if err := c.allocatePorts(); err != nil {
		return err
	}
	var err error
	if c.pki, err = newPKI(filepath.Join(c.workDir, "pki")); err != nil {
		return err
	}
	if err := c.startEtcd(ctx); err != nil {
		return err
	}
	if c.opts.RealNode {
		if err := checkRealNodeHost(&c.opts); err != nil {
			return err
		}
	}
	if err := c.startAPIServer(ctx); err != nil {
		return err
	}
	for _, path := range []string{c.componentKubeconfig(), c.kubeconfig} {
		if err := c.writeKubeconfig(path); err != nil {
			return err
		}
	}
	if err := c.connect(); err != nil {
		return err
	}
	if err := parallel(
		func() error { return c.startControllerManager(ctx) },
		func() error { return c.startScheduler(ctx) },
		func() error { return c.startKwok(ctx) },
		func() error { return c.installDeviceClass(ctx) },
		func() error {
			if !c.opts.Prometheus {
				return nil
			}
			return c.startPrometheus(ctx)
		},
		func() error {
			if !c.opts.RealNode {
				return nil
			}
			return c.startRealNode(ctx)
		},
		func() error {
			if err := c.installCRDs(ctx); err != nil {
				return err
			}
			return parallel(
				func() error {
					if c.opts.WithoutJobSetController {
						return nil
					}
					if err := c.startJobSet(ctx); err != nil {
						return err
					}
					return c.installJobSetWebhooks(ctx)
				},
				func() error {
					if !c.opts.Kueue {
						return nil
					}
					if err := c.startKueue(ctx); err != nil {
						return err
					}
					return c.installKueueWebhooks(ctx)
				},
			)
		},
	); err != nil {
		return err
	}
	return c.addInitialNodes(ctx)
}

// parallel runs fns concurrently and joins their errors.
func parallel(fns ...func() error) error {
	errs := make([]error, len(fns))
	var wg sync.WaitGroup
	for i, fn := range fns {
		wg.Go(func() { errs[i] = fn() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Attach returns a Cluster for the live API server of an existing admin
// kubeconfig, e.g. one written by `localcluster up`. Its Down is a no-op;
// node helpers work as on a cluster started by Up.
func Attach(ctx context.Context, kubeconfig string) (*Cluster, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig %s: %w", kubeconfig, err)
	}
	c := &Cluster{kubeconfig: kubeconfig, restConfig: cfg, opts: Options{NodeShape: DefaultNodeShape()}}
	if s, err := ReadState(filepath.Dir(kubeconfig)); err == nil {
		c.opts.LogDir = s.LogDir // for error messages, when started by localcluster
		c.realNode = s.RealNode
		for _, p := range s.Processes {
			if p.Name == Prometheus && len(p.Ports) > 0 { // localcluster up --prometheus
				c.opts.Prometheus = true
				c.ports = map[string]int{Prometheus: p.Ports[0]}
				c.prometheusDir = filepath.Join(s.WorkDir, Prometheus)
			}
		}
	}
	if err := c.connect(); err != nil {
		return nil, err
	}
	if err := readyz(ctx, c.client); err != nil {
		return nil, fmt.Errorf("cluster of %s is not ready: %w", kubeconfig, err)
	}
	if minor, err := serverMinor(c.client); err == nil {
		c.opts.KubeVersion = minor
	}
	return c, nil
}

// Kubeconfig returns the path of the admin kubeconfig.
func (c *Cluster) Kubeconfig() string { return c.kubeconfig }

// RESTConfig returns a copy of the admin client configuration.
func (c *Cluster) RESTConfig() *rest.Config { return rest.CopyConfig(c.restConfig) }

// Client returns a typed client with admin rights.
func (c *Cluster) Client() kubernetes.Interface { return c.client }

// Dynamic returns a dynamic client with admin rights, for the
// scheduling.k8s.io/v1alpha2 (Kubernetes 1.36, see WorkloadAPI) and CRD types
// client-go has no types for.
func (c *Cluster) Dynamic() dynamic.Interface { return c.dynamic }

// LogDir returns the folder of the component logs.
func (c *Cluster) LogDir() string { return c.opts.LogDir }

// BinaryPath returns the cached binary name (e.g. [Helm], [Kubectl]) of the
// cluster's build; it panics on a binary the build did not include.
func (c *Cluster) BinaryPath(name string) string { return c.bins.Path(name) }

// RegistryHost returns the real node's image registry as "127.0.0.1:<port>", or ""
// without a real node. The node pulls every registry's images from it: an image
// pushed as <RegistryHost>/<repository>:<tag> is pulled as <any registry>/<repository>:<tag>.
func (c *Cluster) RegistryHost() string {
	if c.realNode == nil {
		return ""
	}
	return fmt.Sprintf("127.0.0.1:%d", c.ports[Registry])
}

// WorkDir returns the temporary data folder ("" when attached).
func (c *Cluster) WorkDir() string { return c.workDir }

// Pids returns the process ids of the running components, in start order.
func (c *Cluster) Pids() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	pids := make([]int, 0, len(c.procs))
	for _, p := range c.procs {
		pids = append(pids, p.pid)
	}
	return pids
}

// ComponentPids maps each running component's name (Etcd, KubeAPIServer,
// ...) to its process id, e.g. to account the CPU each one uses. A
// Cluster from Attach has none.
func (c *Cluster) ComponentPids() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	pids := make(map[string]int, len(c.procs))
	for _, p := range c.procs {
		pids[p.name] = p.pid
	}
	return pids
}

// Ports returns every 127.0.0.1 port the components listen on.
func (c *Cluster) Ports() []int {
	ports := make([]int, 0, len(c.ports))
	for _, p := range c.ports {
		if p > 0 {
			ports = append(ports, p)
		}
	}
	slices.Sort(ports)
	return ports
}

// Down stops every component (SIGTERM to its process group, SIGKILL after
// 10s), waits until their ports are free, and removes the data folder, the
// state file and the kubeconfig; logs stay. It is safe to call more than
// once and on a partly started cluster; an attached cluster is left alone.
func (c *Cluster) Down() error {
	if c.workDir == "" {
		return nil
	}
	c.downOnce.Do(func() { c.downErr = c.down() })
	return c.downErr
}

func (c *Cluster) down() error {
	c.mu.Lock()
	procs := slices.Clone(c.procs)
	c.mu.Unlock()
	for _, p := range slices.Backward(procs) {
		p.stop(stopGrace)
	}
	var errs []error
	if c.realNode != nil {
		errs = append(errs, teardownRealNode(c.realNode))
	}
	if err := waitPortsFree(c.Ports(), 5*time.Second); err != nil {
		errs = append(errs, err)
	}
	if err := os.RemoveAll(c.workDir); err != nil {
		errs = append(errs, fmt.Errorf("removing %s: %w", c.workDir, err))
	}
	errs = append(errs, removeStateFiles(c.opts.StateDir))
	return errors.Join(errs...)
}

// waitPortsFree polls until every port can be bound again.
func waitPortsFree(ports []int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var busy []string
		for _, p := range ports {
			if checkPortFree(p) != nil {
				busy = append(busy, fmt.Sprint(p))
			}
		}
		if len(busy) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("ports still in use after stopping the cluster: %s", strings.Join(busy, ", "))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// runComponent starts spec with its log in LogDir and records it in the
// state file, so that a crash from here on can still be cleaned up.
func (c *Cluster) runComponent(ctx context.Context, spec componentSpec) error {
	if spec.timeout == 0 {
		spec.timeout = c.opts.StartTimeout
	}
	logPath := filepath.Join(c.opts.LogDir, spec.name+".log")
	start := time.Now()
	p, err := startProcess(ctx, spec, logPath, c.opts.Detach, func(p *process) { c.track(p) })
	if err != nil {
		return err
	}
	fmt.Fprintf(c.opts.Progress, "%s ready in %s (pid %d)\n", spec.name, time.Since(start).Round(100*time.Millisecond), p.pid)
	return nil
}

// track records a just-started process and rewrites the state file.
func (c *Cluster) track(p *process) {
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	if err := c.writeState(); err != nil {
		fmt.Fprintf(c.opts.Progress, "warning: %v\n", err)
	}
}

// connect builds the clients from restConfig, or from the admin token when
// the cluster was started here.
func (c *Cluster) connect() error {
	if c.restConfig == nil {
		c.restConfig = &rest.Config{
			Host:            c.serverURL(),
			BearerToken:     c.token,
			TLSClientConfig: rest.TLSClientConfig{CAData: c.pki.caPEM},
		}
	}
	cfg := rest.CopyConfig(c.restConfig)
	cfg.QPS, cfg.Burst = 100, 200
	var err error
	if c.client, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	if c.dynamic, err = dynamic.NewForConfig(cfg); err != nil {
		return err
	}
	c.apiext, err = apiextensionsclient.NewForConfig(cfg)
	return err
}

func (c *Cluster) serverURL() string {
	return fmt.Sprintf("https://127.0.0.1:%d", c.ports[KubeAPIServer])
}

// writeKubeconfig writes an admin kubeconfig (token auth, CA pinned) to path.
func (c *Cluster) writeKubeconfig(path string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["trainyard"] = &clientcmdapi.Cluster{Server: c.serverURL(), CertificateAuthorityData: c.pki.caPEM}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: c.token}
	cfg.Contexts["trainyard"] = &clientcmdapi.Context{Cluster: "trainyard", AuthInfo: "admin", Namespace: "default"}
	cfg.CurrentContext = "trainyard"
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	return nil
}

// readyz asks the API server's /readyz.
func readyz(ctx context.Context, client kubernetes.Interface) error {
	body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("/readyz: %w", err)
	}
	if strings.TrimSpace(string(body)) != "ok" {
		return fmt.Errorf("/readyz: %q", body)
	}
	return nil
}
