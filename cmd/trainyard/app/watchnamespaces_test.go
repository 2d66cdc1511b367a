package app

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	configv1alpha1 "github.com/trainyard/trainyard/pkg/apis/config/v1alpha1"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/informers"
	"github.com/trainyard/trainyard/pkg/metrics"
	"github.com/trainyard/trainyard/pkg/stages"
	"github.com/trainyard/trainyard/pkg/stages/dra"
	"github.com/trainyard/trainyard/pkg/stages/mlpolicy"
)

// TestWatchNamespaces runs the controller's pipeline over informers confined to two
// namespaces (watchNamespaces) with a TrainJob in a watched namespace and one in
// another: the first gets its JobSet and hostfile ConfigMap, the second is never listed,
// watched or written, and every list and watch of a namespaced resource names a
// watched namespace (nothing a namespaced Role could not grant).
func TestWatchNamespaces(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watched := []string{convergenceNamespace, "team-b"}
	const other = "kube-system"

	env := newConvergenceEnv(t)
	for _, ns := range []string{convergenceNamespace, other} {
		tj := &trainer.TrainJob{
			ObjectMeta: metav1.ObjectMeta{Name: "tj", Namespace: ns, UID: uuid.NewUUID(), Generation: 1},
			Spec: trainer.TrainJobSpec{
				RuntimeRef: trainer.RuntimeRef{Name: "mpi", APIGroup: ptr.To(trainer.GroupName), Kind: ptr.To(trainer.ClusterTrainingRuntimeKind)},
				Trainer:    &trainer.Trainer{NumNodes: ptr.To(int32(2))},
			},
		}
		if err := env.trainers.Tracker().Add(tj); err != nil {
			t.Fatal(err)
		}
	}
	env.trainers.ClearActions()
	env.jobsets.ClearActions()

	inf, err := informers.New(env.trainers, env.jobsets, 0, watched)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &configv1alpha1.Configuration{WatchNamespaces: watched}
	configv1alpha1.SetObjectDefaults_Configuration(cfg)
	if env.build, err = buildOptions(cfg, "trainyard-system"); err != nil {
		t.Fatal(err)
	}
	if env.build.SecretNames, err = mlpolicy.NewSecretNames([]byte("watch-namespaces-secret-name-key")); err != nil {
		t.Fatal(err)
	}
	p, hooks, err := newPipeline(cfg, inf, pipelineDeps{
		trainers: env.trainers, jobsets: env.jobsets, applyJobSet: env.applyJobSet(1),
		recorder: &events.FakeRecorder{}, metrics: metrics.New(nil), logger: klog.FromContext(ctx),
		objects: env.objects, gangBackends: stages.GangBackends(nil),
		claims: &dra.Claims{Recorder: &events.FakeRecorder{}}, build: env.build,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer env.run(ctx, cancel, inf, p, hooks)()

	if got, err := inf.TrainJobLister.List(labels.Everything()); err != nil || len(got) != 1 || got[0].Namespace != convergenceNamespace {
		t.Fatalf("TrainJobs cached = %v, %v; want only %s/tj", got, err, convergenceNamespace)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		_, err := env.jobsets.Tracker().Get(jobsetv1alpha2.SchemeGroupVersion.WithResource("jobsets"), convergenceNamespace, "tj")
		return err == nil, nil
	}); err != nil {
		t.Fatalf("the TrainJob of watched namespace %s got no JobSet: %v", convergenceNamespace, err)
	}
	env.quiesce(ctx)

	if cm := env.objects.get("ConfigMap", convergenceNamespace, "tj-mpi-hostfile"); cm == nil {
		t.Errorf("no hostfile ConfigMap for %s/tj; side objects: %v", convergenceNamespace, env.objects.keys())
	}
	for _, key := range env.objects.keys() {
		if !slices.ContainsFunc(watched, func(ns string) bool { return hasNamespace(key, ns) }) {
			t.Errorf("side object %s written outside the watched namespaces", key)
		}
	}
	actions := append(env.trainers.Actions(), env.jobsets.Actions()...)
	for _, a := range actions {
		resource := a.GetResource().Resource
		if resource == "clustertrainingruntimes" {
			if a.GetNamespace() != "" {
				t.Errorf("%s %s in namespace %q, want cluster-wide", a.GetVerb(), resource, a.GetNamespace())
			}
			continue
		}
		if !slices.Contains(watched, a.GetNamespace()) {
			t.Errorf("%s %s in namespace %q: want only the watched namespaces %v", a.GetVerb(), resource, a.GetNamespace(), watched)
		}
	}
	for _, want := range []struct{ verb, resource, namespace string }{
		{"list", "trainjobs", "team-b"}, {"watch", "trainjobs", convergenceNamespace},
		{"list", "jobsets", convergenceNamespace}, {"list", "trainingruntimes", "team-b"},
	} {
		if !slices.ContainsFunc(actions, func(a clienttesting.Action) bool {
			return a.GetVerb() == want.verb && a.GetResource().Resource == want.resource && a.GetNamespace() == want.namespace
		}) {
			t.Errorf("no %s of %s in namespace %s: the watched namespaces are not each watched", want.verb, want.resource, want.namespace)
		}
	}
	if _, err := env.jobsets.Tracker().Get(jobsetv1alpha2.SchemeGroupVersion.WithResource("jobsets"), other, "tj"); err == nil {
		t.Errorf("the TrainJob of unwatched namespace %s got a JobSet", other)
	}
}

// keys returns the keys ("Kind/namespace/name") of the objects written.
func (f *fakeObjects) keys() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var keys []string
	for k := range f.objects {
		keys = append(keys, k)
	}
	return keys
}

// hasNamespace reports whether key ("Kind/namespace/name") is in namespace.
func hasNamespace(key, namespace string) bool {
	parts := strings.SplitN(key, "/", 3)
	return len(parts) == 3 && parts[1] == namespace
}
