package faults

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	watchtools "k8s.io/client-go/tools/watch"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard/trainyard/e2e/cluster"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
)

// staleWatchDelay is how far behind the API server the new leader's TrainJob cache is
// kept in TestNewLeaderWithALaggingCache: longer than a takeover (the lease must
// expire: leaseDuration after the old leader's last renewal) plus the old leader's
// suspend of every JobSet, so that the new leader leads while its TrainJobs are the
// ones before the suspend and its JobSets the ones after.
const staleWatchDelay = 25 * time.Second

// TestNewLeaderWithALaggingCache fails over to a replica whose TrainJob cache lags the
// old leader's last writes, as a new leader's can (a slow watch, a relist in
// progress), and audits what it writes. Replica b's TrainJob watch runs through a
// proxy that delays every event by staleWatchDelay; its JobSet watch does not. 200
// TrainJobs run; all are suspended (spec.suspend, as Kueue's preemption does); the
// leader a suspends their JobSets and writes Suspended=True; a is killed at once. b
// takes over seeing each TrainJob running and its JobSet suspended and built from a
// newer generation. It must not resume a JobSet (write the older spec over the newer)
// nor write Suspended=False over Suspended=True (a status computed from the older
// TrainJob): from a watch of both kinds over the whole test, no JobSet goes back to
// spec.suspend=false or to an older generation, and no TrainJob's Suspended condition
// leaves True. Before the status writes tested the resourceVersion they were computed
// from and the apply refused an older generation, b resumed the JobSets (issue 41
// finding 6).
func TestNewLeaderWithALaggingCache(t *testing.T) {
	timed(t)
	const n = 200
	e := newEnv(t)
	ns := e.namespace(t)
	const userA, userB = "trainyard-lagging-a", "trainyard-lagging-b"
	audit := e.auditFromNow(t)
	config := leaderElectionConfig(t, ns)
	a := e.startController(t, "a", userA, "--config="+config)
	cluster.Eventually(t, 30*time.Second, "replica a leads", func(ctx context.Context) (bool, string) {
		return a.ReadyzSays(ctx, "leader-election leading"), "not leading"
	})
	lagging := startLaggingProxy(t, e.userRESTConfig(t, userB), staleWatchDelay)
	b := e.startController(t, "b", userB, "--config="+config, "--kubeconfig="+lagging.kubeconfig(t))
	// Its TrainJob cache syncs staleWatchDelay late when the informer lists by watch.
	cluster.Eventually(t, staleWatchDelay+30*time.Second, "replica b follows", func(ctx context.Context) (bool, string) {
		return b.ReadyzSays(ctx, "leader-election following"), "not following"
	})

	burst := e.startBurst(ns, n, 0)
	burst.wait(t, 2*time.Minute)
	expectExact(t, e.waitAllJobSets(t, ns, n, 2*time.Minute), n)
	// b's TrainJob cache shows them all by now.
	time.Sleep(staleWatchDelay + 2*time.Second)

	seen := e.watchTransitions(t, ns)
	seen.waitAdded(t, n)
	suspended := time.Now()
	e.suspendAll(t, ns, n)
	cluster.Eventually(t, time.Minute, "every JobSet suspended from generation 2", func(ctx context.Context) (bool, string) {
		list, err := e.jobsets.JobsetV1alpha2().JobSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		done := 0
		for _, js := range list.Items {
			if js.Spec.Suspend != nil && *js.Spec.Suspend && js.Annotations[generationAnnotation] == "2" {
				done++
			}
		}
		return done == n, fmt.Sprintf("%d of %d", done, n)
	})
	a.Kill(t)
	killed := time.Now()
	cluster.Eventually(t, leaseDuration+10*time.Second, "replica b leads", func(ctx context.Context) (bool, string) {
		return b.ReadyzSays(ctx, "leader-election leading"), "not leading"
	})
	leading := time.Now()
	if caughtUp := suspended.Add(staleWatchDelay); !leading.Before(caughtUp) {
		t.Fatalf("b led %s after the suspends, when its TrainJob cache had caught up (%s): the test shows nothing; raise staleWatchDelay",
			leading.Sub(suspended).Round(100*time.Millisecond), staleWatchDelay)
	}
	// b works with the lagging cache until it catches up, then settles.
	time.Sleep(time.Until(suspended.Add(staleWatchDelay + 10*time.Second)))
	if exited, err := b.Exited(); exited {
		t.Fatalf("the new leader exited: %v (log: %s)", err, b.LogPath)
	}

	// And the new leader finishes what the old one left: every TrainJob Suspended=True.
	cluster.Eventually(t, 30*time.Second, "every TrainJob Suspended=True", func(ctx context.Context) (bool, string) {
		list, err := e.trainers.TrainerV1alpha1().TrainJobs(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		done := 0
		for i := range list.Items {
			if suspendedCondition(&list.Items[i]) {
				done++
			}
		}
		return done == n, fmt.Sprintf("%d of %d", done, n)
	})
	regressions, events := seen.stop()
	t.Logf("watch events seen: %v", events)
	if events["JobSet MODIFIED"] < n || events["TrainJob MODIFIED"] < n {
		t.Errorf("the watches saw %v, fewer than one update per JobSet and TrainJob: the audit saw nothing", events)
	}
	var refused, written int
	for _, ev := range readAudit(t, audit) {
		if ev.User.Username != userB || ev.ObjectRef == nil || ev.RequestReceivedTimestamp.Before(leading.Add(-leaseDuration)) {
			continue
		}
		switch {
		case ev.ObjectRef.Resource == "trainjobs" && ev.ObjectRef.Subresource == "status" && !ev.Succeeded():
			refused++
		case ev.ObjectRef.Resource == "jobsets" && ev.Verb == "patch" && ev.Succeeded():
			written++
		}
	}
	t.Logf("suspended %d TrainJobs; leader killed %s after, b led %s after the kill, %s before its TrainJob cache caught up; b's status writes refused as stale: %d; b's JobSet applies: %d; regressions: %d",
		n, killed.Sub(suspended).Round(100*time.Millisecond), leading.Sub(killed).Round(100*time.Millisecond),
		suspended.Add(staleWatchDelay).Sub(leading).Round(100*time.Millisecond), refused, written, len(regressions))
	for i, r := range regressions {
		if i == 10 {
			t.Errorf("… and %d more", len(regressions)-10)
			break
		}
		t.Errorf("regressed: %s", r)
	}
	if written != 0 {
		t.Errorf("the new leader applied %d JobSets; every JobSet was as the TrainJob's newest spec wants it", written)
	}
}

// generationAnnotation is objectkeys.AnnotationTrainJobGeneration, the TrainJob
// generation a JobSet was built from.
const generationAnnotation = "trainyard.dev/trainjob-generation"

// suspendAll sets spec.suspend on the n TrainJobs of ns, 16 at a time.
func (e *env) suspendAll(t *testing.T, ns string, n int) {
	t.Helper()
	tjs := e.trainers.TrainerV1alpha1().TrainJobs(ns)
	list, err := tjs.List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != n {
		t.Fatalf("%d TrainJobs in %s, want %d", len(list.Items), ns, n)
	}
	names := make(chan string)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for name := range names {
				if _, err := tjs.Patch(t.Context(), name, types.MergePatchType, []byte(`{"spec":{"suspend":true}}`), metav1.PatchOptions{}); err != nil {
					t.Errorf("suspending TrainJob %s: %v", name, err)
				}
			}
		})
	}
	for _, tj := range list.Items {
		names <- tj.Name
	}
	close(names)
	wg.Wait()
}

