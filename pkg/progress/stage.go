package progress

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
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
	"github.com/trainyard/trainyard/pkg/engine"
	"github.com/trainyard/trainyard/pkg/metrics"
	"github.com/trainyard/trainyard/pkg/progress/wire"
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
	// finished TrainJob, and a TrainJob's first report of progressPercentage 100 (the
	// trainer's last), are written without waiting. Default 10s.
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
// doc for when. It implements engine.Stage under Name, to run in its own single-stage
// pipeline on every replica (the engine gives it a queue, workers and the stage
// metrics), fed by the Coalescer's enqueue hook. Its Sync never blocks on the rate
// limits: a write that would have to wait reserves its tokens and is requeued for when
// they are due.
type Stage struct {
	client    trainerclient.Interface
	trainJobs trainerlisters.TrainJobLister
	coalescer *Coalescer
	period    time.Duration
	limits    *writeLimiter
	// drainLimits pace the writes once draining is set (DrainSpeedup).
	drainLimits *writeLimiter
	clock       clock.PassiveClock
	// draining is set by Drain: the period no longer defers a write, and the writes
	// are paced by drainLimits.
	draining atomic.Bool
}

// DrainSpeedup is how much faster than WriteLimits.QPS a stopping replica writes the
// reports it accepted (Drain): one bucket of QPS × DrainSpeedup writes a second, burst
// as many, over all namespaces, with no per-namespace share (every pending report is
// to be written, in whatever namespace). At the defaults, 200 writes a second: the
// controller's 10 s drain period writes ~2,200 pending reports, where 50 a second and
// 10 per namespace lost every report past ~600, or ~120 in one namespace. The API
// client's own limit (clientConnection.qps, 500) still applies.
const DrainSpeedup = 4

// limiter is the write limiter in force: drainLimits once draining.
func (s *Stage) limiter() *writeLimiter {
	if s.draining.Load() {
		return s.drainLimits
	}
	return s.limits
}

var _ engine.Stage = (*Stage)(nil)

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
		drainLimits: newWriteLimiter(WriteLimits{
			QPS: limits.QPS * DrainSpeedup, Burst: int(limits.QPS * DrainSpeedup),
			NamespaceQPS: limits.QPS * DrainSpeedup, NamespaceBurst: int(limits.QPS * DrainSpeedup),
		}),
		clock: cfg.Clock,
	}, nil
}

// Name implements engine.Stage.
func (s *Stage) Name() string { return Name }

// Sync writes the pending report of the TrainJob at key, if it is due. Results:
// WaitForEvent when there is nothing (more) to write — the report was written, or
// dropped as unchanged, stale or gone, or the API server refused it as invalid (422,
// logged; retrying cannot help); RequeueAfter(d) when the period or a rate limit defers
// the write by d; Retry when the precondition failed (409, the cache is behind another
// write); an error, and so a retry with backoff, when the write failed otherwise. The
// report stays pending while it is deferred or retried, unless a newer one replaces it.
//
// A deferred write is synced again once, when it may go: d is the end of the period,
// or the turn of the rate-limit tokens the write holds (writeLimiter.reserve), never a
// guess to poll at; meanwhile the Coalescer enqueues nothing for new reports of the
// key (entry.due). So a TrainJob costs a few syncs per write however often its pods
// report and however long the limits make it wait.
func (s *Stage) Sync(ctx context.Context, key cache.ObjectName) (engine.Result, error) {
	now := s.clock.Now()
	tj, err := s.trainJobs.TrainJobs(key.Namespace).Get(key.Name)
	if err != nil && apierrors.IsNotFound(err) {
		s.forgetGone(key, now)
		return engine.WaitForEvent(), nil
	}
	if err != nil {
		return engine.Result{}, fmt.Errorf("reading TrainJob %s from the cache: %w", key, err)
	}
	e, report, wait := s.take(key, tj, now)
	switch {
	case wait > 0:
		return engine.RequeueAfter(wait), nil
	case report == nil:
		return engine.WaitForEvent(), nil
	}
	return s.write(ctx, key, tj, e, report, now)
}

// forgetGone drops key's entry and releases the tokens its deferred write holds, once
// its TrainJob is gone from the cache; a pending report counts as dropped,
// metrics.ReasonGone.
func (s *Stage) forgetGone(key cache.ObjectName, now time.Time) {
	c := s.coalescer
	c.mu.Lock()
	e := c.entries[key]
	if e != nil {
		c.removeEntry(key, e)
	}
	c.mu.Unlock()
	s.limiter().release(key, now)
	if e != nil && e.pending != nil {
		c.observer.ObserveProgressDropped(metrics.ReasonGone)
	}
}

