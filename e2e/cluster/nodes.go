package cluster

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

// Labels every fake node carries.
const (
	// LabelFakeNode is "true" on every node registered by this package.
	LabelFakeNode = "trainyard.dev/fake-node"
	// ResourceGPU is the extended resource of the fake GPUs.
	ResourceGPU corev1.ResourceName = "nvidia.com/gpu"
)

// NodeReadyTimeout bounds how long a new node may take to be Ready and lose
// its not-ready taint (kwok marks it Ready, kube-controller-manager's node
// lifecycle controller then removes the taint, checking every 5s).
const NodeReadyTimeout = 60 * time.Second

// NodeSpec describes a fake node.
type NodeSpec struct {
	// Name of the Node; required.
	Name string
	// Labels are added to the standard ones (kubernetes.io/hostname, os,
	// arch, LabelFakeNode).
	Labels map[string]string
	// Taints, e.g. to keep other tests' pods off a node a test owns.
	Taints []corev1.Taint
	// Shape is the node's capacity; zero fields come from the cluster's
	// Options.NodeShape.
	Shape NodeShape
}

// AddNode registers a kwok fake node plus its DRA ResourceSlice and waits up
// to NodeReadyTimeout until the node is Ready and schedulable.
func (c *Cluster) AddNode(ctx context.Context, spec NodeSpec) (*corev1.Node, error) {
	if err := c.createNode(ctx, spec); err != nil {
		return nil, err
	}
	return c.waitNodeReady(ctx, spec.Name)
}

// RemoveNode deletes the pods bound to a node, at once, then the node; its
// ResourceSlice goes with it (owner reference). Without the first step those
// pods would linger until the pod garbage collector's 40s quarantine ends,
// holding up the deletion of their namespace.
func (c *Cluster) RemoveNode(ctx context.Context, name string) error {
	pods, err := c.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + name})
	if err != nil {
		return fmt.Errorf("listing pods of node %s: %w", name, err)
	}
	for _, p := range pods.Items {
		err := c.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting pod %s/%s of node %s: %w", p.Namespace, p.Name, name, err)
		}
	}
	err = c.client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting node %s: %w", name, err)
	}
	return nil
}

// addInitialNodes registers kwok-node-0 .. kwok-node-<n-1>, then waits for all.
func (c *Cluster) addInitialNodes(ctx context.Context) error {
	names := make([]string, c.opts.Nodes)
	for i := range names {
		names[i] = fmt.Sprintf("kwok-node-%d", i)
		if err := c.createNode(ctx, NodeSpec{Name: names[i]}); err != nil {
			return err
		}
	}
	for _, name := range names {
		if _, err := c.waitNodeReady(ctx, name); err != nil {
			return err
		}
	}
	if len(names) > 0 {
		fmt.Fprintf(c.opts.Progress, "%d fake nodes ready (%d %s, %s cpu, %s memory each)\n",
			len(names), c.opts.NodeShape.GPUs, ResourceGPU, c.opts.NodeShape.CPU.String(), c.opts.NodeShape.Memory.String())
	}
	return nil
}

func (c *Cluster) createNode(ctx context.Context, spec NodeSpec) error {
	if spec.Name == "" {
		return fmt.Errorf("node spec without a name")
	}
	shape := spec.Shape.mergedWith(c.opts.NodeShape)
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: spec.Name,
			Labels: map[string]string{
				corev1.LabelHostname: spec.Name, corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64",
				"type": "kwok", LabelFakeNode: "true",
			},
			Annotations: map[string]string{kwokFakeNodeAnnotation: "fake", "node.alpha.kubernetes.io/ttl": "0"},
		},
		Spec: corev1.NodeSpec{Taints: append(c.fakeNodeTaints(), spec.Taints...)},
		// A Node may be created with its status; kwok keeps capacity and
		// allocatable and fills in conditions, addresses and nodeInfo.
		Status: corev1.NodeStatus{Capacity: shape.resources(), Allocatable: shape.resources()},
	}
	maps.Copy(node.Labels, spec.Labels)
	created, err := c.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating node %s: %w", spec.Name, err)
	}
	if shape.GPUs == 0 {
		return nil
	}
	if _, err := c.client.ResourceV1().ResourceSlices().Create(ctx, resourceSlice(created, shape.GPUs), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating ResourceSlice of node %s: %w", spec.Name, err)
	}
	return nil
}

