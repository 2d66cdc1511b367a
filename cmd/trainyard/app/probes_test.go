package app

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerlisters "github.com/trainyard/trainyard/pkg/clientset/listers/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/httpserver"
	"github.com/trainyard/trainyard/pkg/httpserver/slowclient"
	"github.com/trainyard/trainyard/pkg/metrics"
	utiltesting "github.com/trainyard/trainyard/pkg/util/testing"
)

func TestPhaseOf(t *testing.T) {
	cond := func(condType string, status metav1.ConditionStatus) metav1.Condition {
		return utiltesting.Condition(condType, status, "Reason", "")
	}
	running := utiltesting.JobStatus("node", 1, 0, 0, 1, 0)
	cases := map[string]struct {
		conditions []metav1.Condition
		jobs       []trainer.JobStatus
		want       string
	}{
		"new":                      {want: metrics.PhasePending},
		"runtime missing":          {conditions: []metav1.Condition{cond("RuntimeResolved", metav1.ConditionFalse)}, want: metrics.PhasePending},
		"jobs reported":            {jobs: []trainer.JobStatus{running}, want: metrics.PhaseRunning},
		"suspended":                {conditions: []metav1.Condition{cond(trainer.TrainJobSuspended, metav1.ConditionTrue)}, jobs: []trainer.JobStatus{running}, want: metrics.PhaseSuspended},
		"resumed":                  {conditions: []metav1.Condition{cond(trainer.TrainJobSuspended, metav1.ConditionFalse)}, jobs: []trainer.JobStatus{running}, want: metrics.PhaseRunning},
		"complete":                 {conditions: []metav1.Condition{cond(trainer.TrainJobComplete, metav1.ConditionTrue)}, want: metrics.PhaseComplete},
		"complete while suspended": {conditions: []metav1.Condition{cond(trainer.TrainJobSuspended, metav1.ConditionTrue), cond(trainer.TrainJobComplete, metav1.ConditionTrue)}, want: metrics.PhaseComplete},
		"failed":                   {conditions: []metav1.Condition{cond(trainer.TrainJobFailed, metav1.ConditionTrue)}, jobs: []trainer.JobStatus{running}, want: metrics.PhaseFailed},
		"failed while suspended":   {conditions: []metav1.Condition{cond(trainer.TrainJobSuspended, metav1.ConditionTrue), cond(trainer.TrainJobFailed, metav1.ConditionTrue)}, want: metrics.PhaseFailed},
		"Complete=False":           {conditions: []metav1.Condition{cond(trainer.TrainJobComplete, metav1.ConditionFalse)}, want: metrics.PhasePending},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tj := utiltesting.MakeTrainJob("ns", "tj").JobsStatus(tc.jobs...).Obj()
			tj.Status.Conditions = tc.conditions
			if got := phaseOf(tj); got != tc.want {
				t.Errorf("phaseOf = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestHealthServer(t *testing.T) {
	type probe struct {
		path       string
		wantStatus int
		wantBody   string
	}
	cases := map[string]struct {
		synced, leading, leaderElect bool
		admission, progress          *bool // nil: that server off
		probes                       []probe
	}{
		"caches not synced": {
			probes: []probe{
				{"/healthz", http.StatusOK, "ok\n"},
				{"/readyz", http.StatusServiceUnavailable, "[-]informers: caches not synced\n"},
				{"/readyz?verbose", http.StatusServiceUnavailable, "[-]informers: caches not synced\n"},
			},
		},
		"synced, no leader election": {
			synced: true,
			probes: []probe{
				{"/healthz", http.StatusOK, "ok\n"},
				{"/readyz", http.StatusOK, "ok\n"},
				{"/readyz?verbose", http.StatusOK, "[+]informers ok\n[+]leader-election disabled\nok\n"},
			},
		},
		"synced follower": {
			synced: true, leaderElect: true,
			probes: []probe{
				{"/readyz", http.StatusOK, "ok\n"},
				{"/readyz?verbose", http.StatusOK, "[+]informers ok\n[+]leader-election following\nok\n"},
			},
		},
		"synced, admission without a certificate yet": {
			synced: true, admission: ptr.To(false),
			probes: []probe{
				{"/readyz", http.StatusServiceUnavailable, "[-]admission: not serving yet (caches syncing or no serving certificate)\n"},
			},
		},
		"synced, admission ready": {
			synced: true, admission: ptr.To(true),
			probes: []probe{
				{"/readyz?verbose", http.StatusOK, "[+]informers ok\n[+]admission ok\n[+]leader-election disabled\nok\n"},
			},
		},
		"synced, progress server without a certificate yet": {
			synced: true, admission: ptr.To(true), progress: ptr.To(false),
			probes: []probe{
				{"/readyz", http.StatusServiceUnavailable, "[-]progress: not serving yet (caches syncing or no serving certificate)\n"},
			},
		},
		"synced, both servers ready": {
			synced: true, admission: ptr.To(true), progress: ptr.To(true),
			probes: []probe{
				{"/readyz?verbose", http.StatusOK, "[+]informers ok\n[+]admission ok\n[+]progress ok\n[+]leader-election disabled\nok\n"},
			},
		},
		"synced leader": {
			synced: true, leaderElect: true, leading: true,
			probes: []probe{
				{"/readyz?verbose", http.StatusOK, "[+]informers ok\n[+]leader-election leading\nok\n"},
				{"/readyz?verbose=1", http.StatusOK, "[+]informers ok\n[+]leader-election leading\nok\n"},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var leading atomic.Bool
			leading.Store(tc.leading)
			var servers []serverCheck
			if tc.admission != nil {
				servers = append(servers, serverCheck{"admission", func() bool { return *tc.admission }})
			}
			if tc.progress != nil {
				servers = append(servers, serverCheck{"progress", func() bool { return *tc.progress }})
			}
			var stopping atomic.Bool
			srv, err := healthServer(":0", func() bool { return tc.synced }, servers, &leading, &stopping, tc.leaderElect)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range tc.probes {
				rec := httptest.NewRecorder()
				srv.Handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, p.path, nil))
				body, _ := io.ReadAll(rec.Body)
				if rec.Code != p.wantStatus || string(body) != p.wantBody {
					t.Errorf("GET %s = %d %q, want %d %q", p.path, rec.Code, body, p.wantStatus, p.wantBody)
				}
			}
		})
	}
}

// TestHealthServerFollowsState: one server reports not-ready, then ready, then leading,
// as its inputs change (they are read per request, not captured at construction).
func TestHealthServerFollowsState(t *testing.T) {
	var synced, leading, stopping atomic.Bool
	srv, err := healthServer(":0", synced.Load, nil, &leading, &stopping, true)
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		srv.Handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code, rec.Body.String()
	}
	if code, _ := get("/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz before sync = %d, want 503", code)
	}
	synced.Store(true)
	if code, body := get("/readyz?verbose"); code != http.StatusOK || body != "[+]informers ok\n[+]leader-election following\nok\n" {
		t.Errorf("/readyz?verbose after sync = %d %q", code, body)
	}
	leading.Store(true)
	if code, body := get("/readyz?verbose"); code != http.StatusOK || body != "[+]informers ok\n[+]leader-election leading\nok\n" {
		t.Errorf("/readyz?verbose leading = %d %q", code, body)
	}
	stopping.Store(true)
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || body != "[-]shutdown: stopping; serving what is in flight for shutdownDelay\n" {
		t.Errorf("/readyz stopping = %d %q, want 503 saying it stops", code, body)
	}
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz stopping = %d, want 200: a stopping replica is alive", code)
	}
}

