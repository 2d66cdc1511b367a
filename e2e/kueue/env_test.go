package kueue

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	jobsetclient "sigs.k8s.io/jobset/client-go/clientset/versioned"

	"github.com/trainyard/trainyard/e2e/cluster"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerclient "github.com/trainyard/trainyard/pkg/clientset/clientset/versioned"
)

// labelPool marks the fake node of one test's ResourceFlavor, as a label (the
// flavor's nodeLabels) and as a NoSchedule taint (the flavor's tolerations), so
// that only pods Kueue admitted to that flavor land there, and nowhere else.
const labelPool = "trainyard.dev/kueue-pool"

// queueName is the LocalQueue of every test's namespace.
const queueName = "queue"

// runtimeName is the TrainingRuntime of every test's namespace.
const runtimeName = "torch"

// env is one test's Kueue setup: a namespace with a LocalQueue and a TrainingRuntime,
// a ClusterQueue and a ResourceFlavor named after the namespace, and the flavor's node.
type env struct {
	c        *cluster.Cluster
	ns       string
	node     string // the flavor's fake node
	trainers trainerclient.Interface
	jobsets  jobsetclient.Interface
}

// newEnv sets up a namespace whose LocalQueue feeds a ClusterQueue with cpuQuota
// (cores) of one ResourceFlavor; the flavor selects a new tainted fake node by
// labelPool and tolerates its taint. Pods of the namespace's runtime runtimeName
// succeed after podRuns. changes, when given, change the ResourceFlavor's and the
// ClusterQueue's specs (e.g. a topology, a preemption policy) before they are
// created. Everything is removed when the test ends.
func newEnv(t *testing.T, cpuQuota int, podRuns time.Duration, changes ...func(e *env, flavor, clusterQueue map[string]any)) *env {
	t.Helper()
	c := cluster.Shared(t)
	e := &env{c: c, ns: cluster.NewNamespace(t, c)}
	var err error
	if e.trainers, err = trainerclient.NewForConfig(c.RESTConfig()); err != nil {
		t.Fatal(err)
	}
	if e.jobsets, err = jobsetclient.NewForConfig(c.RESTConfig()); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	e.node = "kueue-" + e.ns
	if _, err := c.AddNode(ctx, cluster.NodeSpec{
		Name:   e.node,
		Labels: map[string]string{labelPool: e.ns},
		Taints: []corev1.Taint{{Key: labelPool, Value: e.ns, Effect: corev1.TaintEffectNoSchedule}},
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.RemoveNode(context.Background(), e.node); err != nil {
			t.Errorf("removing node %s: %v", e.node, err)
		}
	})

	flavor := map[string]any{
		"nodeLabels":  map[string]any{labelPool: e.ns},
		"tolerations": []any{map[string]any{"key": labelPool, "operator": "Equal", "value": e.ns, "effect": "NoSchedule"}},
	}
	spec := cluster.KueueClusterQueueSpec(e.ns, e.ns, corev1.ResourceList{corev1.ResourceCPU: *resource.NewQuantity(int64(cpuQuota), resource.DecimalSI)})
	for _, change := range changes {
		change(e, flavor, spec)
	}
	e.create(t, cluster.KueueResourceFlavorGVR, "", e.ns, map[string]any{"spec": flavor})
	e.create(t, cluster.KueueClusterQueueGVR, "", e.ns, map[string]any{"spec": spec})
	e.create(t, cluster.KueueLocalQueueGVR, e.ns, queueName, map[string]any{"spec": map[string]any{"clusterQueue": e.ns}})
	e.waitQueueActive(t)
	e.createRuntime(t, runtimeName, podRuns, nil)
	return e
}

// createRuntime creates a one-node torch TrainingRuntime whose pods succeed after
// podRuns and carry podAnnotations.
func (e *env) createRuntime(t *testing.T, name string, podRuns time.Duration, podAnnotations map[string]string) {
	t.Helper()
	annotations := map[string]string{cluster.AnnotationCompleteDelay: podRuns.String()}
	maps.Copy(annotations, podAnnotations)
	rt := &trainer.TrainingRuntime{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: trainer.TrainingRuntimeSpec{
			MLPolicy: &trainer.MLPolicy{NumNodes: ptr.To[int32](1), MLPolicySource: trainer.MLPolicySource{Torch: &trainer.TorchMLPolicySource{}}},
			Template: trainer.JobSetTemplateSpec{Spec: jobsetv1alpha2.JobSetSpec{
				ReplicatedJobs: []jobsetv1alpha2.ReplicatedJob{{
					Name: trainer.ContainerNode,
					Template: batchv1.JobTemplateSpec{
						ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{trainer.LabelTrainJobAncestor: trainer.AncestorTrainer}},
						Spec: batchv1.JobSpec{
							BackoffLimit: ptr.To[int32](0),
							Template: corev1.PodTemplateSpec{
								ObjectMeta: metav1.ObjectMeta{Annotations: annotations},
								Spec: corev1.PodSpec{Containers: []corev1.Container{{
									Name: trainer.ContainerNode, Image: "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime",
								}}},
							},
						},
					},
				}},
			}},
		},
	}
	if _, err := e.trainers.TrainerV1alpha1().TrainingRuntimes(e.ns).Create(context.Background(), rt, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating TrainingRuntime %s: %v", name, err)
	}
}

