package render_test

import (
	"context"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard/trainyard/pkg/progress"
	"github.com/trainyard/trainyard/pkg/progress/wire"
	"github.com/trainyard/trainyard/pkg/render"
	"github.com/trainyard/trainyard/pkg/stages"
	"github.com/trainyard/trainyard/pkg/stages/plan"
)

// TestProgressServerInjection renders every upstream case with the progress server on
// (stages.Options.ProgressURL) and off: both render, and they differ exactly by the
// progress env, mount and volume in the trainer replicatedJob (KEP-2779).
func TestProgressServerInjection(t *testing.T) {
	url := func(namespace, name string) string {
		return progress.BaseURL("trainyard-webhook", "trainyard-system", 10443) + wire.Path(namespace, name)
	}
	for _, c := range upstreamCases(t) {
		t.Run(c.ID(), func(t *testing.T) {
			in, err := render.Load(c.Sources, "default")
			if err != nil {
				t.Fatal(err)
			}
			off, err := render.Render(context.Background(), in, render.Options{})
			if err != nil {
				t.Fatalf("Render off: %v", err)
			}
			on, err := render.Render(context.Background(), in, render.Options{Build: stages.Options{ProgressURL: url}})
			if err != nil {
				t.Fatalf("Render on: %v", err)
			}
			tj, js := on[0].TrainJob, on[0].Desired.JobSet.DeepCopy()
			rj := plan.TrainerJob(js)
			if rj == nil {
				t.Fatal("no trainer replicatedJob")
			}
			pod := plan.PodSpec(rj)
			for i := range pod.Containers {
				c := &pod.Containers[i]
				if got := envValue(c.Env, wire.EnvServerURL); got != url(tj.Namespace, tj.Name) {
					t.Errorf("%s/%s: %s = %q", rj.Name, c.Name, wire.EnvServerURL, got)
				}
				c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool {
					return e.Name == wire.EnvServerURL || e.Name == wire.EnvCACert || e.Name == wire.EnvToken
				})
				c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == wire.MountPath })
			}
			pod.Volumes = slices.DeleteFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == wire.VolumeName })
			if diff := cmp.Diff(spec(off[0].Desired.JobSet), spec(js), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("JobSets differ by more than the progress env, mount and volume (-off +on):\n%s", diff)
			}
			if diff := cmp.Diff(off[0].Desired.Objects, on[0].Desired.Objects); diff != "" {
				t.Errorf("side objects differ (-off +on):\n%s", diff)
			}
		})
	}
}

func spec(js *jobsetv1alpha2.JobSet) jobsetv1alpha2.JobSetSpec { return js.Spec }

func envValue(env []corev1.EnvVar, name string) string {
	for _, e := range env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}