// resources is the node capacity as a ResourceList.
func (s NodeShape) resources() corev1.ResourceList {
	rl := corev1.ResourceList{
		corev1.ResourceCPU:              s.CPU,
		corev1.ResourceMemory:           s.Memory,
		corev1.ResourcePods:             *resource.NewQuantity(int64(s.Pods), resource.DecimalSI),
		corev1.ResourceEphemeralStorage: resource.MustParse("1Ti"),
	}
	if s.GPUs > 0 {
		rl[ResourceGPU] = *resource.NewQuantity(int64(s.GPUs), resource.DecimalSI)
	}
	return rl
}

// mergedWith fills the zero fields of s from def.
func (s NodeShape) mergedWith(def NodeShape) NodeShape {
	if s.GPUs == 0 {
		s.GPUs = def.GPUs
	}
	if s.GPUs < 0 {
		s.GPUs = 0
	}
	if s.CPU.IsZero() {
		s.CPU = def.CPU
	}
	if s.Memory.IsZero() {
		s.Memory = def.Memory
	}
	if s.Pods == 0 {
		s.Pods = def.Pods
	}
	return s
}

// FakeGPUModel and FakeGPUMemory are the attribute "model" and capacity
// "memory" of every fake DRA device.
const (
	FakeGPUModel  = "trainyard-fake-gpu"
	FakeGPUMemory = "80Gi"
)

// resourceSlice publishes n devices gpu-0..gpu-<n-1> of the fake driver on
// node, in a pool named after the node. The slice is owned by the node.
func resourceSlice(node *corev1.Node, n int) *resourcev1.ResourceSlice {
	devices := make([]resourcev1.Device, n)
	for i := range devices {
		devices[i] = resourcev1.Device{
			Name: fmt.Sprintf("gpu-%d", i),
			Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				"model": {StringValue: ptr.To(FakeGPUModel)},
				"index": {IntValue: ptr.To(int64(i))},
				"uuid":  {StringValue: ptr.To(fmt.Sprintf("GPU-%s-%d", node.Name, i))},
			},
			Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{
				"memory": {Value: resource.MustParse(FakeGPUMemory)},
			},
		}
	}
	return &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: node.Name + "-" + DeviceClassName,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID,
			}},
		},
		Spec: resourcev1.ResourceSliceSpec{
			Driver:   DeviceClassName,
			NodeName: ptr.To(node.Name),
			Pool:     resourcev1.ResourcePool{Name: node.Name, Generation: 1, ResourceSliceCount: 1},
			Devices:  devices,
		},
	}
}

// waitNodeReady polls until the node is Ready and carries no not-ready or
// unreachable taint.
func (c *Cluster) waitNodeReady(ctx context.Context, name string) (*corev1.Node, error) {
	var node *corev1.Node
	var last string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, NodeReadyTimeout, true, func(ctx context.Context) (bool, error) {
		n, err := c.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		node = n
		last = nodeNotReadyReason(n)
		return last == "", nil
	})
	if err != nil {
		return nil, fmt.Errorf("fake node %s not ready within %s (%s): %w (logs: %s, %s)", name, NodeReadyTimeout, last, err,
			filepath.Join(c.opts.LogDir, Kwok+".log"), filepath.Join(c.opts.LogDir, KubeControllerManager+".log"))
	}
	return node, nil
}

// nodeNotReadyReason returns why a node cannot take pods, or "".
func nodeNotReadyReason(n *corev1.Node) string {
	ready := false
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
			ready = true
		}
	}
	if !ready {
		return "condition Ready is not True"
	}
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable {
			return "taint " + t.Key
		}
	}
	return ""
}