// take returns key's entry and the report to write now for tj, taken from the entry (a
// report arriving during the write schedules the key again) with its rate-limit tokens
// spent. It returns no report and a positive wait when the period or a rate limit
// defers the write by wait (the entry is due then), and neither report nor wait when
// there is nothing to write: no entry or no pending report, an earlier TrainJob's
// report (dropped, metrics.ReasonGone), or one equal to what is stored or coming before
// it or what was written (order.before; dropped, metrics.ReasonUnchanged or
// ReasonStale); the tokens key holds are
// released then.
func (s *Stage) take(key cache.ObjectName, tj *trainer.TrainJob, now time.Time) (*entry, *trainer.TrainerStatus, time.Duration) {
	c := s.coalescer
	c.mu.Lock()
	e := c.entries[key]
	if e == nil {
		c.mu.Unlock()
		s.limiter().release(key, now)
		return nil, nil, 0
	}
	// This is the deferred sync, or one that makes it moot; set again if this one defers.
	e.due = time.Time{}
	deferWrite := func(wait time.Duration) (*entry, *trainer.TrainerStatus, time.Duration) {
		e.due = now.Add(wait)
		c.mu.Unlock()
		return e, nil, wait
	}
	if e.pending == nil {
		c.mu.Unlock()
		s.limiter().release(key, now)
		return e, nil, 0
	}
	if e.uid != tj.UID {
		// The report is an earlier TrainJob's of this name.
		c.removeEntry(key, e)
		c.mu.Unlock()
		s.limiter().release(key, now)
		c.observer.ObserveProgressDropped(metrics.ReasonGone)
		return e, nil, 0
	}
	report := e.pending
	stored := tj.Status.TrainerStatus
	if o := orderOf(report); o.before(orderOf(stored)) || !e.written.at.IsZero() && o.before(e.written) || sameStatus(report, stored) {
		c.clearPending(e)
		c.mu.Unlock()
		s.limiter().release(key, now)
		reason := metrics.ReasonStale
		if sameStatus(report, stored) {
			reason = metrics.ReasonUnchanged
		}
		c.observer.ObserveProgressDropped(reason)
		return e, nil, 0
	}
	if !e.lastWrite.IsZero() && !trainjob.IsFinished(tj) && !s.draining.Load() && !(isFinal(report) && !e.wroteFinal) {
		if wait := e.lastWrite.Add(s.period).Sub(now); wait > 0 {
			return deferWrite(wait)
		}
	}
	if wait := s.limiter().reserve(key, now); wait > 0 {
		return deferWrite(wait)
	}
	// Taken; a report arriving during the write schedules the key again. Its bytes stay
	// counted until the write is over (write, Coalescer.releaseWrite).
	e.pending, e.size, e.writing = nil, 0, true
	c.mu.Unlock()
	return e, report, 0
}

// write applies report, taken from key's entry e at now, as tj's trainerStatus and
// records the write in e while e is still key's entry. It returns WaitForEvent when the
// report was written, when the TrainJob is gone (dropped, metrics.ReasonGone) or when
// the API server refused it as invalid (422 or 400, logged); Retry when the
// precondition failed (409); otherwise the write's error. On a retry the report is
// pending again, unless a newer one replaced it meanwhile; otherwise its bytes are freed.
func (s *Stage) write(ctx context.Context, key cache.ObjectName, tj *trainer.TrainJob, e *entry, report *trainer.TrainerStatus, now time.Time) (engine.Result, error) {
	c := s.coalescer
	err := s.apply(ctx, tj, report)
	c.observer.ObserveProgressWrite(err)
	size := ReportBytes(report) // as take counted it: report is not changed meanwhile
	c.mu.Lock()
	current := c.entries[key] == e
	retry := err != nil && !apierrors.IsNotFound(err) && !apierrors.IsInvalid(err) && !apierrors.IsBadRequest(err)
	c.releaseWrite(e, report, size, retry && current && e.pending == nil)
	switch {
	case err == nil:
		if current {
			e.lastWrite = now
			e.written = orderOf(report)
			e.wroteFinal = e.wroteFinal || isFinal(report)
		}
		c.mu.Unlock()
		klog.FromContext(ctx).V(4).Info("Wrote trainerStatus", "lastUpdatedTime", report.LastUpdatedTime)
		return engine.WaitForEvent(), nil
	case apierrors.IsNotFound(err):
		c.mu.Unlock()
		c.observer.ObserveProgressDropped(metrics.ReasonGone)
		return engine.WaitForEvent(), nil
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		c.mu.Unlock()
		utilruntime.HandleErrorWithContext(ctx, err, "The API server refused a trainerStatus report; dropping it")
		return engine.WaitForEvent(), nil
	}
	c.mu.Unlock() // the report is pending again unless a newer one replaced it (releaseWrite)
	if apierrors.IsConflict(err) {
		klog.FromContext(ctx).V(4).Info("TrainJob changed since the cached copy; retrying the trainerStatus write", "err", err)
		return engine.Retry(), nil
	}
	return engine.Result{}, fmt.Errorf("applying status.trainerStatus of TrainJob %s: %w", key, err)
}