// transitions watches the TrainJobs and JobSets of a namespace and collects
// regressions: a JobSet that was suspended from generation g going back to running or
// to an older generation, a TrainJob whose Suspended condition was True leaving True
// while its spec.suspend is true.
type transitions struct {
	mu          sync.Mutex
	regressions []string
	// events counts the watch events seen, by kind: a watch that saw none proves nothing.
	events map[string]int
	ctx    context.Context // the watches'; done once stop is called
	cancel context.CancelFunc
	done   sync.WaitGroup
}

func (e *env) watchTransitions(t *testing.T, ns string) *transitions {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	tr := &transitions{ctx: ctx, cancel: cancel, events: map[string]int{}}
	jss, tjs := e.jobsets.JobsetV1alpha2().JobSets(ns), e.trainers.TrainerV1alpha1().TrainJobs(ns)
	jsw := listAndWatch(t, ctx, func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return jss.List(ctx, o) }, jss.Watch)
	tjw := listAndWatch(t, ctx, func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return tjs.List(ctx, o) }, tjs.Watch)
	tr.done.Go(func() {
		suspendedAt := map[string]int64{} // JobSet name → generation it was suspended from
		for ev := range jsw {
			tr.saw("JobSet", ev)
			js, ok := ev.Object.(*jobsetv1alpha2.JobSet)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			g, _ := strconv.ParseInt(js.Annotations[generationAnnotation], 10, 64)
			running := js.Spec.Suspend == nil || !*js.Spec.Suspend
			if from, ok := suspendedAt[js.Name]; ok && (running || g < from) {
				tr.add(fmt.Sprintf("JobSet %s, suspended from TrainJob generation %d, now suspend=%t from generation %d", js.Name, from, !running, g))
			}
			if !running && g > suspendedAt[js.Name] {
				suspendedAt[js.Name] = g
			}
		}
	})
	tr.done.Go(func() {
		wasSuspended := map[string]bool{}
		for ev := range tjw {
			tr.saw("TrainJob", ev)
			tj, ok := ev.Object.(*trainer.TrainJob)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			now := suspendedCondition(tj)
			if wasSuspended[tj.Name] && !now && tj.Spec.Suspend != nil && *tj.Spec.Suspend {
				tr.add(fmt.Sprintf("TrainJob %s: Suspended left True while spec.suspend is true (resourceVersion %s)", tj.Name, tj.ResourceVersion))
			}
			wasSuspended[tj.Name] = now
		}
	})
	t.Cleanup(func() { _, _ = tr.stop() })
	return tr
}

