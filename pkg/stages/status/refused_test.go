package status_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clienttesting "k8s.io/client-go/testing"

	"github.com/trainyard/trainyard/pkg/engine"
	"github.com/trainyard/trainyard/pkg/metrics"
	"github.com/trainyard/trainyard/pkg/stages/status"
	"github.com/trainyard/trainyard/pkg/trainjob"
	utiltesting "github.com/trainyard/trainyard/pkg/util/testing"
)

var jobSets = schema.GroupResource{Group: "jobset.x-k8s.io", Resource: "jobsets"}

// policyDenial is what a ValidatingAdmissionPolicy says of a JobSet it denies (with 403
// when its validation sets reason Forbidden, 422 by default).
const policyDenial = "ValidatingAdmissionPolicy 'no-jobsets' with binding 'no-jobsets' denied request: JobSets are not allowed in team-a"

// denyJobSetApplies makes every JobSet apply fail with err, until the returned
// function is called.
func (f *fixture) denyJobSetApplies(err error) (allow func()) {
	deny := true
	f.jobsets.PrependReactor("patch", "jobsets", func(clienttesting.Action) (bool, runtime.Object, error) {
		if deny {
			return true, nil, err
		}
		return false, nil, nil
	})
	return func() { deny = false }
}

// syncDrained syncs and drops the events the sync recorded (the fake recorder's channel
// is bounded, and blocks when full).
func (f *fixture) syncDrained(t *testing.T) (engine.Result, error) {
	t.Helper()
	res, err := f.sync(t)
	utiltesting.Events(f.recorder)
	return res, err
}

// jobSetReady returns the stored TrainJob's JobSetReady condition, nil when absent.
func (f *fixture) jobSetReady(t *testing.T) *metav1.Condition {
	t.Helper()
	return findCondition(f.storedTrainJob(t).Status.Conditions, trainjob.ConditionJobSetReady)
}

