package progress

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerac "github.com/trainyard/trainyard/pkg/clientset/applyconfiguration/trainer/v1alpha1"
	trainerclient "github.com/trainyard/trainyard/pkg/clientset/clientset/versioned"
	trainerlisters "github.com/trainyard/trainyard/pkg/clientset/listers/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/metrics"
	"github.com/trainyard/trainyard/pkg/stages"
	"github.com/trainyard/trainyard/pkg/trainjob"
)

// Name is the progress Stage's name: its queue's and its metrics' "stage" and "name"
// label.
const Name = "progress"

// WriteLimits bound the trainerStatus writes of one replica. Zero fields take the
// defaults of DefaultWriteLimits. Upstream writes every report synchronously, inside
// the request, through a client of its own limited to 5 QPS, burst 10, so a flood of
// reports queues requests in that client; Trainyard answers at once and coalesces
// instead, and these limits only pace the writes.
type WriteLimits struct {
	// Period is the least time between two writes of one TrainJob's trainerStatus by
	// this replica; reports arriving in between are coalesced into the next write. A
	// finished TrainJob is written without waiting. Default 10s.
	Period time.Duration
	// QPS and Burst size the token bucket shared by every write of the replica,
	// protecting the API server from many TrainJobs reporting at once. Defaults 50
	// writes per second, burst 100.
	QPS   float64
	Burst int
	// NamespaceQPS and NamespaceBurst size one token bucket per namespace, so that one
	// namespace's many TrainJobs cannot take the whole global budget. Defaults 10 writes
	// per second, burst 20.
	NamespaceQPS   float64
	NamespaceBurst int
}

// DefaultWriteLimits returns the default limits: a 10 s period; 50 writes/s, burst 100
// per replica; 10 writes/s, burst 20 per namespace. At the defaults a replica writes
// the progress of 500 TrainJobs reporting continuously.
func DefaultWriteLimits() WriteLimits {
	return WriteLimits{Period: 10 * time.Second, QPS: 50, Burst: 100, NamespaceQPS: 10, NamespaceBurst: 20}
}

func (l WriteLimits) withDefaults() WriteLimits {
	def := DefaultWriteLimits()
	if l.Period == 0 {
		l.Period = def.Period
	}
	if l.QPS == 0 {
		l.QPS = def.QPS
	}
	if l.Burst == 0 {
		l.Burst = def.Burst
	}
	if l.NamespaceQPS == 0 {
		l.NamespaceQPS = def.NamespaceQPS
	}
	if l.NamespaceBurst == 0 {
		l.NamespaceBurst = def.NamespaceBurst
	}
	return l
}

func (l WriteLimits) validate() error {
	if l.Period < 0 || l.QPS < 0 || l.Burst < 0 || l.NamespaceQPS < 0 || l.NamespaceBurst < 0 {
		return fmt.Errorf("progress write limits: no field may be negative: %+v", l)
	}
	return nil
}

// StageConfig configures a Stage. Client, TrainJobs and Coalescer are required.
type StageConfig struct {
	// Client writes status.trainerStatus (RBAC: patch trainjobs/status).
	Client trainerclient.Interface
	// TrainJobs is the TrainJob informer cache: existence, uid, finished conditions, the
	// stored trainerStatus and the resourceVersion precondition of each write.
	TrainJobs trainerlisters.TrainJobLister
	// Coalescer holds the reports to write; the Stage reports to its Observer.
	Coalescer *Coalescer
	Limits    WriteLimits
	// Clock times the period and the rate limits; nil means the real clock.
	Clock clock.PassiveClock
}

// Stage writes the reports the Coalescer holds to status.trainerStatus; see the package
// doc for when. It implements stages.Stage under Name, to run in its own single-stage
// pipeline on every replica (the engine gives it a queue, workers and the stage
// metrics), fed by the Coalescer's enqueue hook. Its Sync never blocks on the rate
// limits: a write that would have to wait is requeued for when it may go.
type Stage struct {
	client    trainerclient.Interface
	trainJobs trainerlisters.TrainJobLister
	coalescer *Coalescer
	period    time.Duration
	limits    *writeLimiter
	clock     clock.PassiveClock
}

var _ stages.Stage = (*Stage)(nil)