// apply writes ts as tj's status.trainerStatus: server-side apply on the status
// subresource, as FieldManager with force (upstream's), setting only trainerStatus, with
// the cached resourceVersion as a precondition (see the package doc).
func (s *Stage) apply(ctx context.Context, tj *trainer.TrainJob, ts *trainer.TrainerStatus) error {
	_, err := s.client.TrainerV1alpha1().TrainJobs(tj.Namespace).ApplyStatus(ctx, applyConfiguration(tj, ts),
		metav1.ApplyOptions{FieldManager: wire.FieldManager, Force: true})
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

// writeLimiter is the global and per-namespace token buckets of WriteLimits, and the
// reservations of the writes waiting for their turn.
type writeLimiter struct {
	mu         sync.Mutex
	global     *rate.Limiter
	nsLimit    rate.Limit
	nsBurst    int
	namespaces map[string]*rate.Limiter
	held       map[cache.ObjectName]*heldTokens // deferred writes' reservations, by TrainJob
	nextPrune  int                              // prune full buckets when namespaces reaches this size
}

// heldTokens are the reservations of one deferred write: its namespace's token, then
// the global one. Either may be nil (not reserved yet).
type heldTokens struct {
	namespace, global *rate.Reservation
}

// minPrune is the namespace count below which buckets are never pruned.
const minPrune = 1024

func newWriteLimiter(l WriteLimits) *writeLimiter {
	return &writeLimiter{
		global:     rate.NewLimiter(rate.Limit(l.QPS), l.Burst),
		nsLimit:    rate.Limit(l.NamespaceQPS),
		nsBurst:    l.NamespaceBurst,
		namespaces: map[string]*rate.Limiter{},
		held:       map[cache.ObjectName]*heldTokens{},
		nextPrune:  minPrune,
	}
}

// reserve returns 0 when the write of key may go at now: it holds a token of its
// namespace's bucket and one of the global bucket, reserved by this call or by an
// earlier one whose turn has come, and spends them. Otherwise it returns how long until
// the write's turn and keeps the reservations it made for key, so that the write, tried
// again then, finds its tokens waiting instead of competing again with every other
// waiting write: each deferred write gets its own turn, in the order it asked, and is
// synced once more, not once per token the bucket refills (the issue-14 benchmark's
// 438,638 syncs for 1,675 writes). The namespace's token is reserved first and the
// global one only once that is due, so one namespace's backlog holds no global tokens
// that other namespaces' writes could use now.
func (l *writeLimiter) reserve(key cache.ObjectName, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.held[key]
	if h == nil {
		h = &heldTokens{}
		l.held[key] = h
	}
	if h.namespace == nil {
		if h.namespace = l.bucket(key.Namespace, now).ReserveN(now, 1); !h.namespace.OK() {
			h.namespace = nil
			return time.Second // a zero burst: never allowed; look again later (not reached: withDefaults)
		}
	}
	if d := h.namespace.DelayFrom(now); d > 0 {
		return d
	}
	if h.global == nil {
		if h.global = l.global.ReserveN(now, 1); !h.global.OK() {
			h.global = nil
			return time.Second
		}
	}
	if d := h.global.DelayFrom(now); d > 0 {
		return d
	}
	delete(l.held, key)
	return 0
}

// release gives back the tokens key's deferred write holds, if any, as far as no later
// reservation depends on them (rate.Reservation.CancelAt): the write will not be made.
func (l *writeLimiter) release(key cache.ObjectName, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.held[key]
	if h == nil {
		return
	}
	delete(l.held, key)
	if h.global != nil {
		h.global.CancelAt(now)
	}
	if h.namespace != nil {
		h.namespace.CancelAt(now)
	}
}

// bucket returns the namespace's bucket, created full. Called with mu held.
func (l *writeLimiter) bucket(namespace string, now time.Time) *rate.Limiter {
	ns := l.namespaces[namespace]
	if ns == nil {
		l.prune(now)
		ns = rate.NewLimiter(l.nsLimit, l.nsBurst)
		l.namespaces[namespace] = ns
	}
	return ns
}

// prune drops the buckets that are full, which behave as new ones, once there are
// nextPrune of them, so namespaces that stopped writing cost no memory. A bucket a held
// reservation was taken from is not full until that reservation's turn has come.
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
