package bench

// The admission and lifecycle modes (issue 9): one burst of N TrainJobs against the
// running controller, timed to every JobSet (admission) or to every TrainJob Complete
// (lifecycle); in admission mode also the physical limit, the API server alone taking
// the same creates, and optionally a restart (restart.go). lifecycle.go holds what is
// lifecycle mode's alone.

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard/trainyard/pkg/stages/status"
)

func (r *runner) run(ctx context.Context) (*Result, error) {
	res := newResult(r.cfg)
	if err := r.installRuntime(ctx); err != nil {
		return nil, err
	}
	for _, ns := range []string{benchNamespace, rawTrainJobsNS, rawJobSetsNS, rawAppliesNS} {
		if err := r.createNamespace(ctx, ns); err != nil {
			return nil, err
		}
	}
	ctrl, args, err := r.startController(ctx)
	if err != nil {
		return nil, err
	}
	defer ctrl.Stop()

	m, err := r.measure(ctx, ctrl, benchNamespace, r.cfg.N, r.cfg.Mode == ModeLifecycle, 0)
	if err != nil {
		return nil, err
	}
	m.fill(res)
	if r.cfg.Webhooks {
		res.Admission.Reviews = reviewFigures(m.before.metrics, m.after.metrics)
	}
	r.timeline = m.timeline

	if r.cfg.Mode == ModeAdmission {
		ctrl.Stop()
		if r.cfg.Restart {
			if res.Restart, err = r.measureRestart(ctx, res.Admission.Admitted, args); err != nil {
				return nil, err
			}
		}
		if res.Limit, err = r.measureLimit(ctx); err != nil {
			return nil, err
		}
	}
	res.Targets = evaluateTargets(res)
	return res, nil
}

// measureLimit times, with no controller running, the same N TrainJob
// creates and N creates of the JobSets the controller produced (listed from
// the API, owner references dropped so the garbage collector leaves them
// alone), each at the benchmark's parallelism, each into a fresh namespace.
func (r *runner) measureLimit(ctx context.Context) (*Limit, error) {
	return r.limit(ctx, benchNamespace, r.cfg.N, limitNamespaces{rawTrainJobsNS, rawJobSetsNS, rawAppliesNS})
}

// limitNamespaces are the three namespaces, existing and empty, that a limit
// measurement creates into: the TrainJobs, the JobSets created, the JobSets applied.
type limitNamespaces struct{ trainJobs, jobSets, applies string }

// limit is measureLimit for the JobSets in namespace from and n TrainJob creates,
// into ns.
func (r *runner) limit(ctx context.Context, from string, n int, ns limitNamespaces) (*Limit, error) {
	list, err := r.jobsets.JobsetV1alpha2().JobSets(from).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	produced := make([]*jobsetv1alpha2.JobSet, 0, len(list.Items))
	for i := range list.Items {
		js := &list.Items[i]
		produced = append(produced, &jobsetv1alpha2.JobSet{
			ObjectMeta: metav1.ObjectMeta{Name: js.Name, Namespace: ns.jobSets, Labels: js.Labels, Annotations: js.Annotations},
			Spec:       js.Spec,
		})
	}
	r.say("raw limit: %d TrainJob creates with no controller", n)
	tjs := burst(ctx, n, r.cfg.Parallelism, r.createTrainJob(ns.trainJobs))
	r.say("raw limit: %d JobSet creates", len(produced))
	jss := burst(ctx, len(produced), r.cfg.Parallelism, func(ctx context.Context, i int) error {
		_, err := r.jobsets.JobsetV1alpha2().JobSets(ns.jobSets).Create(ctx, produced[i], metav1.CreateOptions{})
		return err
	})
	// The controller creates JobSets with server-side apply (as upstream does), which
	// costs the API server more than a create: time the same JobSets applied so, too.
	r.say("raw limit: %d JobSet server-side applies", len(produced))
	apply := status.RESTJobSetApply(r.jobsets.JobsetV1alpha2().RESTClient())
	jsa := burst(ctx, len(produced), r.cfg.Parallelism, func(ctx context.Context, i int) error {
		js := produced[i].DeepCopy()
		js.Namespace = ns.applies
		js.APIVersion, js.Kind = jobsetv1alpha2.SchemeGroupVersion.String(), "JobSet"
		body, err := (&status.Desired{JobSet: js}).JobSetApplyBody()
		if err != nil {
			return err
		}
		return apply(ctx, js.Namespace, js.Name, body)
	})
	l := &Limit{
		TrainJobCreateSeconds: round3(tjs.Seconds()), TrainJobCreateErrors: tjs.Errors,
		JobSetCreateSeconds: round3(jss.Seconds()), JobSetCreateErrors: jss.Errors,
		JobSetApplySeconds: round3(jsa.Seconds()), JobSetApplyErrors: jsa.Errors,
	}
	l.TrainJobCreatesPerSecond = round3(float64(n-tjs.Errors) / tjs.Seconds())
	l.JobSetCreatesPerSecond = round3(float64(len(produced)-jss.Errors) / jss.Seconds())
	l.JobSetAppliesPerSecond = round3(float64(len(produced)-jsa.Errors) / jsa.Seconds())
	l.TrainJobsPerSecond = round3(float64(n) / (tjs.Seconds() + jss.Seconds()))
	l.TrainJobsPerSecondWithApply = round3(float64(n) / (tjs.Seconds() + jsa.Seconds()))
	return l, nil
}