// create creates a Kueue object with its top-level fields (spec, value, ...), in ns
// or cluster-scoped (ns ""); a cluster-scoped one is deleted when the test ends.
func (e *env) create(t *testing.T, gvr schema.GroupVersionResource, ns, name string, fields map[string]any) {
	t.Helper()
	if _, err := e.c.CreateKueueObject(context.Background(), gvr, ns, name, fields); err != nil {
		t.Fatal(err)
	}
	if ns == "" {
		t.Cleanup(func() {
			if err := e.c.Dynamic().Resource(gvr).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
				t.Errorf("deleting %s %s: %v", gvr.Resource, name, err)
			}
		})
	}
}

// waitQueueActive waits until Kueue reports the ClusterQueue and LocalQueue Active,
// i.e. it has seen the flavor and will admit.
func (e *env) waitQueueActive(t *testing.T) {
	t.Helper()
	if err := e.c.WaitKueueQueueActive(context.Background(), e.ns, e.ns, queueName, 30*time.Second); err != nil {
		t.Fatal(err)
	}
}

// trainJob returns a one-node TrainJob on the namespace's runtime, submitted to its
// LocalQueue, whose node asks cpu cores.
func (e *env) trainJob(name string, cpu int) *trainer.TrainJob {
	return &trainer.TrainJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns, Labels: map[string]string{cluster.KueueQueueNameLabel: queueName}},
		Spec: trainer.TrainJobSpec{
			RuntimeRef: trainer.RuntimeRef{Name: runtimeName, APIGroup: ptr.To(trainer.GroupName), Kind: ptr.To(trainer.TrainingRuntimeKind)},
			Trainer: &trainer.Trainer{
				NumNodes: ptr.To[int32](1),
				ResourcesPerNode: &corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: *resource.NewQuantity(int64(cpu), resource.DecimalSI)},
				},
			},
		},
	}
}

func (e *env) createTrainJob(t *testing.T, tj *trainer.TrainJob) *trainer.TrainJob {
	t.Helper()
	created, err := e.trainers.TrainerV1alpha1().TrainJobs(e.ns).Create(context.Background(), tj, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating TrainJob %s: %v", tj.Name, err)
	}
	return created
}

// waitCondition waits until the TrainJob has condition condType True.
func (e *env) waitCondition(t *testing.T, name, condType string, timeout time.Duration) {
	t.Helper()
	cluster.Eventually(t, timeout, fmt.Sprintf("TrainJob %s/%s %s", e.ns, name, condType), func(ctx context.Context) (bool, string) {
		tj, err := e.trainers.TrainerV1alpha1().TrainJobs(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return meta.IsStatusConditionTrue(tj.Status.Conditions, condType), fmt.Sprintf("suspend %v, conditions %+v", ptr.Deref(tj.Spec.Suspend, false), tj.Status.Conditions)
	})
}

// workload returns the Kueue Workload of a TrainJob (controlled by it), nil if none.
func (e *env) workload(ctx context.Context, tj *trainer.TrainJob) (*unstructured.Unstructured, error) {
	list, err := e.c.Dynamic().Resource(cluster.KueueWorkloadGVR).Namespace(e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for i := range list.Items {
		if slices.ContainsFunc(list.Items[i].GetOwnerReferences(), func(r metav1.OwnerReference) bool { return r.UID == tj.UID }) {
			return &list.Items[i], nil
		}
	}
	return nil, nil
}

// kueuePatch returns the TrainJob's runtimePatches entry of Kueue's manager, nil if none.
func kueuePatch(tj *trainer.TrainJob) *trainer.RuntimePatch {
	for i := range tj.Spec.RuntimePatches {
		if tj.Spec.RuntimePatches[i].Manager == cluster.KueueRuntimePatchManager {
			return &tj.Spec.RuntimePatches[i]
		}
	}
	return nil
}
