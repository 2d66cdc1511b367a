package kueue

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard/trainyard/e2e/cluster"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
)

// Kueue's topology-aware scheduling (TAS) names, from sigs.k8s.io/kueue/apis/kueue/v1beta2.
const (
	kueueRequiredTopology = "kueue.x-k8s.io/podset-required-topology"
	kueueTopologyGate     = "kueue.x-k8s.io/topology"
	kueuePodSetLabel      = "kueue.x-k8s.io/podset"
)

// testTopologyGatesReachThePods: a flavor with a Topology (one level, the node's
// hostname) and a runtime whose trainer pods require that level. Kueue assigns both
// nodes of a two-node TrainJob to one host and writes, into its runtime patch, the
// topology scheduling gate and its pod set label; Trainyard puts them into the
// JobSet, the pods are created gated, Kueue's ungater lifts the gate, and the pods
// run on the assigned node to completion.
func testTopologyGatesReachThePods(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2, 3*time.Second, func(e *env, flavor, _ map[string]any) {
		e.create(t, cluster.KueueTopologyGVR, "", e.ns, map[string]any{"spec": map[string]any{
			"levels": []any{map[string]any{"nodeLabel": corev1.LabelHostname}},
		}})
		flavor["topologyName"] = e.ns
	})
	e.createRuntime(t, "tas", 3*time.Second, map[string]string{kueueRequiredTopology: corev1.LabelHostname})
	gates := e.gatedAtCreation(t)
	tj := e.trainJob("tas", 1)
	tj.Spec.RuntimeRef.Name = "tas"
	tj.Spec.Trainer.NumNodes = ptr.To[int32](2)
	tj = e.createTrainJob(t, tj)

	e.waitCondition(t, tj.Name, trainer.TrainJobComplete, 2*time.Minute)

	ctx := context.Background()
	js, err := e.jobsets.JobsetV1alpha2().JobSets(e.ns).Get(ctx, tj.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, rj := range js.Spec.ReplicatedJobs {
		tmpl := rj.Template.Spec.Template
		if !slices.ContainsFunc(tmpl.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == kueueTopologyGate }) {
			t.Errorf("JobSet replicatedJob %s: schedulingGates %v, want %s from Kueue's patch", rj.Name, tmpl.Spec.SchedulingGates, kueueTopologyGate)
		}
		if tmpl.Labels[kueuePodSetLabel] != rj.Name {
			t.Errorf("JobSet replicatedJob %s: label %s=%q, want the pod set's name from Kueue's patch", rj.Name, kueuePodSetLabel, tmpl.Labels[kueuePodSetLabel])
		}
	}
	pods, err := e.c.Client().CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: jobsetv1alpha2.JobSetNameKey + "=" + tj.Name})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 2 {
		t.Fatalf("%d pods, want 2", len(pods.Items))
	}
	first := gates()
	for _, pod := range pods.Items {
		if !slices.Contains(first[pod.Name], kueueTopologyGate) {
			t.Errorf("pod %s first seen with gates %v, want %s", pod.Name, first[pod.Name], kueueTopologyGate)
		}
		if len(pod.Spec.SchedulingGates) > 0 {
			t.Errorf("pod %s still gated: %v", pod.Name, pod.Spec.SchedulingGates)
		}
		if pod.Spec.NodeName != e.node {
			t.Errorf("pod %s ran on %q, want %s (the one host of the required topology level)", pod.Name, pod.Spec.NodeName, e.node)
		}
	}
	wl, err := e.workload(ctx, tj)
	if err != nil || wl == nil {
		t.Fatalf("workload %v, %v", wl, err)
	}
	assignments, _, _ := unstructured.NestedSlice(wl.Object, "status", "admission", "podSetAssignments")
	for _, a := range assignments {
		if m, _ := a.(map[string]any); m["topologyAssignment"] == nil {
			t.Errorf("Workload pod set assignment %v without a topologyAssignment: not admitted through TAS", a)
		}
	}
	if len(assignments) == 0 {
		t.Errorf("Workload without podSetAssignments")
	}
}

// gatedAtCreation watches the namespace's pods until the test ends and returns a func
// reporting, per pod name, the scheduling gates it was first seen with.
func (e *env) gatedAtCreation(t *testing.T) func() map[string][]string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var (
		mu    sync.Mutex
		gates = map[string][]string{}
	)
	informer := informers.NewSharedInformerFactoryWithOptions(e.c.Client(), 0, informers.WithNamespace(e.ns)).Core().V1().Pods().Informer()
	onPod := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if _, seen := gates[p.Name]; !seen {
			names := []string{}
			for _, g := range p.Spec.SchedulingGates {
				names = append(names, g.Name)
			}
			gates[p.Name] = names
		}
	}
	_, _ = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onPod, UpdateFunc: func(_, obj any) { onPod(obj) }})
	go informer.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		t.Fatal("pod cache did not sync")
	}
	return func() map[string][]string {
		mu.Lock()
		defer mu.Unlock()
		out := make(map[string][]string, len(gates))
		for k, v := range gates {
			out[k] = slices.Clone(v)
		}
		return out
	}
}