// suspendedCondition reports whether tj's Suspended condition is True.
func suspendedCondition(tj *trainer.TrainJob) bool {
	for _, c := range tj.Status.Conditions {
		if c.Type == trainer.TrainJobSuspended {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}

// listAndWatch returns every object list returns as an ADDED event, then every change
// after the list, until ctx is done. The watch resumes from the last resourceVersion
// when the API server closes it (client-go's RetryWatcher): on a loaded machine the
// watch cache drops a watcher that falls behind a burst, and the audit must miss
// nothing.
func listAndWatch(t *testing.T, ctx context.Context, list func(context.Context, metav1.ListOptions) (runtime.Object, error),
	watchFunc func(context.Context, metav1.ListOptions) (watch.Interface, error)) <-chan watch.Event {
	t.Helper()
	listed, err := list(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := apimeta.ExtractList(listed)
	if err != nil {
		t.Fatal(err)
	}
	listMeta, err := apimeta.ListAccessor(listed)
	if err != nil {
		t.Fatal(err)
	}
	rv := listMeta.GetResourceVersion()
	w, err := watchtools.NewRetryWatcherWithContext(ctx, rv, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return watchFunc(ctx, opts)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan watch.Event)
	go func() {
		defer close(out)
		defer w.Stop()
		for _, obj := range objs {
			select {
			case out <- watch.Event{Type: watch.Added, Object: obj}:
			case <-ctx.Done():
				return
			}
		}
		for {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					return
				}
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// waitAdded waits until both watches have listed n objects: the watches see every
// change from then on.
func (tr *transitions) waitAdded(t *testing.T, n int) {
	t.Helper()
	cluster.Eventually(t, 30*time.Second, "the watches listing the JobSets and TrainJobs", func(context.Context) (bool, string) {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		return tr.events["JobSet ADDED"] >= n && tr.events["TrainJob ADDED"] >= n, fmt.Sprint(tr.events)
	})
}

// saw counts ev, and takes a watch error before stop for a regression: the audit
// would be blind.
func (tr *transitions) saw(kind string, ev watch.Event) {
	tr.mu.Lock()
	tr.events[kind+" "+string(ev.Type)]++
	tr.mu.Unlock()
	if ev.Type == watch.Error && tr.ctx.Err() == nil {
		tr.add(fmt.Sprintf("the %s watch failed: %v", kind, ev.Object))
	}
}

func (tr *transitions) add(r string) {
	tr.mu.Lock()
	tr.regressions = append(tr.regressions, r)
	tr.mu.Unlock()
}

// stop ends the watches and returns the regressions seen and the events counted by
// kind and type.
func (tr *transitions) stop() ([]string, map[string]int) {
	tr.cancel()
	tr.done.Wait()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.regressions, tr.events
}

// userRESTConfig is the REST config of userKubeconfig(user).
func (e *env) userRESTConfig(t *testing.T, user string) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", e.userKubeconfig(t, user))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// laggingProxy is an HTTP proxy on 127.0.0.1 to the API server, authenticating as the
// REST config it was given, that delivers every event of a TrainJob watch delay after
// the API server sent it; everything else passes at once. A controller given its
// kubeconfig has a TrainJob cache that lags the cluster by delay, and every other
// cache current.
type laggingProxy struct {
	addr string
}

func startLaggingProxy(t *testing.T, cfg *rest.Config, delay time.Duration) *laggingProxy {
	t.Helper()
	target, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	transport, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = transport
	proxy.FlushInterval = -1 // a watch event goes on as soon as its delay is over
	proxy.ModifyResponse = func(resp *http.Response) error {
		q := resp.Request.URL.Query()
		if w, _ := strconv.ParseBool(q.Get("watch")); w && strings.HasSuffix(resp.Request.URL.Path, "/trainjobs") {
			resp.Body = newDelayedBody(resp.Body, delay)
		}
		return nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: proxy, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return &laggingProxy{addr: ln.Addr().String()}
}

// kubeconfig writes a kubeconfig whose server is the proxy (plain HTTP: the proxy
// authenticates) and returns its path.
func (p *laggingProxy) kubeconfig(t *testing.T) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["lagging"] = &clientcmdapi.Cluster{Server: "http://" + p.addr}
	cfg.AuthInfos["lagging"] = &clientcmdapi.AuthInfo{}
	cfg.Contexts["lagging"] = &clientcmdapi.Context{Cluster: "lagging", AuthInfo: "lagging"}
	cfg.CurrentContext = "lagging"
	path := filepath.Join(t.TempDir(), "lagging.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// delayedBody hands on what it reads from upstream delay after it arrived.
type delayedBody struct {
	upstream io.ReadCloser
	delay    time.Duration
	chunks   chan chunk
	closed   chan struct{}
	close    sync.Once
	left     []byte
	err      error // upstream's error, returned once left is handed on
}

type chunk struct {
	data []byte
	at   time.Time
	err  error
}

func newDelayedBody(upstream io.ReadCloser, delay time.Duration) *delayedBody {
	b := &delayedBody{upstream: upstream, delay: delay, chunks: make(chan chunk, 1024), closed: make(chan struct{})}
	go b.pump()
	return b
}

func (b *delayedBody) pump() {
	for {
		buf := make([]byte, 32<<10)
		n, err := b.upstream.Read(buf)
		c := chunk{data: buf[:n], at: time.Now(), err: err}
		select {
		case b.chunks <- c:
		case <-b.closed:
			return
		}
		if err != nil {
			return
		}
	}
}

func (b *delayedBody) Read(p []byte) (int, error) {
	for len(b.left) == 0 {
		if b.err != nil {
			return 0, b.err
		}
		var c chunk
		select {
		case c = <-b.chunks:
		case <-b.closed:
			return 0, io.ErrClosedPipe
		}
		select {
		case <-time.After(time.Until(c.at.Add(b.delay))):
		case <-b.closed:
			return 0, io.ErrClosedPipe
		}
		b.left, b.err = c.data, c.err
	}
	n := copy(p, b.left)
	b.left = b.left[n:]
	return n, nil
}

func (b *delayedBody) Close() error {
	b.close.Do(func() { close(b.closed) })
	return b.upstream.Close()
}
