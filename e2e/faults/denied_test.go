package faults

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard/trainyard/e2e/cluster"
	"github.com/trainyard/trainyard/pkg/metrics"
	"github.com/trainyard/trainyard/pkg/trainjob"
)

// deniedMessage is the message of the policy that denies every JobSet of a namespace.
const deniedMessage = "jobsets are denied in this namespace"

// TestDeniedNamespaceDoesNotStarveOthers denies every JobSet of one namespace with a
// ValidatingAdmissionPolicy, as a policy engine would, and creates 600 TrainJobs there —
// more than the pipeline's 500 in-flight slots. Each denied TrainJob must say why it has
// no JobSet (JobSetReady=False, a reason starting with "Write", the policy's message) and
// then hold no slot: trainyard_pipeline_keys_in_flight falls to 0 while all 600 wait out
// the refusal delay. Then 300 TrainJobs of another namespace get their JobSets within
// twice the time (plus 10 s) the same 300 took before the denied namespace existed.
//
// The open namespace is timed after the denied one's refused applies are over, not while
// they run: those 3000 applies, each evaluated by the policy, load the API server far more
// than they load the controller, and a baseline taken before them cannot account for it
// (docs/design/status-writes.md, "Writes from a lagging cache"). What the test guards is
// the capacity the refused TrainJobs hold, which the gauge and the open burst both show.
func TestDeniedNamespaceDoesNotStarveOthers(t *testing.T) {
	timed(t)
	const denied, open = 600, 300
	e := newEnv(t)
	const user = "trainyard-denied"
	ctrl := e.startController(t, "", user)

	// The baseline: the same work with nothing denied.
	baselineNS := e.namespace(t)
	baseline := e.timeAllJobSets(t, baselineNS, open, 3*time.Minute)

	audit := e.auditFromNow(t)
	deniedNS := e.namespace(t)
	e.denyJobSets(t, deniedNS)
	deniedStart := time.Now()
	e.startBurst(deniedNS, denied, 0).wait(t, 3*time.Minute)
	last := "not checked yet"
	cluster.Eventually(t, 5*time.Minute, "every denied TrainJob with JobSetReady=False, reason Write…, the policy's message", func(ctx context.Context) (bool, string) {
		tjs, err := e.trainers.TrainerV1alpha1().TrainJobs(deniedNS).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return false, last + " (" + err.Error() + ")"
		}
		done, example := 0, "no TrainJob"
		for _, tj := range tjs.Items {
			c := meta.FindStatusCondition(tj.Status.Conditions, trainjob.ConditionJobSetReady)
			if c != nil && c.Status == metav1.ConditionFalse && strings.HasPrefix(c.Reason, "Write") && strings.Contains(c.Message, deniedMessage) {
				done++
			} else {
				example = fmt.Sprintf("%s: %+v", tj.Name, c)
			}
		}
		last = fmt.Sprintf("%d of %d; e.g. %s", done, denied, example)
		return done == denied, last
	})
	refused := map[string]int{}
	for _, ev := range readAudit(t, audit) {
		if ev.User.Username == user && ev.ObjectRef != nil && ev.ObjectRef.Resource == "jobsets" && ev.ObjectRef.Namespace == deniedNS && (ev.Code() == 403 || ev.Code() == 422) {
			refused[ev.ObjectRef.Name]++
		}
	}
	applies := 0
	for _, n := range refused {
		applies += n
	}
	if len(refused) != denied {
		t.Errorf("the audit log shows refused JobSet writes for %d denied TrainJobs, want %d", len(refused), denied)
	}
	t.Logf("all %d denied TrainJobs had their condition %s after their burst began, after %d refused applies",
		denied, time.Since(deniedStart).Round(100*time.Millisecond), applies)
	cluster.Eventually(t, 30*time.Second, "no key in flight while the denied TrainJobs wait out the refusal delay", func(context.Context) (bool, string) {
		n := ctrl.Metric(t, metrics.PipelineKeysInFlight)
		return n == 0, fmt.Sprintf("%s = %v", metrics.PipelineKeysInFlight, n)
	})

	openNS := e.namespace(t)
	withDenied := e.timeAllJobSets(t, openNS, open, 2*baseline+time.Minute)
	t.Logf("%d TrainJobs of another namespace got their JobSets in %s with %d refused TrainJobs waiting, %s without (%.2f×)",
		open, withDenied.Round(100*time.Millisecond), denied, baseline.Round(100*time.Millisecond), withDenied.Seconds()/baseline.Seconds())
	if limit := 2*baseline + 10*time.Second; withDenied > limit {
		t.Errorf("with %d refused TrainJobs waiting, %d others took %s, more than 2 × %s + 10s", denied, open, withDenied, baseline)
	}
}

// timeAllJobSets creates n TrainJobs in ns and returns how long until each has its
// JobSet, failing the test after timeout.
func (e *env) timeAllJobSets(t *testing.T, ns string, n int, timeout time.Duration) time.Duration {
	t.Helper()
	b := e.startBurst(ns, n, 0)
	ty := e.waitAllJobSets(t, ns, n, timeout)
	expectExact(t, ty, n)
	return time.Since(b.start)
}

// denyJobSets installs a ValidatingAdmissionPolicy and its binding that deny every
// JobSet create and update in ns, removed when the test ends, and waits until the API
// server enforces them.
func (e *env) denyJobSets(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	name := "deny-jobsets-" + ns
	policies := e.c.Client().AdmissionregistrationV1().ValidatingAdmissionPolicies()
	bindings := e.c.Client().AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
	_, err := policies.Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule: admissionregistrationv1.Rule{
						APIGroups: []string{jobsetv1alpha2.GroupVersion.Group}, APIVersions: []string{"*"}, Resources: []string{"jobsets"},
					},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{Expression: "false", Message: deniedMessage}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating ValidatingAdmissionPolicy %s: %v", name, err)
	}
	t.Cleanup(func() { _ = policies.Delete(ctx, name, metav1.DeleteOptions{}) })
	_, err = bindings.Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{corev1.LabelMetadataName: ns},
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating ValidatingAdmissionPolicyBinding %s: %v", name, err)
	}
	t.Cleanup(func() { _ = bindings.Delete(ctx, name, metav1.DeleteOptions{}) })

	probe := &jobsetv1alpha2.JobSet{
		ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns},
		Spec: jobsetv1alpha2.JobSetSpec{ReplicatedJobs: []jobsetv1alpha2.ReplicatedJob{{
			Name: "node", Replicas: 1,
			Template: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "node", Image: "busybox"}},
			}}}},
		}}},
	}
	cluster.Eventually(t, 30*time.Second, "the policy denies JobSets in "+ns, func(ctx context.Context) (bool, string) {
		_, err := e.jobsets.JobsetV1alpha2().JobSets(ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil {
			return false, "a JobSet is admitted"
		}
		return (apierrors.IsForbidden(err) || apierrors.IsInvalid(err)) && strings.Contains(err.Error(), deniedMessage), err.Error()
	})
}