// NewStage returns the Stage of cfg, or an error naming a missing required field or a
// negative limit.
func NewStage(cfg StageConfig) (*Stage, error) {
	var errs []error
	if cfg.Client == nil {
		errs = append(errs, errors.New("progress stage: Client is required"))
	}
	if cfg.TrainJobs == nil {
		errs = append(errs, errors.New("progress stage: TrainJobs is required"))
	}
	if cfg.Coalescer == nil {
		errs = append(errs, errors.New("progress stage: Coalescer is required"))
	}
	errs = append(errs, cfg.Limits.validate())
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	limits := cfg.Limits.withDefaults()
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Stage{
		client:    cfg.Client,
		trainJobs: cfg.TrainJobs,
		coalescer: cfg.Coalescer,
		period:    limits.Period,
		limits:    newWriteLimiter(limits),
		clock:     cfg.Clock,
	}, nil
}

// Name implements stages.Stage.
func (s *Stage) Name() string { return Name }

// Sync writes the pending report of the TrainJob at key, if it is due. Results:
// WaitForEvent when there is nothing (more) to write — the report was written, or
// dropped as unchanged, stale or gone, or the API server refused it as invalid (422,
// logged; retrying cannot help); RequeueAfter(d) when the period or a rate limit defers
// the write by d; Retry when the precondition failed (409, the cache is behind another
// write); an error, and so a retry with backoff, when the write failed otherwise. The
// report stays pending while it is deferred or retried, unless a newer one replaces it.
func (s *Stage) Sync(ctx context.Context, key cache.ObjectName) (stages.Result, error) {
	c := s.coalescer
	tj, err := s.trainJobs.TrainJobs(key.Namespace).Get(key.Name)
	if err != nil && apierrors.IsNotFound(err) {
		c.mu.Lock()
		e := c.entries[key]
		delete(c.entries, key)
		c.mu.Unlock()
		if e != nil && e.pending != nil {
			c.observer.ObserveProgressDropped(metrics.ReasonGone)
		}
		return stages.WaitForEvent(), nil
	}
	if err != nil {
		return stages.Result{}, fmt.Errorf("reading TrainJob %s from the cache: %w", key, err)
	}

	now := s.clock.Now()
	c.mu.Lock()
	e := c.entries[key]
	if e == nil || e.pending == nil {
		c.mu.Unlock()
		return stages.WaitForEvent(), nil
	}
	if e.uid != tj.UID {
		// The report is an earlier TrainJob's of this name.
		delete(c.entries, key)
		c.mu.Unlock()
		c.observer.ObserveProgressDropped(metrics.ReasonGone)
		return stages.WaitForEvent(), nil
	}
	report := e.pending
	stored := tj.Status.TrainerStatus
	if at := reportTime(report); !at.After(reportTime(stored)) || !at.After(e.written) {
		e.pending = nil
		c.mu.Unlock()
		reason := metrics.ReasonStale
		if sameStatus(report, stored) {
			reason = metrics.ReasonUnchanged
		}
		c.observer.ObserveProgressDropped(reason)
		return stages.WaitForEvent(), nil
	}
	if !e.lastWrite.IsZero() && !trainjob.IsFinished(tj) {
		if wait := e.lastWrite.Add(s.period).Sub(now); wait > 0 {
			c.mu.Unlock()
			return stages.RequeueAfter(wait), nil
		}
	}
	if wait := s.limits.reserve(key.Namespace, now); wait > 0 {
		c.mu.Unlock()
		return stages.RequeueAfter(wait), nil
	}
	e.pending = nil // taken; a report arriving during the write schedules the key again
	c.mu.Unlock()

	err = s.apply(ctx, tj, report)
	c.observer.ObserveProgressWrite(err)
	c.mu.Lock()
	current := c.entries[key] == e
	switch {
	case err == nil:
		if current {
			e.lastWrite = now
			e.written = reportTime(report)
		}
		c.mu.Unlock()
		klog.FromContext(ctx).V(4).Info("Wrote trainerStatus", "lastUpdatedTime", report.LastUpdatedTime)
		return stages.WaitForEvent(), nil
	case apierrors.IsNotFound(err):
		c.mu.Unlock()
		c.observer.ObserveProgressDropped(metrics.ReasonGone)
		return stages.WaitForEvent(), nil
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		c.mu.Unlock()
		utilruntime.HandleErrorWithContext(ctx, err, "The API server refused a trainerStatus report; dropping it")
		return stages.WaitForEvent(), nil
	}
	if current && e.pending == nil {
		e.pending = report // not replaced meanwhile: retry it
	}
	c.mu.Unlock()
	if apierrors.IsConflict(err) {
		klog.FromContext(ctx).V(4).Info("TrainJob changed since the cached copy; retrying the trainerStatus write", "err", err)
		return stages.Retry(), nil
	}
	return stages.Result{}, fmt.Errorf("applying status.trainerStatus of TrainJob %s: %w", key, err)
}