// TestRefusedJobSetApply: a JobSet apply the API server refuses with an error retrying
// does not fix is retried with the queue's backoff (Retry, the error) up to the
// threshold, with no condition; at the threshold the TrainJob gets JobSetReady=False,
// reason Write<StatusReason>, the message naming the JobSet and quoting the server, and
// the stage asks to be synced again after the refusal delay instead of the backoff;
// later refusals write nothing more; once the apply goes through, JobSetReady turns
// True.
func TestRefusedJobSetApply(t *testing.T) {
	for name, c := range map[string]struct {
		err       error
		threshold int           // Stage.RefusalThreshold; 0 for the default
		delay     time.Duration // Stage.RefusalDelay; 0 for the default
		reason    string
		words     string // the server's words the message quotes
	}{
		"403 from an admission policy with reason Forbidden, default threshold and delay": {
			err:    apierrors.NewForbidden(jobSets, tjName, errors.New(policyDenial)),
			reason: "WriteForbidden",
			words:  `jobsets.jobset.x-k8s.io "llm" is forbidden: ` + policyDenial,
		},
		"422 Invalid": {
			err: apierrors.NewInvalid(schema.GroupKind{Group: "jobset.x-k8s.io", Kind: "JobSet"}, tjName, field.ErrorList{
				field.Invalid(field.NewPath("spec", "replicatedJobs").Index(0).Child("name"), "Node", "must be a DNS label")}),
			threshold: 3, delay: 7 * time.Minute,
			reason: "WriteInvalid",
			words:  `JobSet.jobset.x-k8s.io "llm" is invalid: spec.replicatedJobs[0].name: Invalid value: "Node": must be a DNS label`,
		},
		"400 from a webhook, without a reason": {
			err: &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusBadRequest,
				Message: `admission webhook "jobsets.example.com" denied the request: no GPUs on Sundays`}},
			threshold: 2, delay: time.Hour,
			reason: "WriteBadRequest",
			words:  `admission webhook "jobsets.example.com" denied the request: no GPUs on Sundays`,
		},
		"405 MethodNotAllowed": {
			err:    apierrors.NewMethodNotSupported(jobSets, "patch"),
			reason: "WriteMethodNotAllowed",
			words:  `patch is not supported on resources of kind "jobsets.jobset.x-k8s.io"`,
		},
		"413 RequestEntityTooLarge": {
			err:       apierrors.NewRequestEntityTooLargeError("limit is 3145728"),
			threshold: 2,
			reason:    "WriteRequestEntityTooLarge",
			words:     "Request entity too large: limit is 3145728",
		},
	} {
		t.Run(name, func(t *testing.T) {
			tj := makeTrainJob().Obj()
			f := newFixture(t, tj, nil)
			f.stage.RefusalThreshold, f.stage.RefusalDelay = c.threshold, c.delay
			threshold, delay := c.threshold, c.delay
			if threshold == 0 {
				threshold = status.DefaultRefusalThreshold
			}
			if delay == 0 {
				delay = status.DefaultRefusalDelay
			}
			reg := prometheus.NewRegistry()
			f.stage.Metrics = metrics.New(reg)
			f.plans.Put(key, tj.UID, tj.Generation, desiredPlan(t, tj))
			allow := f.denyJobSetApplies(c.err)

			for i := 1; i < threshold; i++ {
				got, err := f.syncDrained(t)
				if err != nil || got != engine.RequeueAfter(status.RefusalBackoff(i)) {
					t.Fatalf("refusal %d: Sync = %v, %v; want requeue after %v, past the queue's token bucket", i, got, err, status.RefusalBackoff(i))
				}
			}
			if n := len(utiltesting.Writes(f.trainer.Actions())); n != 0 {
				t.Fatalf("%d status writes below the threshold, want none", n)
			}

			got, err := f.syncDrained(t)
			if err != nil {
				t.Fatalf("refusal %d: Sync: %v", threshold, err)
			}
			if diff := cmp.Diff(engine.RequeueAfter(delay), got); diff != "" {
				t.Errorf("refusal %d: Sync result (-want +got):\n%s", threshold, diff)
			}
			cond := f.jobSetReady(t)
			if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != c.reason {
				t.Fatalf("JobSetReady = %+v, want False, reason %s", cond, c.reason)
			}
			if !strings.HasPrefix(cond.Reason, trainjob.ReasonPrefixWrite) {
				t.Errorf("reason %q does not start with %q", cond.Reason, trainjob.ReasonPrefixWrite)
			}
			if !slices.Contains(trainjob.WaitingReasons, cond.Reason) {
				t.Errorf("reason %q is not one of trainjob.WaitingReasons: the Reason printer column would not show it", cond.Reason)
			}
			for _, want := range []string{`JobSet "llm"`, c.words, delay.String()} {
				if !strings.Contains(cond.Message, want) {
					t.Errorf("message %q does not say %q", cond.Message, want)
				}
			}
			if _, ok := f.plans.Get(key, tj.UID, tj.Generation); !ok {
				t.Error("plan dropped: the next attempt needs it")
			}

			// Refused again: the same wait, and no status write.
			f.refreshCache(t)
			writes := len(utiltesting.Writes(f.trainer.Actions()))
			if got, err := f.syncDrained(t); err != nil || got != engine.RequeueAfter(delay) {
				t.Errorf("refusal %d: Sync = %v, %v; want requeue after %v", threshold+1, got, err, delay)
			}
			if n := len(utiltesting.Writes(f.trainer.Actions())) - writes; n != 0 {
				t.Errorf("%d status writes at an unchanged refusal, want none", n)
			}

			refusedReason := strings.TrimPrefix(c.reason, trainjob.ReasonPrefixWrite)
			if n := refusedWrites(t, reg, refusedReason); n != float64(threshold+1) {
				t.Errorf("%s{reason=%q} = %v, want %d: every refused attempt", metrics.WritesRefusedTotal, refusedReason, n, threshold+1)
			}

			// The policy is lifted: the apply goes through and JobSetReady turns True.
			allow()
			if got, err := f.syncDrained(t); err != nil || got != engine.WaitForEvent() {
				t.Fatalf("Sync after the refusal ended = %v, %v; want wait_for_event", got, err)
			}
			if cond := f.jobSetReady(t); cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != trainjob.ReasonJobSetBuilt {
				t.Errorf("JobSetReady = %+v, want True, reason JobSetBuilt", cond)
			}
		})
	}
}