// acceptCounter counts the connections its listener accepted.
type acceptCounter struct {
	net.Listener
	n atomic.Int64
}

func (l *acceptCounter) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// serveHealth serves a ready health server (synced, no leader election) on a loopback
// port until the test ends, through the controller's Serve (its connection cap).
func serveHealth(t *testing.T) (srv *httpserver.Server, addr string, accepted *acceptCounter) {
	t.Helper()
	var leading, stopping atomic.Bool
	srv, err := healthServer("127.0.0.1:0", func() bool { return true }, nil, &leading, &stopping, false)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted = &acceptCounter{Listener: ln}
	go func() { _ = srv.Serve(accepted) }()
	t.Cleanup(func() { _ = srv.Close() })
	return srv, ln.Addr().String(), accepted
}

// probeTimeout is the probes' timeout in these tests: the chart's timeoutSeconds is 5,
// the kubelet's default 1; answered in ~0.5 s when slow clients hold every slot
// (measured), 3 s keeps a loaded 2-core run under -race from failing on scheduling.
const probeTimeout = 3 * time.Second

// kubeletProbe gets path as the kubelet's prober does: a connection of its own
// (keep-alive off) and a timeout (probeTimeout).
func kubeletProbe(addr, path string, header http.Header) (int, string, error) {
	client := &http.Client{Timeout: probeTimeout, Transport: &http.Transport{DisableKeepAlives: true}}
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return 0, "", err
	}
	req.Header = header
	req.Header.Set("User-Agent", "kube-probe/1.33")
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err // the status even when the body fails
}