// apply writes ts as tj's status.trainerStatus: server-side apply on the status
// subresource, as FieldManager with force (upstream's), setting only trainerStatus, with
// the cached resourceVersion as a precondition (see the package doc).
func (s *Stage) apply(ctx context.Context, tj *trainer.TrainJob, ts *trainer.TrainerStatus) error {
	_, err := s.client.TrainerV1alpha1().TrainJobs(tj.Namespace).ApplyStatus(ctx, applyConfiguration(tj, ts),
		metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
	return err
}

// applyConfiguration returns the apply configuration of ts on tj: name, namespace, the
// cached resourceVersion (when known) and status.trainerStatus, nothing else.
func applyConfiguration(tj *trainer.TrainJob, ts *trainer.TrainerStatus) *trainerac.TrainJobApplyConfiguration {
	st := trainerac.TrainerStatus()
	if ts.ProgressPercentage != nil {
		st.WithProgressPercentage(*ts.ProgressPercentage)
	}
	if ts.EstimatedRemainingSeconds != nil {
		st.WithEstimatedRemainingSeconds(*ts.EstimatedRemainingSeconds)
	}
	for i := range ts.Metrics {
		st.WithMetrics(trainerac.Metric().WithName(ts.Metrics[i].Name).WithValue(ts.Metrics[i].Value))
	}
	if ts.LastUpdatedTime != nil {
		st.WithLastUpdatedTime(*ts.LastUpdatedTime)
	}
	ac := trainerac.TrainJob(tj.Name, tj.Namespace).WithStatus(trainerac.TrainJobStatus().WithTrainerStatus(st))
	if tj.ResourceVersion != "" {
		ac.WithResourceVersion(tj.ResourceVersion)
	}
	return ac
}

// sameStatus reports whether report, as the API server would store it (lastUpdatedTime
// in seconds), equals stored.
func sameStatus(report, stored *trainer.TrainerStatus) bool {
	if report == nil || stored == nil {
		return report == stored
	}
	r := *report
	if r.LastUpdatedTime != nil {
		r.LastUpdatedTime = &metav1.Time{Time: reportTime(report)}
	}
	return equality.Semantic.DeepEqual(&r, stored)
}

// writeLimiter is the global and per-namespace token buckets of WriteLimits.
type writeLimiter struct {
	mu         sync.Mutex
	global     *rate.Limiter
	nsLimit    rate.Limit
	nsBurst    int
	namespaces map[string]*rate.Limiter
	nextPrune  int // prune full buckets when namespaces reaches this size
}

// minPrune is the namespace count below which buckets are never pruned.
const minPrune = 1024

func newWriteLimiter(l WriteLimits) *writeLimiter {
	return &writeLimiter{
		global:     rate.NewLimiter(rate.Limit(l.QPS), l.Burst),
		nsLimit:    rate.Limit(l.NamespaceQPS),
		nsBurst:    l.NamespaceBurst,
		namespaces: map[string]*rate.Limiter{},
		nextPrune:  minPrune,
	}
}

// reserve takes a token from the namespace's bucket and one from the global bucket at
// now, and returns 0; or, when either would make the write wait, takes none (the
// reservations are cancelled, so a deferred write costs no one else a token) and returns
// how long until the write should be tried again.
func (l *writeLimiter) reserve(namespace string, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	ns := l.namespaces[namespace]
	if ns == nil {
		l.prune(now)
		ns = rate.NewLimiter(l.nsLimit, l.nsBurst)
		l.namespaces[namespace] = ns
	}
	r := ns.ReserveN(now, 1)
	if !r.OK() {
		return time.Second // a zero burst: never allowed; look again later
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return d
	}
	g := l.global.ReserveN(now, 1)
	if !g.OK() {
		r.CancelAt(now)
		return time.Second
	}
	if d := g.DelayFrom(now); d > 0 {
		g.CancelAt(now)
		r.CancelAt(now)
		return d
	}
	return 0
}

// prune drops the buckets that are full, which behave as new ones, once there are
// nextPrune of them, so namespaces that stopped writing cost no memory.
func (l *writeLimiter) prune(now time.Time) {
	if len(l.namespaces) < l.nextPrune {
		return
	}
	for name, ns := range l.namespaces {
		if ns.TokensAt(now) >= float64(l.nsBurst) {
			delete(l.namespaces, name)
		}
	}
	l.nextPrune = max(minPrune, 2*len(l.namespaces))
}