// refusedWrites returns trainyard_writes_refused_total{reason}.
func refusedWrites(t *testing.T, reg prometheus.Gatherer, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != metrics.WritesRefusedTotal {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == metrics.LabelReason && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("%s{reason=%q} not gathered", metrics.WritesRefusedTotal, reason)
	return 0
}

// TestRetryableWriteErrorsAreNotRefusals: conflicts, timeouts, throttling and server
// errors are retried with the queue's backoff however often they repeat: never a
// condition, never the refusal delay.
func TestRetryableWriteErrorsAreNotRefusals(t *testing.T) {
	for name, err := range map[string]error{
		"500":      apierrors.NewInternalError(errors.New("etcdserver: leader changed")),
		"503":      apierrors.NewServiceUnavailable("the server is shutting down"),
		"429":      apierrors.NewTooManyRequests("slow down", 1),
		"409":      apierrors.NewConflict(jobSets, tjName, errors.New("the object has been modified")),
		"504":      apierrors.NewTimeoutError("request did not complete", 0),
		"deadline": context.DeadlineExceeded,
	} {
		t.Run(name, func(t *testing.T) {
			tj := makeTrainJob().Obj()
			f := newFixture(t, tj, nil)
			f.stage.RefusalThreshold = 2
			f.plans.Put(key, tj.UID, tj.Generation, desiredPlan(t, tj))
			f.denyJobSetApplies(err)
			for i := range 5 {
				got, gotErr := f.syncDrained(t)
				if !errors.Is(gotErr, err) || got != engine.Retry() {
					t.Fatalf("attempt %d: Sync = %v, %v; want retry, the API error", i+1, got, gotErr)
				}
			}
			if diff := cmp.Diff([]string(nil), utiltesting.Writes(f.trainer.Actions())); diff != "" {
				t.Errorf("status writes (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRefusedSideObject: a side object the API server refuses (here the hostfile
// ConfigMap of a running TrainJob, in a namespace being deleted) counts like the
// JobSet: the condition names it. A pass whose writes go through ends the count, so the
// next refusal starts from one; JobSetReady turns True again once the object is
// written, though the running JobSet is not applied.
func TestRefusedSideObject(t *testing.T) {
	tj := makeTrainJob().Obj()
	hash := hashOf(t, tj)
	js := makeJobSet(tj).Suspend(false).Annotation(status.AnnotationJobSetHash, hash).ReplicatedJobStatus("node", 2, 0, 0, 2, 0).Obj()
	f := newFixture(t, tj, js)
	f.stage.RefusalThreshold = 3
	var log []string
	terminating := apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "llm-config",
		errors.New("unable to create new content in namespace team-a because it is being terminated"))
	applier := &recordingApplier{log: &log, applyErr: terminating}
	f.stage.Objects = applier
	sync := func(t *testing.T) engine.Result {
		t.Helper()
		f.plans.Put(key, tj.UID, tj.Generation, planWithSideObjects(t, "x"))
		got, err := f.syncDrained(t)
		if err != nil && !errors.Is(err, terminating) {
			t.Fatalf("Sync: %v", err)
		}
		return got
	}

	for i := 1; i <= 2; i++ {
		if got := sync(t); got != engine.RequeueAfter(status.RefusalBackoff(i)) {
			t.Fatalf("refusal %d: Sync = %v, want requeue after %v", i, got, status.RefusalBackoff(i))
		}
	}
	applier.applyErr = nil
	if got := sync(t); got != engine.WaitForEvent() {
		t.Fatalf("Sync with the ConfigMap written = %v, want wait_for_event", got)
	}

	// The ConfigMap is deleted and refused again: the count starts over.
	delete(applier.objects, "ConfigMap llm-config")
	applier.applyErr = terminating
	for i := 1; i <= 2; i++ {
		if got := sync(t); got != engine.RequeueAfter(status.RefusalBackoff(i)) {
			t.Fatalf("refusal %d after a success: Sync = %v, want requeue after %v (the count starts over)", i, got, status.RefusalBackoff(i))
		}
	}
	if got := sync(t); got != engine.RequeueAfter(status.DefaultRefusalDelay) {
		t.Fatalf("refusal 3 after a success: Sync = %v, want requeue after %v", got, status.DefaultRefusalDelay)
	}
	cond := f.jobSetReady(t)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != "WriteForbidden" {
		t.Fatalf("JobSetReady = %+v, want False, reason WriteForbidden", cond)
	}
	for _, want := range []string{`ConfigMap "llm-config"`, "because it is being terminated"} {
		if !strings.Contains(cond.Message, want) {
			t.Errorf("message %q does not say %q", cond.Message, want)
		}
	}

	f.refreshCache(t)
	applier.applyErr = nil
	if got := sync(t); got != engine.WaitForEvent() {
		t.Fatalf("Sync with the ConfigMap written = %v, want wait_for_event", got)
	}
	if n := len(f.jobSetApplies()); n != 0 {
		t.Errorf("JobSet applies = %d, want none: a running JobSet is never modified", n)
	}
	if cond := f.jobSetReady(t); cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != trainjob.ReasonJobSetBuilt {
		t.Errorf("JobSetReady = %+v, want True, reason JobSetBuilt", cond)
	}
}

// TestRefusalCountIsPerGeneration: refusals of an older generation's writes do not
// count toward the new generation's threshold: the spec change may be the fix.
func TestRefusalCountIsPerGeneration(t *testing.T) {
	tj := makeTrainJob().Obj()
	f := newFixture(t, tj, nil)
	f.stage.RefusalThreshold = 3
	f.denyJobSetApplies(apierrors.NewForbidden(jobSets, tjName, errors.New(policyDenial)))
	f.plans.Put(key, tj.UID, tj.Generation, desiredPlan(t, tj))
	for i := 1; i <= 2; i++ {
		if got, _ := f.syncDrained(t); got != engine.RequeueAfter(status.RefusalBackoff(i)) {
			t.Fatalf("refusal %d: Sync = %v, want requeue after %v", i, got, status.RefusalBackoff(i))
		}
	}

	next := makeTrainJob().Generation(2).Obj()
	if err := f.tjCache.Update(next); err != nil {
		t.Fatal(err)
	}
	f.plans.Put(key, next.UID, next.Generation, desiredPlan(t, next))
	for i := 1; i <= 2; i++ {
		if got, _ := f.syncDrained(t); got != engine.RequeueAfter(status.RefusalBackoff(i)) {
			t.Fatalf("refusal %d of generation 2: Sync = %v, want requeue after %v (the count starts over)", i, got, status.RefusalBackoff(i))
		}
	}
	if got, _ := f.syncDrained(t); got != engine.RequeueAfter(status.DefaultRefusalDelay) {
		t.Fatalf("refusal 3 of generation 2: Sync = %v, want requeue after %v", got, status.DefaultRefusalDelay)
	}
	if cond := f.jobSetReady(t); cond == nil || cond.Reason != "WriteForbidden" || cond.ObservedGeneration != 2 {
		t.Errorf("JobSetReady = %+v, want reason WriteForbidden at generation 2", cond)
	}
}
