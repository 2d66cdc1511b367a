package bench

// The writes mode's ownership checks: the later-update path Kueue and users need, run
// once per write method.

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/trainyard/trainyard/pkg/trainjob"
)

// Managers of the ownership checks besides Trainyard's.
const (
	// kueueManager stands for Kueue: it resumes a JobSet it admits and injects its
	// flavor's node selector into the pod template, by update (jobframework).
	kueueManager = "kueue"
	// userManager stands for a user's `kubectl label`.
	userManager = "kubectl-label"
)

// ownership runs, for method, the later-update path Kueue and users need on one JobSet:
// Trainyard writes it first (suspended, with a label it will later drop); Kueue resumes
// it and adds a node selector to the pod template, and a user adds a label, each by
// update; then Trainyard's later change (a new pod template port, the label dropped,
// suspend true again as on a preemption) is sent by method. Each check says whether
// the result is what Trainyard and the other managers want.
func (w *writer) ownership(ctx context.Context, method string) ([]OwnershipCheck, error) {
	ns := "ownership-" + strings.ReplaceAll(method, "+", "-")
	owner, err := w.ownerIn(ctx, ns)
	if err != nil {
		return nil, err
	}
	const dropped = "trainyard.dev/dropped-later"
	first := w.desired(ns, 0, owner, true, "29500")
	first.Labels = map[string]string{dropped: "x", "trainyard.dev/kept": "x"}
	if err := w.write(ctx, method, true, first); err != nil {
		return nil, fmt.Errorf("ownership, %s, first write: %w", method, err)
	}
	client := w.jobsets.JobsetV1alpha2().JobSets(ns)
	// Kueue: resume, and its flavor's node selector into every pod template.
	js, err := client.Get(ctx, first.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	js.Spec.Suspend = ptr.To(false)
	for r := range js.Spec.ReplicatedJobs {
		js.Spec.ReplicatedJobs[r].Template.Spec.Template.Spec.NodeSelector = map[string]string{"flavor": "a100"}
	}
	if _, err := client.Update(ctx, js, metav1.UpdateOptions{FieldManager: kueueManager}); err != nil {
		return nil, fmt.Errorf("ownership, %s, Kueue's update: %w", method, err)
	}
	// A user's label.
	if _, err := client.Patch(ctx, first.Name, types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"vision"}}}`),
		metav1.PatchOptions{FieldManager: userManager}); err != nil {
		return nil, fmt.Errorf("ownership, %s, the user's label: %w", method, err)
	}
	// Trainyard's later change: suspended again (Kueue preempts through the TrainJob),
	// a new port, one of its labels dropped.
	later := w.desired(ns, 0, owner, true, "29501")
	later.Labels = map[string]string{"trainyard.dev/kept": "x"}
	if err := w.write(ctx, method, false, later); err != nil {
		return nil, fmt.Errorf("ownership, %s, later change: %w", method, err)
	}
	got, err := client.Get(ctx, first.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	pod := got.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec
	port := ""
	for _, e := range pod.Containers[0].Env {
		if e.Name == "PET_MASTER_PORT" {
			port = e.Value
		}
	}
	check := func(name string, holds bool, detail string, args ...any) OwnershipCheck {
		c := OwnershipCheck{Check: name, Holds: holds}
		if !holds {
			c.Detail = fmt.Sprintf(detail, args...)
		}
		return c
	}
	trainyardOwns := slices.ContainsFunc(got.ManagedFields, func(m metav1.ManagedFieldsEntry) bool {
		return m.Manager == trainjob.FieldManager && m.FieldsV1 != nil && strings.Contains(m.FieldsV1.GetRawString(), `"f:suspend"`)
	})
	return []OwnershipCheck{
		check("Trainyard's suspend lands", ptr.Deref(got.Spec.Suspend, false), "spec.suspend is %v", ptr.Deref(got.Spec.Suspend, false)),
		check("Trainyard's pod template change lands", port == "29501", "PET_MASTER_PORT is %q", port),
		check("a label Trainyard drops is removed", got.Labels[dropped] == "", "label %s still set; managers: %s", dropped, strings.Join(managers(got), ", ")),
		check("Trainyard's field manager owns spec.suspend", trainyardOwns, "managers: %s", strings.Join(managers(got), ", ")),
		check("the user's label survives", got.Labels["team"] == "vision", "labels %v", got.Labels),
		check("Kueue's node selector survives", equality.Semantic.DeepEqual(pod.NodeSelector, map[string]string{"flavor": "a100"}), "nodeSelector %v", pod.NodeSelector),
	}, nil
}
