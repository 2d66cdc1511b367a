package faults

import (
	"context"
	"io"
	"math/rand/v2"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/trainyard/trainyard/e2e/cluster"
)

// etcdOutage is how long TestEtcdRestartAndCutConnections keeps etcd stopped.
const etcdOutage = 5 * time.Second

// TestEtcdRestartAndCutConnections restarts etcd in the middle of 600 TrainJobs
// arriving over 40 s while every connection of the controller to the API server is cut
// every 3 to 8 s (seeded), watches included: each cut ends the controller's watches and
// in-flight requests at once, as a load balancer or an API server restart behind one
// would. No TrainJob may be missed: every one gets exactly one JobSet, within 3 min of
// the last one's creation (when the cuts stop).
//
// kube-apiserver's --min-request-timeout does not shorten these watches: client-go's
// reflectors ask for their own timeout (5 to 10 min), which the API server honours, so
// the test cuts the connections instead.
func TestEtcdRestartAndCutConnections(t *testing.T) {
	timed(t)
	const n = 600
	e := newEnv(t)
	e.settleAfterOutage(t)
	ns := e.namespace(t)
	r := rng(t)
	p := startCuttingProxy(t, e.c.RESTConfig().Host[len("https://"):])
	kubeconfig := e.proxiedKubeconfig(t, "trainyard-cut", p.addr())
	ctrl := e.startController(t, "", "trainyard-cut", "--kubeconfig="+kubeconfig)
	stopCuts := p.cutEvery(r, 3*time.Second, 8*time.Second)

	b := e.startBurst(ns, n, time.Second/15) // 40 s of arrivals, several cuts
	b.waitCreated(n / 3)
	if err := e.c.StopComponent(cluster.Etcd); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	t.Logf("etcd stopped after %d TrainJobs created", b.created.Load())
	time.Sleep(etcdOutage)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := e.c.StartComponent(ctx, cluster.Etcd); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	b.wait(t, 5*time.Minute)
	// The cuts end with the arrivals: the TrainJobs created while watches broke must be
	// found; each cut also lengthens client-go's reflector backoff (up to 1 min), which
	// would only lengthen the wait.
	cuts := stopCuts()
	created := time.Now()
	final := e.waitAllJobSets(t, ns, n, 3*time.Minute)
	expectExact(t, final, n)
	if exited, err := ctrl.Exited(); exited {
		t.Fatalf("the controller exited: %v (log: %s)", err, ctrl.LogPath)
	}
	t.Logf("etcd down %s; %d connection cuts (%d connections cut) during the arrivals; the last JobSet %s after the last TrainJob, %s after etcd was back; %d create retries; %s",
		back.Sub(stopped).Round(100*time.Millisecond), cuts, p.cutConns, time.Since(created).Round(100*time.Millisecond), time.Since(back).Round(100*time.Millisecond), b.retries.Load(), final)
	t.Logf("missed %d, duplicates %d", len(final.lost), final.duplicates)
}

// proxiedKubeconfig is userKubeconfig with the server replaced by addr (a proxy that
// passes TLS through: the API server's certificate holds 127.0.0.1).
func (e *env) proxiedKubeconfig(t *testing.T, user, addr string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(e.userKubeconfig(t, user))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.Server = "https://" + addr
	}
	path := filepath.Join(t.TempDir(), "proxied.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// cuttingProxy forwards TCP connections from a 127.0.0.1 port to target and can cut
// them all at once.
type cuttingProxy struct {
	ln       net.Listener
	target   string
	mu       sync.Mutex
	conns    map[net.Conn]struct{}
	cutConns int // connections closed by cuts; guarded by mu
	wg       sync.WaitGroup
}

func startCuttingProxy(t *testing.T, target string) *cuttingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cuttingProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.serve)
	t.Cleanup(func() {
		ln.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *cuttingProxy) addr() string { return p.ln.Addr().String() }

func (p *cuttingProxy) serve() {
	for {
		down, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.wg.Go(func() { p.forward(down) })
	}
}

// forward copies both ways between down and a new connection to the target until
// either side ends or a cut closes both.
func (p *cuttingProxy) forward(down net.Conn) {
	up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		down.Close()
		return
	}
	p.mu.Lock()
	p.conns[down], p.conns[up] = struct{}{}, struct{}{}
	p.mu.Unlock()
	var copies sync.WaitGroup
	copies.Go(func() { copyThenClose(up, down) })
	copies.Go(func() { copyThenClose(down, up) })
	copies.Wait()
	p.mu.Lock()
	delete(p.conns, down)
	delete(p.conns, up)
	p.mu.Unlock()
}

// copyThenClose copies src to dst until either ends (a cut closes both: the error
// says nothing new), then closes both so the other direction ends too.
func copyThenClose(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
}

// cut closes every open connection, both sides.
func (p *cuttingProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
	p.cutConns += len(p.conns) / 2
}

// cutEvery cuts every connection at random intervals in [lo, hi) drawn from r, until
// the returned func is called; that func returns how many cuts there were.
func (p *cuttingProxy) cutEvery(r *rand.Rand, lo, hi time.Duration) func() int {
	stop := make(chan struct{})
	done := make(chan int)
	go func() {
		cuts := 0
		for {
			select {
			case <-stop:
				done <- cuts
				return
			case <-time.After(lo + time.Duration(r.Int64N(int64(hi-lo)))):
				p.cut()
				cuts++
			}
		}
	}()
	return func() int { close(stop); return <-done }
}
