// Package controller runs OptimizationJobs (KEP-3562): for each, it creates trial
// TrainJobs (pkg/optimization/trial) with the parameters the search chooses
// (pkg/optimization/search), never more than parallelTrials unfinished at once and
// numTrials in all, and records the trial whose reported objective metric is best. The
// search runs in process: no suggestion service, no state outside the API. It is one
// engine.Stage, run in a pipeline of its own on the leader.
//
// Trials are made from trainJobTemplate as is: with spec.suspend true (Kueue-managed
// trials) each is created suspended, and counts as unfinished, against parallelTrials,
// until it finishes (docs/compatibility.md#suspended-trials). The controller never
// deletes a trial: they go with the OptimizationJob, through their controller owner
// reference. Trials that fail, or complete without the objective metric, spend the
// search's failure budget (search.FailureBudget); once it is spent no trial starts and
// the search ends Failed (docs/compatibility.md#failure-budget). A trial someone
// deletes is cancelled: counted as such, not created again
// (trial.AnnotationTrialsCreated records how many were created;
// docs/compatibility.md#deleted-trials).
package controller

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerclient "github.com/trainyard/trainyard/pkg/clientset/clientset/versioned"
	trainerlisters "github.com/trainyard/trainyard/pkg/clientset/listers/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/engine"
	"github.com/trainyard/trainyard/pkg/optimization/search"
	"github.com/trainyard/trainyard/pkg/optimization/trial"
)

// Name is the stage's name: its queue's and its metrics' "stage" label.
const Name = "optimization"

// DefaultSettle is Config.Settle's default: time enough for a progress server to see
// a TrainJob complete (an informer event) and write the report it was deferring.
const DefaultSettle = 5 * time.Second

// Config configures a Stage; Client and the caches are required.
type Config struct {
	// Client creates trial TrainJobs, reads one the cache lacks, writes OptimizationJob
	// status and patches its trial.AnnotationTrialsCreated (RBAC: create and get
	// trainjobs, update optimizationjobs/status, patch optimizationjobs); the leader's
	// fenced client.
	Client trainerclient.Interface
	// OptimizationJobs and TrainJobs are the informer caches.
	OptimizationJobs trainerlisters.OptimizationJobLister
	TrainJobs        trainerlisters.TrainJobLister
	// Settle is how long after a trial completes its objective metric is taken, when
	// the trainer's last stored report is not its final one (trial.Unsettled), for an
	// OptimizationJob without annotation search.AnnotationFinalReportWait; 0 means
	// DefaultSettle.
	Settle time.Duration
	// Clock times Settle; nil means the real clock.
	Clock clock.PassiveClock
	// Recorder records an Event on the OptimizationJob for each trial it creates and
	// each trial that finishes, with the trial's parameters and objective value: what
	// `kubectl describe optimizationjob` shows of its trials (announce); nil records
	// none. RBAC: create and patch events.k8s.io events.
	Recorder events.EventRecorder
}

// Stage syncs one OptimizationJob per key.
type Stage struct {
	cfg Config
	// mu guards seen: per OptimizationJob, what this controller run found of its
	// trials.
	mu   sync.Mutex
	seen map[cache.ObjectName]*seenTrials
}

// seenTrials is what this controller run found of the trials of the OptimizationJob
// of uid: the indexes a live read found deleted, so each is read once (missing), and
// those whose end an Event announced, so each is announced once (announce).
type seenTrials struct {
	uid       types.UID
	gone      map[int]bool
	announced map[int]bool
}

var _ engine.Stage = (*Stage)(nil)