// apiServerBound explains a figure that the API server, not the controller, bounds:
// the machine was saturated (≥ 90% of its cores busy) and kube-apiserver + etcd used
// at least four times the controller's CPU, so TrainJobs queued behind the API
// server's own throughput. Empty otherwise.
func apiServerBound(r *Result) string {
	server := r.Components["kube-apiserver"] + r.Components["etcd"]
	ctrl := r.Components["trainyard"]
	if r.Machine.Utilisation < 0.9 || ctrl <= 0 || server < 4*ctrl || r.Limit == nil {
		return ""
	}
	return fmt.Sprintf("bounded by the API server: the machine was %.0f%% busy; kube-apiserver + etcd used %.1f CPU s, the controller %.1f; "+
		"the controller's JobSet writes are server-side applies (raw: %.0f/s) where the limit counts creates (%.0f/s); "+
		"%d TrainJobs at the limit's %.0f/s take ≥ %.1f s however fast the controller is",
		r.Machine.Utilisation*100, server, ctrl, r.Limit.JobSetAppliesPerSecond, r.Limit.JobSetCreatesPerSecond,
		r.N, r.Limit.TrainJobsPerSecond, float64(r.N)/r.Limit.TrainJobsPerSecond)
}

// CompareThroughput adds a target to r: admission throughput no lower than
// (1 - tolerance) × a baseline run's. Issue 9: N = 10,000 within 20% of N = 2,000;
// issue 13: webhooks on within 10% of webhooks off.
func CompareThroughput(r, baseline *Result, tolerance float64) {
	if r.Admission == nil || baseline == nil || baseline.Admission == nil || baseline.Admission.TrainJobsPerSecond == 0 {
		return
	}
	ratio := r.Admission.TrainJobsPerSecond / baseline.Admission.TrainJobsPerSecond
	name := fmt.Sprintf("throughput at N = %d vs N = %d", r.N, baseline.N)
	if r.Admission.Reviews != nil && baseline.Admission.Reviews == nil {
		name = fmt.Sprintf("throughput with webhooks vs without (N = %d, %d)", r.N, baseline.N)
	}
	r.Targets = append(r.Targets, Target{
		Name:     name,
		Target:   fmt.Sprintf("within %.0f%%", tolerance*100),
		Measured: fmt.Sprintf("%.0f/s vs %.0f/s (%.2f×)", r.Admission.TrainJobsPerSecond, baseline.Admission.TrainJobsPerSecond, ratio),
		Met:      ratio >= 1-tolerance,
	})
}

