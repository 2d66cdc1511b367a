package kai_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/gang/gangtest"
	"github.com/trainyard/trainyard/pkg/stages/gang/kai"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/stages/plan/plantest"
)

func policy(queue string) *trainer.PodGroupPolicy {
	return &trainer.PodGroupPolicy{PodGroupPolicySource: trainer.PodGroupPolicySource{
		KAIScheduler: &trainer.KAISchedulerPodGroupPolicySource{Queue: queue}}}
}

// KAI gets the queue as the label kai.scheduler/queue on the JobSet and every pod, and
// every pod is scheduled by kai-scheduler; KAI's podgrouper makes the PodGroup, so the
// backend plans no side object. A pod template on another scheduler is an input error
// naming it: half a gang on another scheduler never starts.
func TestApply(t *testing.T) {
	cases := map[string]struct {
		numNodes   int32
		schedulers map[string]string // replicatedJob → the runtime's schedulerName
		jobLabels  map[string]string // the JobSet's own labels
		wantErr    string            // the InvalidInputError's field; "" for none
	}{
		"no schedulerName": {numNodes: 3},
		"default-scheduler is replaced": {
			numNodes: 2, schedulers: map[string]string{"node": "default-scheduler", "dataset-initializer": "default-scheduler"},
		},
		"kai-scheduler already": {numNodes: 1, schedulers: map[string]string{"node": "kai-scheduler"}},
		"the JobSet's own labels stay": {
			numNodes: 1, jobLabels: map[string]string{"team": "research", kai.LabelQueue: "someone-elses"},
		},
		"another scheduler on the trainer": {
			numNodes: 2, schedulers: map[string]string{"node": "volcano"},
			wantErr: "spec.template.spec.replicatedJobs[name=node].template.spec.template.spec.schedulerName",
		},
		"another scheduler on an initializer": {
			numNodes: 2, schedulers: map[string]string{"model-initializer": "scheduler-plugins-scheduler"},
			wantErr: "spec.template.spec.replicatedJobs[name=model-initializer].template.spec.template.spec.schedulerName",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tj, p := gangtest.Skeleton(t, policy("team-a"), tc.numNodes)
			for rj, s := range tc.schedulers {
				plan.PodSpec(plan.ReplicatedJob(p.JobSet, rj)).SchedulerName = s
			}
			p.JobSet.Labels = tc.jobLabels
			err := (kai.Backend{}).Apply(context.Background(), tj, p)
			if tc.wantErr != "" {
				var invalid *plan.InvalidInputError
				if !errors.As(err, &invalid) || invalid.Field != tc.wantErr || invalid.Object != "TrainingRuntime/test-runtime" {
					t.Fatalf("err = %#v, want an InvalidInputError of TrainingRuntime/test-runtime at %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			wantJobLabels := map[string]string{kai.LabelQueue: "team-a"}
			if _, ok := tc.jobLabels["team"]; ok {
				wantJobLabels["team"] = "research"
			}
			if diff := cmp.Diff(wantJobLabels, p.JobSet.Labels); diff != "" {
				t.Errorf("JobSet labels (-want +got):\n%s", diff)
			}
			for _, rj := range p.JobSet.Spec.ReplicatedJobs {
				pod := rj.Template.Spec.Template
				if pod.Spec.SchedulerName != "kai-scheduler" {
					t.Errorf("replicatedJob %s: schedulerName %q, want kai-scheduler", rj.Name, pod.Spec.SchedulerName)
				}
				if diff := cmp.Diff(map[string]string{"kai.scheduler/queue": "team-a"}, pod.Labels); diff != "" {
					t.Errorf("replicatedJob %s pod labels (-want +got):\n%s", rj.Name, diff)
				}
			}
			if len(p.Objects) != 0 {
				t.Errorf("planned %d side objects; KAI's podgrouper makes the PodGroup", len(p.Objects))
			}
			if len(p.JobSet.Spec.ReplicatedJobs) != 3 || *plan.TrainerJob(p.JobSet).Template.Spec.Parallelism != tc.numNodes {
				t.Errorf("the backend changed the replicatedJobs or their counts")
			}
		})
	}
}

func TestEnabled(t *testing.T) {
	b := kai.Backend{}
	if b.Name() != "kaiScheduler" {
		t.Errorf("Name() = %q, want kaiScheduler (the podGroupPolicy member)", b.Name())
	}
	if !b.Enabled(policy("q")) {
		t.Error("Enabled(kaiScheduler) = false")
	}
	if b.Enabled(&trainer.PodGroupPolicy{PodGroupPolicySource: trainer.PodGroupPolicySource{Workload: &trainer.WorkloadPodGroupPolicySource{}}}) {
		t.Error("Enabled(workload) = true")
	}
}

// Upstream's DeepSpeed runtime (MPI: a launcher and node workers) with KAI: both
// replicatedJobs' pods are on kai-scheduler in the queue, beside the MPI objects.
func TestUpstreamMPIRuntime(t *testing.T) {
	rt := gangtest.WithPolicy(plantest.UpstreamRuntimeFile(t, "runtimes/deepspeed_distributed.yaml"), policy("gpu-queue"))
	tj := plantest.TrainJob(rt.Name, &trainer.Trainer{})
	p := gangtest.Plan(t, tj, rt)
	objects := len(p.Objects)
	if err := (kai.Backend{}).Apply(context.Background(), tj, p); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, rj := range p.JobSet.Spec.ReplicatedJobs {
		names = append(names, rj.Name)
		pod := rj.Template.Spec.Template
		if pod.Spec.SchedulerName != kai.SchedulerName || pod.Labels[kai.LabelQueue] != "gpu-queue" {
			t.Errorf("replicatedJob %s: schedulerName %q, queue %q; want kai-scheduler and gpu-queue", rj.Name, pod.Spec.SchedulerName, pod.Labels[kai.LabelQueue])
		}
	}
	if diff := cmp.Diff([]string{"node", "launcher"}, names); diff != "" {
		t.Errorf("replicatedJobs (-want +got):\n%s", diff)
	}
	if len(p.Objects) != objects {
		t.Errorf("side objects %d → %d; KAI adds none", objects, len(p.Objects))
	}
	if err := plantest.CheckPlan(tj, p); err != nil {
		t.Error(err)
	}
}
