package cluster

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// HasRealNode reports whether the cluster runs a real node (Options.RealNode).
func (c *Cluster) HasRealNode() bool { return c.realNode != nil }

// HostAddress returns the address at which pods on the real node reach this
// machine (the host's address on the pod bridge, e.g. "10.244.0.1"), or ""
// without a real node. A server of the host that pods must reach, such as the
// controller's progress server under `make run`, binds it and is published
// with ExposeHostService.
func (c *Cluster) HostAddress() string {
	if c.realNode == nil {
		return ""
	}
	return c.realNode.Gateway
}

// managedByHostService marks the EndpointSlices ExposeHostService writes, so that the
// EndpointSlice controller leaves them alone.
const managedByHostService = "trainyard-local-control-plane"

// ExposeHostService makes the Service namespace/name resolve, through the
// cluster DNS, to HostAddress: a headless Service without selector (created
// or updated) whose one EndpointSlice holds HostAddress with port. That is how
// an in-cluster name such as the progress server's
// <webhook.serviceName>.<controller namespace>.svc reaches a process that
// runs on the host. The namespace is created if missing. Errors: no real node,
// or the API server's.
func (c *Cluster) ExposeHostService(ctx context.Context, namespace, name string, port int) error {
	if c.realNode == nil {
		return fmt.Errorf("exposing %s/%s: the cluster has no real node, so no pod could reach the host", namespace, name)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if _, err := c.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", namespace, err)
	}
	portName := "https"
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Ports:     []corev1.ServicePort{{Name: portName, Port: int32(port), TargetPort: intstr.FromInt32(int32(port)), Protocol: corev1.ProtocolTCP}},
		},
	}
	if err := upsert(ctx, c.client.CoreV1().Services(namespace), svc, func(cur *corev1.Service) { cur.Spec.Ports = svc.Spec.Ports }); err != nil {
		return fmt.Errorf("service %s/%s: %w", namespace, name, err)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-host", Namespace: namespace, Labels: map[string]string{
			discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: managedByHostService,
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{c.realNode.Gateway}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: &portName, Port: ptr.To(int32(port)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	if err := upsert(ctx, c.client.DiscoveryV1().EndpointSlices(namespace), slice, func(cur *discoveryv1.EndpointSlice) {
		cur.Endpoints, cur.Ports = slice.Endpoints, slice.Ports
	}); err != nil {
		return fmt.Errorf("endpointslice of %s/%s: %w", namespace, name, err)
	}
	return nil
}

// objectClient is the part of a typed client upsert needs.
type objectClient[T any] interface {
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
}

// upsert creates obj, or when it exists applies set to the stored object and
// updates it.
func upsert[T metav1.Object](ctx context.Context, client objectClient[T], obj T, set func(T)) error {
	_, err := client.Create(ctx, obj, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	cur, err := client.Get(ctx, obj.GetName(), metav1.GetOptions{})
	if err != nil {
		return err
	}
	set(cur)
	_, err = client.Update(ctx, cur, metav1.UpdateOptions{})
	return err
}