// New returns the Stage of cfg, or an error naming a missing field.
func New(cfg Config) (*Stage, error) {
	if cfg.Client == nil || cfg.OptimizationJobs == nil || cfg.TrainJobs == nil {
		return nil, errors.New("optimization controller: Client, OptimizationJobs and TrainJobs are required")
	}
	if cfg.Settle == 0 {
		cfg.Settle = DefaultSettle
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Stage{cfg: cfg, seen: map[cache.ObjectName]*seenTrials{}}, nil
}

// Name implements engine.Stage.
func (s *Stage) Name() string { return Name }

// Sync brings the OptimizationJob at key one step on: it creates the trials the search
// may run now, and writes status (conditions, result) when it changed. Results:
// WaitForEvent when there is nothing more to do until a trial changes (its events
// enqueue the OptimizationJob) or the OptimizationJob has finished (Complete, or
// Failed: no trial succeeded, or the failure budget, search.FailureBudget, is spent);
// RequeueAfter when a completed trial's metric is not settled yet (Config.Settle, or
// the OptimizationJob's search.AnnotationFinalReportWait);
// Terminal when its spec cannot be searched (search.ValidateSpec: Failed, reason
// InvalidSpec, saying why); an error, retried with backoff, when a create or the
// status write failed.
func (s *Stage) Sync(ctx context.Context, key cache.ObjectName) (engine.Result, error) {
	job, err := s.cfg.OptimizationJobs.OptimizationJobs(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		s.forget(key)
		return engine.WaitForEvent(), nil // its trials go with it (owner references)
	}
	if err != nil {
		return engine.Result{}, fmt.Errorf("reading OptimizationJob %s from the cache: %w", key, err)
	}
	if finished(job) {
		s.forget(key)
		return engine.WaitForEvent(), nil
	}
	srch, err := search.New(&job.Spec, search.Seed(job))
	if errs := search.ValidateSpec(job); err != nil || len(errs) > 0 {
		if len(errs) > 0 {
			err = errs.ToAggregate()
		}
		st := job.Status.DeepCopy()
		setCondition(st, job, trainer.OptimizationJobFailed, trainer.OptimizationJobInvalidSpecReason,
			"The search cannot run: "+err.Error()+". Create a new OptimizationJob with the fix; its spec cannot change.")
		return engine.Terminal(), s.writeStatus(ctx, job, st)
	}
	budget, _ := search.FailureBudget(job)                 // ValidateSpec checked it
	settle, _ := search.FinalReportWait(job, s.cfg.Settle) // and this
	trials, err := s.trials(ctx, job)
	if err != nil {
		return engine.Result{}, err
	}
	created := min(trial.TrialsCreated(job), numTrials(job)) // an edited annotation reads no trial past numTrials
	for index := range trials {
		created = max(created, index+1)
	}
	gone, lagging, err := s.missing(ctx, job, key, trials, created)
	if err != nil {
		return engine.Result{}, err
	}
	p := plan(job, srch, trials, missingTrials{created: created, gone: gone, lagging: lagging}, s.cfg.Clock.Now(), settle, budget)
	createErr := s.create(ctx, job, srch, p)
	if err := s.recordCreated(ctx, job, p.created); err != nil && createErr == nil {
		createErr = err
	}
	if err := s.writeStatus(ctx, job, p.status(job, createErr)); err != nil {
		return engine.Result{}, err
	}
	s.announce(job, key, p)
	if createErr != nil {
		return engine.Result{}, createErr
	}
	if p.settleWait > 0 && !p.budgetSpent {
		return engine.RequeueAfter(p.settleWait), nil
	}
	return engine.WaitForEvent(), nil
}

// trials returns job's trials from the cache, by index; a TrainJob with job's label
// that job does not control, or whose record does not read, is skipped and logged.
func (s *Stage) trials(ctx context.Context, job *trainer.OptimizationJob) (map[int]*trainer.TrainJob, error) {
	list, err := s.cfg.TrainJobs.TrainJobs(job.Namespace).List(labels.SelectorFromSet(labels.Set{trial.LabelOptimizationJob: trial.LabelValue(job.Name)}))
	if err != nil {
		return nil, fmt.Errorf("listing the trials of OptimizationJob %s/%s: %w", job.Namespace, job.Name, err)
	}
	out := make(map[int]*trainer.TrainJob, len(list))
	for _, tj := range list {
		if !trial.IsTrialOf(tj, job) {
			continue
		}
		rec, err := trial.Read(tj)
		if err != nil {
			klog.FromContext(ctx).V(2).Info("Ignoring a trial whose record does not read", "trainJob", klog.KObj(tj), "err", err)
			continue
		}
		out[rec.Index] = tj
	}
	return out, nil
}

// missing classifies the indexes below created (trials created so far) that trials,
// the cache, does not hold: gone — deleted (a live read finds no TrainJob of the
// trial's name, or one job does not control), remembered per OptimizationJob so each is
// read once — and lagging, the count that exist though the cache does not show them
// yet (the OptimizationJob's cache can be ahead of the TrainJobs'). Error: a read that
// failed otherwise than NotFound.
func (s *Stage) missing(ctx context.Context, job *trainer.OptimizationJob, key cache.ObjectName, trials map[int]*trainer.TrainJob, created int) (map[int]bool, int, error) {
	s.mu.Lock()
	known := s.seenLocked(job, key)
	gone := make(map[int]bool, len(known.gone))
	for index := range known.gone {
		gone[index] = true
	}
	s.mu.Unlock()
	lagging := 0
	for index := range created {
		if _, ok := trials[index]; ok || gone[index] {
			continue
		}
		tj, err := s.cfg.Client.TrainerV1alpha1().TrainJobs(job.Namespace).Get(ctx, trial.Name(job.Name, index), metav1.GetOptions{})
		switch {
		case err == nil && trial.IsTrialOf(tj, job):
			lagging++
			continue
		case err != nil && !apierrors.IsNotFound(err):
			return nil, 0, fmt.Errorf("reading trial %d of OptimizationJob %s/%s, missing from the cache: %w", index, job.Namespace, job.Name, err)
		}
		gone[index] = true
		klog.FromContext(ctx).V(2).Info("A trial was deleted: counted as cancelled, not created again", "optimizationJob", klog.KObj(job), "index", index)
	}
	s.mu.Lock()
	known = s.seenLocked(job, key)
	for index := range gone {
		known.gone[index] = true
	}
	s.mu.Unlock()
	return gone, lagging, nil
}

// seenLocked returns what this run found of job's trials, new when job (at key) is
// not the OptimizationJob it last saw there (by uid). s.mu must be held.
func (s *Stage) seenLocked(job *trainer.OptimizationJob, key cache.ObjectName) *seenTrials {
	known := s.seen[key]
	if known == nil || known.uid != job.UID {
		known = &seenTrials{uid: job.UID, gone: map[int]bool{}, announced: map[int]bool{}}
		s.seen[key] = known
	}
	return known
}

// forget drops what the Stage remembers of the OptimizationJob at key (finished or
// gone).
func (s *Stage) forget(key cache.ObjectName) {
	s.mu.Lock()
	delete(s.seen, key)
	s.mu.Unlock()
}

// recordCreated writes created as job's trial.AnnotationTrialsCreated when it is
// above the recorded count: a JSON merge patch of that annotation only (RBAC: patch
// optimizationjobs), after the trials were created, so a recorded trial always
// existed. A failed write is retried by the next pass, which finds the new trials in
// the cache.
func (s *Stage) recordCreated(ctx context.Context, job *trainer.OptimizationJob, created int) error {
	if created <= trial.TrialsCreated(job) {
		return nil
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, trial.AnnotationTrialsCreated, strconv.Itoa(created))
	if _, err := s.cfg.Client.TrainerV1alpha1().OptimizationJobs(job.Namespace).Patch(ctx, job.Name, types.MergePatchType, []byte(patch),
		metav1.PatchOptions{FieldManager: "trainyard"}); err != nil {
		return fmt.Errorf("recording %d trials created on OptimizationJob %s/%s: %w", created, job.Namespace, job.Name, err)
	}
	return nil
}

// create creates the trials p says may start now, in index order. A trial that exists
// already as job's (the cache had not shown it yet) counts as created; a TrainJob of its
// name that is not job's is an error (checkOwnTrial). It returns the first error.
func (s *Stage) create(ctx context.Context, job *trainer.OptimizationJob, srch *search.Search, p *progress) error {
	for _, index := range p.next {
		assignment, err := srch.Assignment(index)
		if err != nil {
			return err
		}
		tj, err := trial.New(job, index, assignment)
		if err != nil {
			return err
		}
		created, err := s.cfg.Client.TrainerV1alpha1().TrainJobs(job.Namespace).Create(ctx, tj, metav1.CreateOptions{FieldManager: "trainyard"})
		switch {
		case apierrors.IsAlreadyExists(err):
			err = s.checkOwnTrial(ctx, job, tj.Name)
		case err == nil && s.cfg.Recorder != nil:
			s.cfg.Recorder.Eventf(job, created, corev1.EventTypeNormal, ReasonTrialCreated, actionCreate, "%s",
				eventNote(fmt.Sprintf("Created trial %s: %s", tj.Name, formatParameters(assignment))))
		}
		if err != nil {
			return fmt.Errorf("creating trial %s of OptimizationJob %s/%s: %w", tj.Name, job.Namespace, job.Name, err)
		}
		p.created++
		p.running++
		klog.FromContext(ctx).V(2).Info("Created a trial", "trainJob", klog.KObj(tj), "index", index, "parameters", assignment)
	}
	return nil
}

// checkOwnTrial is called when trial name already exists: nil when job controls it (an
// earlier pass created it and the cache has not shown it yet), else an error naming it
// and the fix — a TrainJob of that name someone else made, or a trial of a deleted
// OptimizationJob of the same name not yet garbage-collected, would otherwise stand in
// for the trial and stall the search. One read, only on a name clash.
func (s *Stage) checkOwnTrial(ctx context.Context, job *trainer.OptimizationJob, name string) error {
	existing, err := s.cfg.Client.TrainerV1alpha1().TrainJobs(job.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if trial.IsTrialOf(existing, job) {
		return nil
	}
	return fmt.Errorf("TrainJob %s/%s exists and is not a trial of this OptimizationJob (uid %s): delete or rename it", job.Namespace, name, job.UID)
}

// writeStatus writes st as job's status when it differs from the cached one (an
// update of the status subresource, resourceVersion-checked: a conflict is retried on
// the cache's newer copy).
func (s *Stage) writeStatus(ctx context.Context, job *trainer.OptimizationJob, st *trainer.OptimizationJobStatus) error {
	if statusEqual(&job.Status, st) {
		return nil
	}
	next := job.DeepCopy()
	next.Status = *st
	if _, err := s.cfg.Client.TrainerV1alpha1().OptimizationJobs(job.Namespace).UpdateStatus(ctx, next, metav1.UpdateOptions{FieldManager: "trainyard"}); err != nil {
		return fmt.Errorf("writing the status of OptimizationJob %s/%s: %w", job.Namespace, job.Name, err)
	}
	return nil
}

func finished(job *trainer.OptimizationJob) bool {
	return meta.IsStatusConditionTrue(job.Status.Conditions, trainer.OptimizationJobComplete) ||
		meta.IsStatusConditionTrue(job.Status.Conditions, trainer.OptimizationJobFailed)
}

func parallelTrials(job *trainer.OptimizationJob) int {
	return int(ptr.Deref(job.Spec.ParallelTrials, 1))
}
func numTrials(job *trainer.OptimizationJob) int { return int(ptr.Deref(job.Spec.NumTrials, 1)) }
