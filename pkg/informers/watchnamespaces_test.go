package informers

import (
	"context"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	jobsetfake "sigs.k8s.io/jobset/client-go/clientset/versioned/fake"

	trainerfake "github.com/trainyard/trainyard/pkg/clientset/clientset/versioned/fake"
	"github.com/trainyard/trainyard/pkg/informers/namespaces"
)

// TestWatchedNamespacesOnly starts every informer the controller builds over namespaced
// resources — TrainJobs, runtimes, JobSets (New), side objects, PodGroups, DRA claims
// and templates — confined to two namespaces, and checks that each namespaced list and
// watch the clients saw names one of them, and that each is listed in both: what a
// namespaced Role in each watched namespace can grant. Only cluster-scoped resources
// are listed cluster-wide.
func TestWatchedNamespacesOnly(t *testing.T) {
	logger, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watched := namespaces.Set{"team-a", "team-b"}
	clusterScoped := []string{"clustertrainingruntimes", "deviceclasses", "resourceslices"}

	trainers, jobsets, kube := trainerfake.NewSimpleClientset(), jobsetfake.NewSimpleClientset(), kubefake.NewClientset()
	meta := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
	podGroupsGVR := schema.GroupVersionResource{Group: "scheduling.x-k8s.io", Version: "v1alpha1", Resource: "podgroups"}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{podGroupsGVR: "PodGroupList"})

	in, err := New(trainers, jobsets, 0, watched)
	if err != nil {
		t.Fatal(err)
	}
	side := &SideObjects{Client: meta, Logger: logger, Namespaces: watched}
	for _, gvr := range SideObjectResources {
		if err := side.Watch(gvr); err != nil {
			t.Fatal(err)
		}
	}
	pgs := &PodGroups{Client: dyn, Logger: logger, Namespaces: watched}
	if err := pgs.Watch(podGroupsGVR); err != nil {
		t.Fatal(err)
	}
	d := NewDRA(kube, 0, watched)

	in.Start(ctx)
	side.Start(ctx)
	pgs.Start(ctx)
	d.Start(ctx)
	defer func() { cancel(); in.Shutdown(); side.Shutdown(); pgs.Shutdown(); d.Shutdown() }()
	if !in.WaitForCacheSync(ctx) || !d.WaitForCacheSync(ctx) || !cache.WaitForCacheSync(ctx.Done(), side.HasSynced, pgs.HasSynced) {
		t.Fatal("caches did not sync")
	}

	var actions []clienttesting.Action
	for _, f := range []interface{ Actions() []clienttesting.Action }{trainers, jobsets, kube, meta, dyn} {
		actions = append(actions, f.Actions()...)
	}
	listed := map[string]map[string]bool{} // resource → namespaces listed
	for _, a := range actions {
		resource := a.GetResource().Resource
		if slices.Contains(clusterScoped, resource) {
			continue
		}
		if a.GetVerb() != "list" && a.GetVerb() != "watch" {
			t.Errorf("unexpected %s %s", a.GetVerb(), resource)
			continue
		}
		if !watched.Contains(a.GetNamespace()) || a.GetNamespace() == "" {
			t.Errorf("%s %s in namespace %q: want only the watched namespaces %v", a.GetVerb(), resource, a.GetNamespace(), watched)
		}
		if a.GetVerb() == "list" {
			if listed[resource] == nil {
				listed[resource] = map[string]bool{}
			}
			listed[resource][a.GetNamespace()] = true
		}
	}
	for _, resource := range []string{"trainjobs", "trainingruntimes", "jobsets", "configmaps", "podgroups",
		"resourceclaimtemplates", "resourceclaims"} {
		for _, ns := range watched {
			if !listed[resource][ns] {
				t.Errorf("%s not listed in watched namespace %s (listed: %v)", resource, ns, listed[resource])
			}
		}
	}
}