// waitClosed reads conn until the server closes it, and fails the test when it is still
// open after within (far above the bound under test, so a loaded machine meets it).
func waitClosed(t *testing.T, conn net.Conn, r io.Reader, within time.Duration, what string) {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(within))
	n, err := io.Copy(io.Discard, r)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: still open after %v, want closed by the server", what, within)
	}
	if n != 0 {
		t.Errorf("%s: the server sent %d bytes before closing, want none", what, n)
	}
}

// TestHealthServerRefusesLargeHeaders: a probe's header is a few hundred bytes; one of
// 64 KiB is answered 431 instead of buffered (net/http's default allows 1 MiB).
func TestHealthServerRefusesLargeHeaders(t *testing.T) {
	_, addr, _ := serveHealth(t)
	if code, body, err := kubeletProbe(addr, "/healthz", http.Header{"X-Probe": {strings.Repeat("a", 512)}}); err != nil || code != http.StatusOK || body != "ok\n" {
		t.Fatalf("a probe with a 512-byte header: %d %q %v, want 200 ok", code, body, err)
	}
	// The server answers before reading the whole header, then closes: the body may
	// fail with a reset; the status is what counts.
	if code, _, err := kubeletProbe(addr, "/healthz", http.Header{"X-Big": {strings.Repeat("a", 64<<10)}}); code != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("a request with a 64 KiB header: %d %v, want 431", code, err)
	}
}

// TestHealthServerClosesIdleConnections: a connection kept alive after its answer is
// closed by the server once idle for probeIdleTimeout (a kubelet never reuses one).
func TestHealthServerClosesIdleConnections(t *testing.T) {
	_, addr, _ := serveHealth(t)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /readyz HTTP/1.1\r\nHost: probe\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || string(body) != "ok\n" || resp.Close {
		t.Fatalf("GET /readyz = %d %q, close %v; want 200 ok, kept alive", resp.StatusCode, body, resp.Close)
	}
	waitClosed(t, conn, r, 10*probeIdleTimeout, "an idle kept-alive connection")
}

// TestHealthServerCutsSilentConnections: a connection that sends nothing is closed after
// probeReadTimeout, freeing its slot.
func TestHealthServerCutsSilentConnections(t *testing.T) {
	_, addr, _ := serveHealth(t)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	waitClosed(t, conn, conn, 10*probeReadTimeout, "a silent connection")
}

// TestHealthServerAnswersProbesWhileSlowClientsHoldEveryConnection: probeMaxConns
// clients trickling a header a byte a second hold every slot (more connections wait to
// be accepted); the kubelet's probes dialed then are still answered within their timeout,
// because the slow connections are cut after probeReadTimeout and a probe is next in
// the accept queue. Reconnecting slow clients queue behind it.
func TestHealthServerAnswersProbesWhileSlowClientsHoldEveryConnection(t *testing.T) {
	srv, addr, accepted := serveHealth(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() { close(stop); _ = srv.Close(); wg.Wait() })
	for range probeMaxConns {
		wg.Go(func() {
			slowclient.TricklePlain(addr, "GET /healthz HTTP/1.1\r\nHost: probe\r\n", "X-Slow: 1\r\n", stop)
		})
	}
	// Each round, the slow clients hold every slot again (those cut reconnect: the
	// count of accepted connections grows by probeMaxConns), then the kubelet probes.
	for round := range 3 { // the kubelet's default failureThreshold
		holding := int64((round+1)*probeMaxConns + round) // the slow ones' and the earlier probes'
		for deadline := time.Now().Add(10 * time.Second); srv.OpenConns() < probeMaxConns || accepted.n.Load() < holding; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: %d connections open, %d accepted; want the slow clients to hold all %d, %d accepted",
					round, srv.OpenConns(), accepted.n.Load(), probeMaxConns, holding)
			}
		}
		start := time.Now()
		code, body, err := kubeletProbe(addr, "/healthz", http.Header{})
		if err != nil || code != http.StatusOK || body != "ok\n" {
			t.Fatalf("round %d: a probe while slow clients hold every connection: %d %q %v, want 200 ok within %v", round, code, body, err, probeTimeout)
		}
		t.Logf("round %d: the probe was answered after %v", round, time.Since(start))
		if open := srv.OpenConns(); open > probeMaxConns {
			t.Errorf("round %d: %d connections open, above the cap %d", round, open, probeMaxConns)
		}
	}
}

