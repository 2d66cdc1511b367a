package app

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
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
			srv := healthServer(":0", func() bool { return tc.synced }, servers, &leading, &stopping, tc.leaderElect)
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
	srv := healthServer(":0", synced.Load, nil, &leading, &stopping, true)
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