// admissionTargets states issue 9's admission targets: throughput against the
// physical limit, latency p99, writes and controller CPU per TrainJob.
func admissionTargets(ts *targetList, r *Result) {
	c := r.Controller
	ratio := r.Admission.TrainJobsPerSecond / r.Limit.TrainJobsPerSecond
	tjRatio := r.Admission.TrainJobsPerSecond / r.Limit.TrainJobCreatesPerSecond
	ts.add("admission throughput", fmt.Sprintf("≥ %.1f × limit", targetThroughputRatio),
		fmt.Sprintf("%.0f/s = %.2f × %.0f/s", r.Admission.TrainJobsPerSecond, ratio, r.Limit.TrainJobsPerSecond),
		ratio >= targetThroughputRatio,
		joinNotes(apiServerBound(r), fmt.Sprintf("limit = N / (raw TrainJob creates + raw JobSet creates); against the limit with the JobSets server-side applied, as the controller must (%.0f/s), the ratio is %.2f; against TrainJob creates alone (%.0f/s) %.2f",
			r.Limit.TrainJobsPerSecondWithApply, r.Admission.TrainJobsPerSecond/r.Limit.TrainJobsPerSecondWithApply, r.Limit.TrainJobCreatesPerSecond, tjRatio)))
	ts.add("admission latency p99", fmt.Sprintf("≤ %.0f s", targetP99Seconds), fmt.Sprintf("%.2f s", r.Admission.LatencyP99),
		r.Admission.LatencyP99 <= targetP99Seconds, apiServerBound(r))
	ts.add("API writes per TrainJob at admission", fmt.Sprintf("%.1f", targetAdmissionWrites), fmt.Sprintf("%.3f (%s)", c.WritesPerTrainJob, methods(c.Requests, true)),
		c.WritesPerTrainJob <= targetAdmissionWrites, "")
	ts.add("controller CPU per 1,000 TrainJobs", fmt.Sprintf("≤ %.1f s", targetCPUPer1000), fmt.Sprintf("%.2f s", c.CPUSecondsPer1000),
		c.CPUSecondsPer1000 <= targetCPUPer1000, "")
}

// admissionReport renders the admission section: creates, admissions, latency, and
// with webhooks on the admission reviews.
func admissionReport(w func(string, ...any), r *Result, a *Admission) {
	if r.Kueue != nil {
		w("\n## Admission (TrainJob created → JobSet exists, suspended while Kueue queues the TrainJob)\n\n")
	} else {
		w("\n## Admission (TrainJob created → JobSet exists)\n\n")
	}
	w("- %d TrainJobs created in %.2f s (%.0f/s, %d errors)\n", r.N, a.CreateSeconds, a.TrainJobCreatesPerSecond, a.CreateErrors)
	w("- %d admitted in %.2f s: **%.0f TrainJobs/s**\n", a.Admitted, a.Seconds, a.TrainJobsPerSecond)
	w("- latency p50 %.3f s, p99 %.3f s, max %.3f s\n", a.LatencyP50, a.LatencyP99, a.LatencyMax)
	if rv := a.Reviews; rv != nil {
		w("- webhooks on: %d TrainJob admission reviews (validate + mutate), p50 %.4f s, p99 %.4f s in the webhook\n", rv.Count, rv.P50Seconds, rv.P99Seconds)
	}
}

// limitReport renders the physical limit's section: the API server alone taking the
// run's TrainJob creates and the JobSets created and applied.
func limitReport(w func(string, ...any), r *Result, l *Limit) {
	w("\n## Physical limit (API server alone, no controller, same parallelism)\n\n")
	w("- %d TrainJob creates: %.2f s (%.0f/s)\n", r.N, l.TrainJobCreateSeconds, l.TrainJobCreatesPerSecond)
	w("- the produced JobSets created raw: %.2f s (%.0f/s)\n", l.JobSetCreateSeconds, l.JobSetCreatesPerSecond)
	w("- the same JobSets server-side applied (what the controller sends): %.2f s (%.0f/s)\n", l.JobSetApplySeconds, l.JobSetAppliesPerSecond)
	w("- both: **%.0f TrainJobs/s** (%.0f/s with the applies)\n", l.TrainJobsPerSecond, l.TrainJobsPerSecondWithApply)
}
