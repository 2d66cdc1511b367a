package admission

import (
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/cache"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	jobsetlisters "sigs.k8s.io/jobset/client-go/listers/jobset/v1alpha2"

	"github.com/trainyard/trainyard/pkg/admission/admissiontest"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerlisters "github.com/trainyard/trainyard/pkg/clientset/listers/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/informers"
	utiltesting "github.com/trainyard/trainyard/pkg/util/testing"
)

// testNow is the clock of every test.
var testNow = time.Date(2026, 5, 4, 10, 11, 12, 345, time.UTC)

// fixture is what the caches hold.
type fixture struct {
	runtimes        []runtime.Object // TrainingRuntimes and ClusterTrainingRuntimes
	jobSets         []*jobsetv1alpha2.JobSet
	priorityClasses []string
	trainJobs       []*trainer.TrainJob
}

func (f fixture) deps(t *testing.T) *Deps {
	t.Helper()
	var trs, ctrs []runtime.Object
	for _, obj := range f.runtimes {
		if _, ok := obj.(*trainer.TrainingRuntime); ok {
			trs = append(trs, obj)
		} else {
			ctrs = append(ctrs, obj)
		}
	}
	var jss []runtime.Object
	for _, js := range f.jobSets {
		jss = append(jss, js)
	}
	tjIndexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := tjIndexer.AddIndexers(cache.Indexers{informers.IndexRuntimeRef: func(obj any) ([]string, error) {
		tj := obj.(*trainer.TrainJob)
		kind := trainer.ClusterTrainingRuntimeKind
		if tj.Spec.RuntimeRef.Kind != nil {
			kind = *tj.Spec.RuntimeRef.Kind
		}
		return []string{informers.RuntimeRefKey(kind, tj.Namespace, tj.Spec.RuntimeRef.Name)}, nil
	}}); err != nil {
		t.Fatal(err)
	}
	for _, tj := range f.trainJobs {
		if err := tjIndexer.Add(tj); err != nil {
			t.Fatal(err)
		}
	}
	pcs := priorityClasses{}
	for _, name := range f.priorityClasses {
		pcs[name] = true
	}
	return &Deps{
		TrainingRuntimes:        trainerlisters.NewTrainingRuntimeLister(utiltesting.Indexer(t, trs...)),
		ClusterTrainingRuntimes: trainerlisters.NewClusterTrainingRuntimeLister(utiltesting.Indexer(t, ctrs...)),
		JobSets:                 jobsetlisters.NewJobSetLister(utiltesting.Indexer(t, jss...)),
		PriorityClasses:         pcs,
		TrainJobs:               IndexedTrainJobs{Indexer: tjIndexer},
		Now:                     func() time.Time { return testNow },
	}
}

// priorityClasses is a PriorityClassGetter holding the names set.
type priorityClasses map[string]bool

func (p priorityClasses) Get(name string) (*schedulingv1.PriorityClass, error) {
	if !p[name] {
		return nil, apierrors.NewNotFound(schedulingv1.Resource("priorityclass"), name)
	}
	return &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}}, nil
}

// ctr returns the ClusterTrainingRuntime name with spec.
func ctr(name string, spec *trainer.TrainingRuntimeSpec, labels map[string]string) *trainer.ClusterTrainingRuntime {
	obj := utiltesting.MakeClusterTrainingRuntime(name)
	obj.Spec, obj.Labels = *spec, labels
	return obj
}

// The runtime builders of the rule table.
var (
	skeleton = admissiontest.Skeleton
	rjob     = admissiontest.ReplicatedJob
)

// trainJob returns TrainJob default/test-job (uid test-job-uid) of the
// ClusterTrainingRuntime runtimeName, with t as spec.trainer.
func trainJob(runtimeName string, t *trainer.Trainer) *trainer.TrainJob {
	tj := utiltesting.MakeTrainJob("default", "test-job").Obj()
	tj.Spec.RuntimeRef.Name = runtimeName
	tj.Spec.Trainer = t
	return tj
}

// podPatch returns a runtime patch of manager that patches replicatedJob rj's pod spec.
func podPatch(manager, rj string, spec trainer.PodSpecPatch) trainer.RuntimePatch {
	return trainer.RuntimePatch{Manager: manager, TrainingRuntimeSpec: &trainer.TrainingRuntimeSpecPatch{
		Template: &trainer.JobSetTemplatePatch{Spec: &trainer.JobSetSpecPatch{ReplicatedJobs: []trainer.ReplicatedJobPatch{{
			Name: rj, Template: &trainer.JobTemplatePatch{Spec: &trainer.JobSpecPatch{Template: &trainer.PodTemplatePatch{Spec: &spec}}},
		}}}},
	}}
}

func env(name, value string) corev1.EnvVar { return corev1.EnvVar{Name: name, Value: value} }

// fields returns "<type>: <field>" of each error, sorted, the shape the tables assert.
func fields(errs field.ErrorList) []string {
	var out []string
	for _, e := range errs {
		out = append(out, string(e.Type)+": "+e.Field)
	}
	sort.Strings(out)
	return out
}