// TestTrainJobCounter checks the counter the controller scrapes through a registry:
// TrainJobs counted by the runtime they name, the cached runtimes listed (series at 0
// when unused), a runtime's series gone once it leaves the cache.
func TestTrainJobCounter(t *testing.T) {
	idx := func() cache.Indexer {
		return cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	}
	jobs, rts, crts := idx(), idx(), idx()
	running := utiltesting.JobStatus("node", 1, 0, 0, 1, 0)
	for _, obj := range []any{
		utiltesting.MakeTrainJob("a", "tj1").RuntimeRef("", "torch").JobsStatus(running).Obj(),
		utiltesting.MakeTrainJob("b", "tj2").RuntimeRef(trainer.ClusterTrainingRuntimeKind, "torch").Obj(),
		utiltesting.MakeTrainJob("a", "tj3").RuntimeRef(trainer.TrainingRuntimeKind, "mpi").Obj(),
		utiltesting.MakeTrainJob("b", "tj4").RuntimeRef(trainer.TrainingRuntimeKind, "mpi").Obj(),
		utiltesting.MakeTrainJob("a", "tj5").RuntimeRef("Job", "x").Obj(),
	} {
		if err := jobs.Add(obj); err != nil {
			t.Fatal(err)
		}
	}
	for _, obj := range []any{utiltesting.MakeTrainingRuntime("a", "mpi"), utiltesting.MakeTrainingRuntime("b", "mpi"), utiltesting.MakeTrainingRuntime("a", "unused")} {
		if err := rts.Add(obj); err != nil {
			t.Fatal(err)
		}
	}
	torch := utiltesting.MakeClusterTrainingRuntime("torch")
	if err := crts.Add(torch); err != nil {
		t.Fatal(err)
	}

	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	m.SetTrainJobCounts(trainJobCounter(trainerlisters.NewTrainJobLister(jobs), trainerlisters.NewTrainingRuntimeLister(rts), trainerlisters.NewClusterTrainingRuntimeLister(crts)))
	scrape := func() map[string]float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, mf := range mfs {
			if mf.GetName() != metrics.TrainJobsByRuntime {
				continue
			}
			for _, s := range mf.GetMetric() {
				l := map[string]string{}
				for _, lp := range s.GetLabel() {
					l[lp.GetName()] = lp.GetValue()
				}
				if v := s.GetGauge().GetValue(); v != 0 || l[metrics.LabelPhase] == metrics.PhasePending {
					out[l[metrics.LabelRuntimeKind]+"/"+l[metrics.LabelRuntime]+" "+l[metrics.LabelPhase]] = v
				}
			}
		}
		return out
	}
	want := map[string]float64{
		"ClusterTrainingRuntime/torch Running":   1,
		"ClusterTrainingRuntime/torch Pending":   1,
		"TrainingRuntime/mpi Pending":            2,
		"TrainingRuntime/unused Pending":         0,
		"other/<other> Pending":                  1,
		"ClusterTrainingRuntime/<other> Pending": 0,
		"TrainingRuntime/<other> Pending":        0,
	}
	if diff := cmp.Diff(want, scrape()); diff != "" {
		t.Errorf("by runtime (-want,+got):\n%s", diff)
	}

	if err := crts.Delete(torch); err != nil {
		t.Fatal(err)
	}
	got := scrape()
	if _, ok := got["ClusterTrainingRuntime/torch Pending"]; ok {
		t.Error("the deleted ClusterTrainingRuntime torch still has series")
	}
	if got["ClusterTrainingRuntime/<other> Running"] != 1 || got["ClusterTrainingRuntime/<other> Pending"] != 1 {
		t.Errorf("torch's TrainJobs not under <other> once it is deleted: %v", got)
	}
}
