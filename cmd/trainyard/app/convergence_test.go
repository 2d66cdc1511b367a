package app

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/google/uuid"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	jobsetfake "sigs.k8s.io/jobset/client-go/clientset/versioned/fake"
	"sigs.k8s.io/yaml"

	configv1alpha1 "github.com/trainyard/trainyard/pkg/apis/config/v1alpha1"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerfake "github.com/trainyard/trainyard/pkg/clientset/clientset/versioned/fake"
	trainerv1alpha1 "github.com/trainyard/trainyard/pkg/clientset/clientset/versioned/typed/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/engine"
	"github.com/trainyard/trainyard/pkg/informers"
	"github.com/trainyard/trainyard/pkg/metrics"
	"github.com/trainyard/trainyard/pkg/objectkeys"
	"github.com/trainyard/trainyard/pkg/render"
	"github.com/trainyard/trainyard/pkg/stages"
	"github.com/trainyard/trainyard/pkg/stages/dra"
	"github.com/trainyard/trainyard/pkg/stages/mlpolicy"
	"github.com/trainyard/trainyard/pkg/stages/resolveruntime"
	"github.com/trainyard/trainyard/pkg/stages/status"
	"github.com/trainyard/trainyard/pkg/trainjob"
)

// The convergence test of issue 18 hunts for lost updates: a TrainJob whose JobSet does
// not end up reflecting the TrainJob's latest spec. Each round (one seed) runs the
// controller's real pipeline (newPipeline, informers.Route) over real shared informers
// on fake clientsets that behave like an API server where it matters (generation bumps
// on spec changes, status kept apart from spec, server-side apply of JobSets, slow
// writes), and fires at it, from one goroutine per TrainJob, random sequences of what
// users, Kueue and the JobSet controller do: create (suspended or not), suspend, resume,
// Kueue's two-step admission (a runtimePatches entry while suspended, then the resume in
// a second request), a runtimePatches edit, metadata edits, JobSet status changes and
// completion, delete and re-create under the same name, the deletion of a side object
// (re-created by the controller); plus runtime edits. A re-created TrainJob may meet
// its predecessor's side objects until the garbage collector takes them: never used,
// waited for. Then it
// waits for the pipeline to go quiet and checks every TrainJob against what `trainyard
// render` computes for it, and that processing every key once more writes nothing.
//
// Reproduce a failure with the seed it prints: go test ./cmd/trainyard/app -run
// TestConvergence -convergence.seed=N. `make fuzz` runs many more rounds.
var (
	convergenceSeed   = flag.Uint64("convergence.seed", 0, "TestConvergence: run only this seed")
	convergenceRounds = flag.Int("convergence.rounds", 8, "TestConvergence: number of seeds to run")
	convergenceKeys   = flag.Int("convergence.keys", 60, "TestConvergence: TrainJobs per round")
	convergenceOps    = flag.Int("convergence.ops", 10, "TestConvergence: operations per TrainJob and round")
)

func TestConvergence(t *testing.T) {
	// The fake clientsets' watchers panic when 100 events are buffered; a burst of
	// writes from many goroutines can outrun the informers for a moment.
	watch.DefaultChanSize = 1 << 16
	seeds := []uint64{*convergenceSeed}
	if *convergenceSeed == 0 {
		seeds = seeds[:0]
		base := uint64(time.Now().UnixNano())
		for i := range *convergenceRounds {
			seeds = append(seeds, base+uint64(i))
		}
	}
	ops := 0
	for _, seed := range seeds {
		ok := t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			ops += runConvergence(t, seed, *convergenceKeys, *convergenceOps)
		})
		if !ok {
			t.Logf("reproduce with: go test ./cmd/trainyard/app -run TestConvergence -convergence.seed=%d -convergence.keys=%d -convergence.ops=%d",
				seed, *convergenceKeys, *convergenceOps)
		}
	}
	t.Logf("%d rounds, %d operations on %d TrainJobs per round", len(seeds), ops, *convergenceKeys)
}

const convergenceNamespace = "team-a"

// The runtimes the TrainJobs use: torch (render_test.go's, no side objects) and MPI (a
// hostfile ConfigMap applied, an SSH Secret created once).
const (
	convergenceMPI = `apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata:
  name: mpi
spec:
  mlPolicy:
    numNodes: 1
    mpi:
      numProcPerNode: 1
      mpiImplementation: OpenMPI
      sshAuthMountPath: /home/mpiuser/.ssh
      runLauncherAsNode: false
  template:
    spec:
      replicatedJobs:
      - name: launcher
        template:
          metadata:
            labels:
              trainer.kubeflow.org/trainjob-ancestor-step: trainer
          spec:
            template:
              spec:
                containers:
                - name: node
                  image: mpi:v1
      - name: node
        template:
          spec:
            template:
              spec:
                containers:
                - name: node
                  image: mpi:v1
`
)

// convergenceEnv is one round: the fake API server, the controller's pipeline on it,
// and what the test wrote, for the oracle.
type convergenceEnv struct {
	t        *testing.T
	log      *capturedLog
	trainers *trainerfake.Clientset
	jobsets  *jobsetfake.Clientset
	objects  *fakeObjects
	pipeline *engine.Pipeline
	writes   atomic.Int64 // JobSet applies, status patches and side-object writes
	// build are the controller's plan-building options, which the oracle renders with
	// too (the default configuration: progress server on).
	build stages.Options

	mu sync.Mutex
	// runtimes holds every version of every runtime the round wrote, by name.
	runtimes map[string][]*trainer.ClusterTrainingRuntime
	// history holds every generation of every TrainJob the round wrote, by UID.
	history map[types.UID][]*trainer.TrainJob
}

// runConvergence runs one round and returns how many operations it fired.
func runConvergence(t *testing.T, seed uint64, keys, opsPerKey int) int {
	env := newConvergenceEnv(t)
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), env.log.logger()))
	defer cancel()
	rng := rand.New(rand.NewPCG(seed, 0))
	inf, err := informers.New(env.trainers, env.jobsets, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &configv1alpha1.Configuration{}
	configv1alpha1.SetObjectDefaults_Configuration(cfg)
	// Few workers keep the pipeline busy, so keys meet each other in the queues.
	for _, stage := range stages.All() {
		stage.Config(&cfg.Stages).Workers = ptr.To(int32(1 + rng.IntN(3)))
	}
	if env.build, err = buildOptions(cfg, "trainyard-system"); err != nil || env.build.ProgressURL == nil {
		t.Fatalf("buildOptions of the default configuration = %+v, %v; want the progress server's URL", env.build, err)
	}
	// An installation's key, which the oracle renders with too.
	if env.build.SecretNames, err = mlpolicy.NewSecretNames([]byte("convergence-secret-name-key-0032")); err != nil {
		t.Fatal(err)
	}
	p, hooks, err := newPipeline(cfg, inf, pipelineDeps{
		trainers:     &slowTrainers{Clientset: env.trainers, delay: env.delay(rng.Uint64()), writes: &env.writes},
		jobsets:      env.jobsets,
		applyJobSet:  env.applyJobSet(rng.Uint64()),
		recorder:     &events.FakeRecorder{},
		metrics:      metrics.New(nil),
		logger:       klog.FromContext(ctx),
		objects:      env.objects,
		gangBackends: stages.GangBackends(nil),
		claims:       &dra.Claims{Recorder: &events.FakeRecorder{}},
		build:        env.build,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer env.run(ctx, cancel, inf, p, hooks)()

	// One actor per TrainJob and one editing runtimes, each with its own generator so
	// that a seed always fires the same operations.
	var fired atomic.Int64
	var actors sync.WaitGroup
	for i := range keys {
		actorRNG := rand.New(rand.NewPCG(seed, uint64(i)+1))
		actors.Go(func() { fired.Add(int64(env.actor(ctx, actorRNG, fmt.Sprintf("tj-%03d", i), opsPerKey))) })
	}
	runtimeRNG := rand.New(rand.NewPCG(seed, 1<<32))
	actors.Go(func() { fired.Add(int64(env.editRuntimes(ctx, runtimeRNG, opsPerKey))) })
	gcDone := make(chan struct{})
	var gc sync.WaitGroup
	gc.Go(func() {
		for {
			select {
			case <-gcDone:
				return
			case <-time.After(10 * time.Millisecond):
				env.collectGarbage(ctx)
			}
		}
	})
	actors.Wait()
	close(gcDone)
	gc.Wait()

	env.quiesce(ctx)
	for env.collectGarbage(ctx) > 0 {
		env.quiesce(ctx)
	}
	env.checkConverged(ctx)
	// The consistency sweep (off here, as the pipeline must converge without it) would
	// find nothing.
	for _, obj := range inf.TrainJobs.GetStore().List() {
		if tj := obj.(*trainer.TrainJob); informers.JobSetLags(tj, inf.JobSetLister, inf.RuntimeExists) {
			t.Errorf("TrainJob %s: the consistency sweep counts it as lagging\nthe controller's log of it:\n%s", tj.Name,
				env.log.about(cache.MetaObjectToName(tj).String()))
		}
	}
	if t.Failed() {
		return int(fired.Load())
	}

	// A fixpoint: one more pass of every TrainJob through the whole pipeline and the
	// status stage finds nothing to write.
	before, logMark := env.writes.Load(), env.log.len()
	list, err := env.trainers.TrainerV1alpha1().TrainJobs(convergenceNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tj := range list.Items {
		p.EnqueueFirst(cache.MetaObjectToName(&tj))
		p.Enqueue(status.Name, cache.MetaObjectToName(&tj))
	}
	env.quiesce(ctx)
	if after := env.writes.Load(); after != before {
		t.Errorf("re-processing every converged TrainJob wrote %d times, want 0; the controller's log since, syncs left out:\n%s",
			after-before, env.log.since(logMark, "Synced"))
	}
	return int(fired.Load())
}

func newConvergenceEnv(t *testing.T) *convergenceEnv {
	env := &convergenceEnv{
		t:        t,
		log:      &capturedLog{},
		trainers: trainerfake.NewSimpleClientset(),
		jobsets:  jobsetfake.NewSimpleClientset(),
		runtimes: map[string][]*trainer.ClusterTrainingRuntime{},
		history:  map[types.UID][]*trainer.TrainJob{},
	}
	env.objects = &fakeObjects{writes: &env.writes, objects: map[string]*unstructured.Unstructured{}}
	env.emulateTrainerAPI()
	env.emulateJobSetAPI()
	for _, doc := range []string{torchRuntime, convergenceMPI} {
		rt := &trainer.ClusterTrainingRuntime{}
		if err := yaml.UnmarshalStrict([]byte(doc), rt); err != nil {
			t.Fatal(err)
		}
		rt.UID, rt.Generation = types.UID(uuid.NewString()), 1
		if _, err := env.trainers.TrainerV1alpha1().ClusterTrainingRuntimes().Create(context.Background(), rt, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		env.runtimes[rt.Name] = append(env.runtimes[rt.Name], rt.DeepCopy())
	}
	return env
}

// emulateTrainerAPI makes the fake behave as the API server does for TrainJobs: a create
// gets a UID, generation 1 and a creation time; an update of the main resource keeps the
// stored status and bumps the generation when the spec changed (status patches go to the
// status subresource and leave the spec alone); a merge patch carrying a resourceVersion
// fails with a conflict on any other.
func (e *convergenceEnv) emulateTrainerAPI() {
	tracker := e.trainers.Tracker()
	e.trainers.PrependReactor("patch", "trainjobs", func(a clienttesting.Action) (bool, runtime.Object, error) {
		p := a.(clienttesting.PatchAction)
		var precondition struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		if p.GetPatchType() != types.MergePatchType || json.Unmarshal(p.GetPatch(), &precondition) != nil || precondition.Metadata.ResourceVersion == "" {
			return false, nil, nil
		}
		obj, err := tracker.Get(p.GetResource(), p.GetNamespace(), p.GetName())
		if err != nil {
			return true, nil, err
		}
		if rv := obj.(*trainer.TrainJob).ResourceVersion; rv != precondition.Metadata.ResourceVersion {
			return true, nil, apierrors.NewConflict(p.GetResource().GroupResource(), p.GetName(), fmt.Errorf("resourceVersion %s, not %s", rv, precondition.Metadata.ResourceVersion))
		}
		return false, nil, nil
	})
	e.trainers.PrependReactor("create", "trainjobs", func(a clienttesting.Action) (bool, runtime.Object, error) {
		tj := a.(clienttesting.CreateAction).GetObject().(*trainer.TrainJob)
		tj.UID, tj.Generation = types.UID(uuid.NewString()), 1
		tj.CreationTimestamp = metav1.Now()
		return false, nil, nil
	})
	e.trainers.PrependReactor("update", "trainjobs", func(a clienttesting.Action) (bool, runtime.Object, error) {
		u := a.(clienttesting.UpdateAction)
		if u.GetSubresource() != "" {
			return false, nil, nil
		}
		tj := u.GetObject().(*trainer.TrainJob).DeepCopy()
		obj, err := tracker.Get(u.GetResource(), u.GetNamespace(), tj.Name)
		if err != nil {
			return true, nil, err
		}
		stored := obj.(*trainer.TrainJob)
		if stored.UID != tj.UID {
			return true, nil, apierrors.NewConflict(u.GetResource().GroupResource(), tj.Name, fmt.Errorf("uid changed"))
		}
		tj.Status, tj.Generation, tj.CreationTimestamp = stored.Status, stored.Generation, stored.CreationTimestamp
		if !apiequal(stored.Spec, tj.Spec) {
			tj.Generation++
		}
		if err := tracker.Update(u.GetResource(), tj, u.GetNamespace()); err != nil {
			return true, nil, err
		}
		return true, tj.DeepCopy(), nil
	})
}

// emulateJobSetAPI makes the fake behave as the API server does for JobSets: a
// server-side apply by the controller's only field manager creates the JobSet or sets
// its metadata and spec (keeping status); a status update changes only status.
func (e *convergenceEnv) emulateJobSetAPI() {
	tracker := e.jobsets.Tracker()
	e.jobsets.PrependReactor("patch", "jobsets", func(a clienttesting.Action) (bool, runtime.Object, error) {
		p := a.(clienttesting.PatchAction)
		if p.GetPatchType() != types.ApplyPatchType {
			return false, nil, nil
		}
		applied := &jobsetv1alpha2.JobSet{}
		if err := json.Unmarshal(p.GetPatch(), applied); err != nil {
			return true, nil, apierrors.NewBadRequest(err.Error())
		}
		obj, err := tracker.Get(p.GetResource(), p.GetNamespace(), p.GetName())
		if apierrors.IsNotFound(err) {
			applied.UID, applied.Generation, applied.CreationTimestamp = types.UID(uuid.NewString()), 1, metav1.Now()
			return true, applied, tracker.Create(p.GetResource(), applied, p.GetNamespace())
		}
		if err != nil {
			return true, nil, err
		}
		js := obj.(*jobsetv1alpha2.JobSet).DeepCopy()
		if !apiequal(js.Spec, applied.Spec) {
			js.Generation++
		}
		js.Labels, js.Annotations, js.OwnerReferences, js.Spec = applied.Labels, applied.Annotations, applied.OwnerReferences, applied.Spec
		return true, js, tracker.Update(p.GetResource(), js, p.GetNamespace())
	})
	e.jobsets.PrependReactor("update", "jobsets", func(a clienttesting.Action) (bool, runtime.Object, error) {
		u := a.(clienttesting.UpdateAction)
		if u.GetSubresource() != "status" {
			return false, nil, nil
		}
		update := u.GetObject().(*jobsetv1alpha2.JobSet)
		obj, err := tracker.Get(u.GetResource(), u.GetNamespace(), update.Name)
		if err != nil {
			return true, nil, err
		}
		js := obj.(*jobsetv1alpha2.JobSet).DeepCopy()
		js.Status = update.Status
		return true, js, tracker.Update(u.GetResource(), js, u.GetNamespace())
	})
}

// capturedLog keeps the controller's log of a round in memory instead of the test's
// output, where thousands of lines per round would bury the failure (and CI shows only
// the start and the end of the output); a failure prints the lines of its TrainJob.
type capturedLog struct {
	mu    sync.Mutex
	lines []string
}

// logger returns a logger writing into l at verbosity 5 (every sync), in klog's text
// format (a TrainJob appears as "namespace/name").
func (l *capturedLog) logger() logr.Logger {
	return textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(5), textlogger.Output(l)))
}

// Write takes one log entry.
func (l *capturedLog) Write(entry []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, strings.TrimSuffix(string(entry), "\n"))
	return len(entry), nil
}

// about returns the last 80 lines that mention the TrainJob key ("namespace/name"), one
// per line.
func (l *capturedLog) about(key string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	needle := `"` + key + `"`
	for _, line := range l.lines {
		if strings.Contains(line, needle) {
			out = append(out, line)
		}
	}
	return strings.Join(out[max(0, len(out)-80):], "\n")
}

// len returns how many lines l holds, a mark for since.
func (l *capturedLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lines)
}

// since returns the first 80 lines from mark on that do not contain skip, one per line.
func (l *capturedLog) since(mark int, skip string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines[mark:] {
		if !strings.Contains(line, skip) && len(out) < 80 {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

func apiequal(a, b any) bool { return cmp.Equal(a, b, cmpopts.EquateEmpty()) }

// delay returns a function that sleeps 0–5 ms, the latency of a busy API server.
func (e *convergenceEnv) delay(seed uint64) func() {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, 7))
	return func() {
		mu.Lock()
		d := time.Duration(rng.IntN(5000)) * time.Microsecond
		mu.Unlock()
		time.Sleep(d)
	}
}

// applyJobSet is the status stage's JobSet apply: slow, through the fake's apply.
func (e *convergenceEnv) applyJobSet(seed uint64) status.JobSetApplyFunc {
	delay := e.delay(seed)
	return func(ctx context.Context, namespace, name string, body []byte) error {
		delay()
		e.writes.Add(1)
		_, err := e.jobsets.JobsetV1alpha2().JobSets(namespace).Patch(ctx, name, types.ApplyPatchType, body,
			metav1.PatchOptions{FieldManager: trainjob.FieldManager, Force: ptr.To(true)})
		return err
	}
}

// slowTrainers delays and counts TrainJob status patches, the controller's only TrainJob
// writes, outside the fake's lock (reactors run under it).
type slowTrainers struct {
	*trainerfake.Clientset
	delay  func()
	writes *atomic.Int64
}

func (c *slowTrainers) TrainerV1alpha1() trainerv1alpha1.TrainerV1alpha1Interface {
	return slowTrainerV1{c.Clientset.TrainerV1alpha1(), c}
}

type slowTrainerV1 struct {
	trainerv1alpha1.TrainerV1alpha1Interface
	c *slowTrainers
}

func (v slowTrainerV1) TrainJobs(namespace string) trainerv1alpha1.TrainJobInterface {
	return slowTrainJobs{v.TrainerV1alpha1Interface.TrainJobs(namespace), v.c}
}

type slowTrainJobs struct {
	trainerv1alpha1.TrainJobInterface
	c *slowTrainers
}

func (s slowTrainJobs) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*trainer.TrainJob, error) {
	s.c.delay()
	if s.c.writes != nil {
		s.c.writes.Add(1)
	}
	return s.TrainJobInterface.Patch(ctx, name, pt, data, opts, subresources...)
}

// fakeObjects is the side-object applier: an in-memory store that is the API server
// and the side-object informers' cache at once. The garbage collector's deletions are
// routed as the informers route them (informers.SideObjectKeys to the build stage),
// except Secrets', which nothing watches.
type fakeObjects struct {
	writes  *atomic.Int64
	mu      sync.Mutex
	objects map[string]*unstructured.Unstructured
	// router receives the deletions' routes; nil routes nothing.
	router informers.Router
}

func objectKey(kind, namespace, name string) string { return kind + "/" + namespace + "/" + name }

func (f *fakeObjects) Apply(_ context.Context, obj *unstructured.Unstructured) error {
	f.writes.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.objects[objectKey(obj.GetKind(), obj.GetNamespace(), obj.GetName())] = obj.DeepCopy()
	return nil
}

func (f *fakeObjects) Create(_ context.Context, obj *unstructured.Unstructured) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := objectKey(obj.GetKind(), obj.GetNamespace(), obj.GetName())
	if _, ok := f.objects[k]; ok {
		return apierrors.NewAlreadyExists(schema.GroupResource{Resource: obj.GetKind()}, obj.GetName())
	}
	f.writes.Add(1)
	f.objects[k] = obj.DeepCopy()
	return nil
}

// Lookup answers from the store; every object in it is the controller's, labelled, so
// "cached".
func (f *fakeObjects) Lookup(_ context.Context, obj *unstructured.Unstructured, _ bool) (metav1.Object, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if o, ok := f.objects[objectKey(obj.GetKind(), obj.GetNamespace(), obj.GetName())]; ok {
		return o.DeepCopy(), true, nil
	}
	return nil, false, nil
}

func (f *fakeObjects) get(kind, namespace, name string) *unstructured.Unstructured {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.objects[objectKey(kind, namespace, name)]
}

// deleteOne deletes one of the side objects the TrainJob of uid controls, chosen with
// rng (none when it has none), routes the deletion unless it was a Secret, and reports
// whether it was one.
func (f *fakeObjects) deleteOne(rng *rand.Rand, uid types.UID) (secret bool) {
	f.mu.Lock()
	var keys []string
	for k, o := range f.objects {
		if ref := metav1.GetControllerOf(o); ref != nil && ref.UID == uid {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		f.mu.Unlock()
		return false
	}
	slices.Sort(keys)
	k := keys[rng.IntN(len(keys))]
	secret = f.objects[k].GetKind() == "Secret"
	routes := watchedRoutes(f.objects[k])
	delete(f.objects, k)
	router := f.router
	f.mu.Unlock()
	if router != nil {
		for _, key := range routes {
			router.Enqueue(resolveruntime.Name, key)
		}
	}
	return secret
}

// watchedRoutes are the routes of obj's deletion: none for a Secret (not watched).
func watchedRoutes(obj *unstructured.Unstructured) []cache.ObjectName {
	if obj.GetKind() == "Secret" {
		return nil
	}
	return informers.SideObjectKeys(obj)
}

// collect deletes the objects keep rejects, routes their deletions, and returns how
// many it deleted.
func (f *fakeObjects) collect(keep func(metav1.Object) bool) int {
	f.mu.Lock()
	n := 0
	var routes []cache.ObjectName
	for k, o := range f.objects {
		if !keep(o) {
			delete(f.objects, k)
			n++
			routes = append(routes, watchedRoutes(o)...)
		}
	}
	router := f.router
	f.mu.Unlock()
	if router != nil {
		for _, key := range routes {
			router.Enqueue(resolveruntime.Name, key)
		}
	}
	return n
}

// run routes inf's events to the pipeline p as the controller does, starts inf, waits
// for its caches and runs p until ctx is done. It returns the function that stops both:
// it calls cancel (ctx's) and waits for p and inf to end.
func (e *convergenceEnv) run(ctx context.Context, cancel context.CancelFunc, inf *informers.Informers, p *engine.Pipeline, hooks informers.Hooks) func() {
	e.t.Helper()
	e.pipeline = p
	e.objects.mu.Lock()
	e.objects.router = p
	e.objects.mu.Unlock()
	if err := inf.Route(klog.FromContext(ctx), p, informers.Routes{Build: resolveruntime.Name, Status: status.Name},
		hooks); err != nil {
		e.t.Fatal(err)
	}
	inf.Start(ctx)
	if !inf.WaitForCacheSync(ctx) {
		e.t.Fatal("caches did not sync")
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = p.Run(ctx)
	}()
	return func() { cancel(); <-stopped; inf.Shutdown() }
}

// record remembers tj as one generation of its TrainJob.
func (e *convergenceEnv) record(tj *trainer.TrainJob) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.history[tj.UID] = append(e.history[tj.UID], tj.DeepCopy())
}

// actor fires ops operations at the TrainJob name, one after another with short random
// pauses (often none), as users, Kueue and the JobSet controller would. It returns how
// many it fired.
func (e *convergenceEnv) actor(ctx context.Context, rng *rand.Rand, name string, ops int) int {
	tjs := e.trainers.TrainerV1alpha1().TrainJobs(convergenceNamespace)
	var (
		exists, finished bool
		uid              types.UID
	)
	pause := func() {
		if rng.IntN(3) > 0 {
			time.Sleep(time.Duration(rng.IntN(8000)) * time.Microsecond)
		}
	}
	// update applies mutate to the stored TrainJob with a plain update, as kubectl or
	// Kueue would.
	update := func(mutate func(*trainer.TrainJob)) {
		cur, err := tjs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			e.t.Errorf("get TrainJob %s: %v", name, err)
			return
		}
		mutate(cur)
		updated, err := tjs.Update(ctx, cur, metav1.UpdateOptions{})
		if err != nil {
			e.t.Errorf("update TrainJob %s: %v", name, err)
			return
		}
		e.record(updated)
	}
	kueuePatch := func(tj *trainer.TrainJob) {
		zone := fmt.Sprintf("zone-%d", rng.IntN(3))
		rj := tj.Spec.RuntimePatches
		tj.Spec.RuntimePatches = nil
		for _, p := range rj {
			if p.Manager != "kueue.x-k8s.io/manager" {
				tj.Spec.RuntimePatches = append(tj.Spec.RuntimePatches, p)
			}
		}
		replicatedJob := "node"
		if tj.Spec.RuntimeRef.Name == "mpi" && rng.IntN(2) == 0 {
			replicatedJob = "launcher"
		}
		tj.Spec.RuntimePatches = append(tj.Spec.RuntimePatches, trainer.RuntimePatch{
			Manager: "kueue.x-k8s.io/manager",
			TrainingRuntimeSpec: &trainer.TrainingRuntimeSpecPatch{Template: &trainer.JobSetTemplatePatch{
				Spec: &trainer.JobSetSpecPatch{ReplicatedJobs: []trainer.ReplicatedJobPatch{{
					Name: replicatedJob,
					Template: &trainer.JobTemplatePatch{Spec: &trainer.JobSpecPatch{Template: &trainer.PodTemplatePatch{
						Spec: &trainer.PodSpecPatch{NodeSelector: map[string]string{"topology.kubernetes.io/zone": zone}},
					}}},
				}}},
			}},
		})
	}

	fired := 0
	for fired < ops {
		fired++
		if !exists {
			runtimeName := "torch"
			if rng.IntN(3) == 0 {
				runtimeName = "mpi"
			}
			tj := &trainer.TrainJob{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: convergenceNamespace},
				Spec: trainer.TrainJobSpec{
					RuntimeRef: trainer.RuntimeRef{Name: runtimeName, APIGroup: ptr.To(trainer.GroupName), Kind: ptr.To(trainer.ClusterTrainingRuntimeKind)},
					Trainer:    &trainer.Trainer{NumNodes: ptr.To(int32(1 + rng.IntN(3)))},
					Suspend:    ptr.To(rng.IntN(2) == 0),
				},
			}
			created, err := tjs.Create(ctx, tj, metav1.CreateOptions{})
			if err != nil {
				e.t.Errorf("create TrainJob %s: %v", name, err)
				return fired
			}
			e.record(created)
			exists, finished, uid = true, false, created.UID
			pause()
			continue
		}
		cur, err := tjs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			e.t.Errorf("get TrainJob %s: %v", name, err)
			return fired
		}
		suspended := ptr.Deref(cur.Spec.Suspend, false)
		finished = finished || trainjob.IsFinished(cur)
		switch op := rng.IntN(100); {
		case op < 8 || finished && op < 50:
			if err := tjs.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				e.t.Errorf("delete TrainJob %s: %v", name, err)
				return fired
			}
			exists = false
		case finished:
			update(func(tj *trainer.TrainJob) { metav1.SetMetaDataLabel(&tj.ObjectMeta, "touched", fmt.Sprint(fired)) })
		case op < 25 && !suspended:
			update(func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(true) })
		case op < 45 && suspended:
			// Kueue's admission: its runtime patch while suspended, then the resume in a
			// second request, a moment later.
			update(kueuePatch)
			pause()
			update(func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(false) })
		case op < 55 && suspended:
			update(func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(false) })
		case op < 65 && suspended:
			update(kueuePatch)
		case op < 68:
			// Someone deletes one of its side objects: the controller re-creates it, a
			// Secret when the JobSet restarts (its new pods need it; nothing watches
			// Secrets).
			if e.objects.deleteOne(rng, uid) {
				e.restartJobSet(ctx, name, uid)
			}
		case op < 70:
			update(func(tj *trainer.TrainJob) { metav1.SetMetaDataLabel(&tj.ObjectMeta, "touched", fmt.Sprint(fired)) })
		case op < 72:
			// Someone deletes its JobSet (kubectl delete jobset): the controller
			// re-creates it, also when it was deleted before any sync saw it.
			e.deleteJobSet(ctx, name, uid)
		case op < 97:
			e.jobSetProgress(ctx, name, uid, false)
		default:
			e.jobSetProgress(ctx, name, uid, true)
		}
		pause()
	}
	return fired
}

// collectGarbage deletes the JobSets and side objects whose controlling TrainJob no
// longer exists, as the garbage collector does (also for dependents created after their
// owner was deleted: a sync that read a deleted TrainJob from a lagging cache may apply
// its JobSet). It returns how many objects it deleted.
func (e *convergenceEnv) collectGarbage(ctx context.Context) int {
	tjs, err := e.trainers.TrainerV1alpha1().TrainJobs(convergenceNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Errorf("list TrainJobs: %v", err)
		return 0
	}
	live := map[types.UID]bool{}
	for _, tj := range tjs.Items {
		live[tj.UID] = true
	}
	owned := func(o metav1.Object) bool {
		ref := metav1.GetControllerOf(o)
		return ref != nil && live[ref.UID]
	}
	deleted := e.objects.collect(owned)
	jss, err := e.jobsets.JobsetV1alpha2().JobSets(convergenceNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Errorf("list JobSets: %v", err)
		return deleted
	}
	for _, js := range jss.Items {
		if !owned(&js) {
			if err := e.jobsets.JobsetV1alpha2().JobSets(convergenceNamespace).Delete(ctx, js.Name,
				metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &js.UID}}); err == nil {
				deleted++
			}
		}
	}
	return deleted
}

// deleteJobSet deletes the JobSet of the TrainJob of uid, if there is one.
func (e *convergenceEnv) deleteJobSet(ctx context.Context, name string, uid types.UID) {
	jss := e.jobsets.JobsetV1alpha2().JobSets(convergenceNamespace)
	js, err := jss.Get(ctx, name, metav1.GetOptions{})
	if err != nil || !metav1.IsControlledBy(js, &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{UID: uid}}) {
		return
	}
	if err := jss.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &js.UID}}); err != nil && !apierrors.IsNotFound(err) {
		e.t.Errorf("delete JobSet %s: %v", name, err)
	}
}

// jobSetProgress plays the JobSet controller: the TrainJob's JobSet reports its jobs
// active and ready (or suspended), or, with complete, finishes.
func (e *convergenceEnv) jobSetProgress(ctx context.Context, name string, uid types.UID, complete bool) {
	jss := e.jobsets.JobsetV1alpha2().JobSets(convergenceNamespace)
	js, err := jss.Get(ctx, name, metav1.GetOptions{})
	if err != nil || !metav1.IsControlledBy(js, &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{UID: uid}}) {
		return
	}
	suspended := ptr.Deref(js.Spec.Suspend, false)
	if complete && suspended {
		return
	}
	js.Status.ReplicatedJobsStatus = nil
	for _, rj := range js.Spec.ReplicatedJobs {
		st := jobsetv1alpha2.ReplicatedJobStatus{Name: rj.Name}
		switch {
		case complete:
			st.Succeeded = rj.Replicas
		case suspended:
			st.Suspended = rj.Replicas
		default:
			st.Active, st.Ready = rj.Replicas, rj.Replicas
		}
		js.Status.ReplicatedJobsStatus = append(js.Status.ReplicatedJobsStatus, st)
	}
	if complete {
		meta.SetStatusCondition(&js.Status.Conditions, metav1.Condition{Type: string(jobsetv1alpha2.JobSetCompleted),
			Status: metav1.ConditionTrue, Reason: "AllJobsCompleted", Message: "jobset completed successfully"})
	}
	if _, err := jss.UpdateStatus(ctx, js, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
		e.t.Errorf("update JobSet %s status: %v", name, err)
	}
}

// restartJobSet counts a restart in the status of the JobSet of the TrainJob of uid, as
// the JobSet controller does when its failure policy recreates the Jobs; a finished
// JobSet is left alone. A JobSet not there yet is waited for (a Secret deleted between
// the status stage's creation of it and its JobSet apply: the JobSet's pods could not
// mount it, and their failure would restart the JobSet), as long as the TrainJob of uid
// exists, for at most a few seconds.
func (e *convergenceEnv) restartJobSet(ctx context.Context, name string, uid types.UID) {
	jss := e.jobsets.JobsetV1alpha2().JobSets(convergenceNamespace)
	owner := &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{UID: uid}}
	var js *jobsetv1alpha2.JobSet
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var err error
		js, err = jss.Get(ctx, name, metav1.GetOptions{})
		if err == nil && metav1.IsControlledBy(js, owner) {
			break
		}
		tj, tjErr := e.trainers.TrainerV1alpha1().TrainJobs(convergenceNamespace).Get(ctx, name, metav1.GetOptions{})
		if (err != nil && !apierrors.IsNotFound(err)) || tjErr != nil || tj.UID != uid || trainjob.IsFinished(tj) || time.Now().After(deadline) {
			return
		}
	}
	if meta.IsStatusConditionTrue(js.Status.Conditions, string(jobsetv1alpha2.JobSetCompleted)) {
		return
	}
	js.Status.Restarts++
	if _, err := jss.UpdateStatus(ctx, js, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		e.t.Errorf("update JobSet %s status: %v", name, err)
	}
}

// editRuntimes changes the runtimes' images now and then: TrainJobs built before keep
// the runtime their JobSet recorded, those built after use the new one.
func (e *convergenceEnv) editRuntimes(ctx context.Context, rng *rand.Rand, ops int) int {
	ctrs := e.trainers.TrainerV1alpha1().ClusterTrainingRuntimes()
	for i := range ops {
		time.Sleep(time.Duration(rng.IntN(30)) * time.Millisecond)
		name := []string{"torch", "mpi"}[rng.IntN(2)]
		rt, err := ctrs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			e.t.Errorf("get runtime %s: %v", name, err)
			return i
		}
		for j := range rt.Spec.Template.Spec.ReplicatedJobs {
			rt.Spec.Template.Spec.ReplicatedJobs[j].Template.Spec.Template.Spec.Containers[0].Image = fmt.Sprintf("%s:v%d", name, i+2)
		}
		rt.Generation++
		updated, err := ctrs.Update(ctx, rt, metav1.UpdateOptions{})
		if err != nil {
			e.t.Errorf("update runtime %s: %v", name, err)
			return i
		}
		e.mu.Lock()
		e.runtimes[name] = append(e.runtimes[name], updated.DeepCopy())
		e.mu.Unlock()
	}
	return ops
}

// quiesce waits until the pipeline has been idle (no queued key, no write) for longer
// than the status batch period.
func (e *convergenceEnv) quiesce(ctx context.Context) {
	e.t.Helper()
	const idleFor = informers.StatusBatchPeriod + 1500*time.Millisecond
	deadline := time.Now().Add(2 * time.Minute)
	last, idleSince := e.writes.Load(), time.Now()
	for time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
		busy := false
		for _, name := range stages.Names() {
			busy = busy || e.pipeline.Len(name) > 0
		}
		if w := e.writes.Load(); busy || w != last {
			last, idleSince = w, time.Now()
			continue
		}
		if time.Since(idleSince) >= idleFor {
			return
		}
	}
	e.t.Fatalf("the pipeline did not go quiet within 2 minutes")
}

// checkConverged compares every TrainJob's JobSet, side objects and status with what
// render computes for it.
func (e *convergenceEnv) checkConverged(ctx context.Context) {
	t := e.t
	list, err := e.trainers.TrainerV1alpha1().TrainJobs(convergenceNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		tj := &list.Items[i]
		if problem := e.checkTrainJob(ctx, tj); problem != "" {
			t.Errorf("TrainJob %s (generation %d, suspend %v): %s\nthe controller's log of it:\n%s", tj.Name, tj.Generation,
				ptr.Deref(tj.Spec.Suspend, false), problem, e.log.about(cache.MetaObjectToName(tj).String()))
		}
	}
}

func (e *convergenceEnv) checkTrainJob(ctx context.Context, tj *trainer.TrainJob) string {
	suspendedCond := meta.FindStatusCondition(tj.Status.Conditions, trainer.TrainJobSuspended)
	if ptr.Deref(tj.Spec.Suspend, false) != (suspendedCond != nil && suspendedCond.Status == metav1.ConditionTrue) {
		js, _ := e.jobsets.JobsetV1alpha2().JobSets(tj.Namespace).Get(ctx, tj.Name, metav1.GetOptions{})
		return fmt.Sprintf("condition Suspended is %v, want it to follow spec.suspend (conditions %v; JobSet %v)", suspendedCond, tj.Status.Conditions, js)
	}
	if trainjob.IsFinished(tj) {
		return ""
	}
	js, err := e.jobsets.JobsetV1alpha2().JobSets(tj.Namespace).Get(ctx, tj.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Sprintf("no JobSet: %v", err)
	}
	if !metav1.IsControlledBy(js, tj) {
		return "its JobSet is controlled by another TrainJob"
	}
	// What the controller must have applied: the latest generation whenever the gate
	// allows writing the JobSet (TrainJob or JobSet suspended). When both run, the
	// JobSet may stay as it was built from an earlier unsuspended generation (a running
	// JobSet is never modified, docs/compatibility.md#suspend-and-resume).
	e.mu.Lock()
	generations := append([]*trainer.TrainJob(nil), e.history[tj.UID]...)
	e.mu.Unlock()
	candidates := []*trainer.TrainJob{tj}
	if !ptr.Deref(tj.Spec.Suspend, false) && !ptr.Deref(js.Spec.Suspend, false) {
		for _, g := range generations {
			if !ptr.Deref(g.Spec.Suspend, false) {
				candidates = append(candidates, g)
			}
		}
	}
	var diffs []string
	for _, want := range candidates {
		for _, rt := range e.runtimeVersions(tj.Spec.RuntimeRef.Name) {
			diff, err := e.diffRendered(want, rt, js)
			if err != nil {
				return err.Error()
			}
			if diff == "" {
				return ""
			}
			if rt.Generation == 1 || len(diffs) == 0 {
				diffs = append(diffs, fmt.Sprintf("generation %d with runtime generation %d (-want +got):\n%s", want.Generation, rt.Generation, diff))
			}
		}
	}
	return fmt.Sprintf("JobSet (trainjob-generation %s, suspend %v) matches no rendering; first:\n%s",
		js.Annotations[objectkeys.AnnotationTrainJobGeneration], ptr.Deref(js.Spec.Suspend, false), diffs[0])
}

func (e *convergenceEnv) runtimeVersions(name string) []*trainer.ClusterTrainingRuntime {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]*trainer.ClusterTrainingRuntime(nil), e.runtimes[name]...)
}

// diffRendered renders tj with rt and returns how js and the side objects differ from
// it ("" when they match).
func (e *convergenceEnv) diffRendered(tj *trainer.TrainJob, rt *trainer.ClusterTrainingRuntime, js *jobsetv1alpha2.JobSet) (string, error) {
	results, err := render.Render(context.Background(), &render.Inputs{
		TrainJobs:               []*trainer.TrainJob{tj},
		ClusterTrainingRuntimes: []*trainer.ClusterTrainingRuntime{rt},
	}, render.Options{Build: e.build})
	if err != nil {
		return "", fmt.Errorf("render: %v", err)
	}
	want := results[0].Desired
	got := &jobsetv1alpha2.JobSet{ObjectMeta: metav1.ObjectMeta{Labels: js.Labels, Annotations: js.Annotations, OwnerReferences: js.OwnerReferences}, Spec: js.Spec}
	wantJS := &jobsetv1alpha2.JobSet{ObjectMeta: metav1.ObjectMeta{Labels: want.JobSet.Labels, Annotations: want.JobSet.Annotations, OwnerReferences: want.JobSet.OwnerReferences}, Spec: want.JobSet.Spec}
	if diff := cmp.Diff(wantJS, got, cmpopts.EquateEmpty()); diff != "" {
		return diff, nil
	}
	var missing []string
	for _, o := range want.Objects {
		stored := e.objects.get(o.GetKind(), o.GetNamespace(), o.GetName())
		if stored == nil {
			missing = append(missing, o.GetKind()+" "+o.GetName()+" missing")
		} else if diff := cmp.Diff(o.Object, stored.Object); diff != "" {
			missing = append(missing, o.GetKind()+" "+o.GetName()+" differs:\n"+diff)
		}
	}
	for _, o := range results[0].Plan.CreateOnly {
		stored := e.objects.get(o.Object.GetKind(), o.Object.GetNamespace(), o.Object.GetName())
		if stored == nil || !metav1.IsControlledBy(stored, tj) {
			missing = append(missing, o.Object.GetKind()+" "+o.Object.GetName()+" missing or not the TrainJob's")
		}
	}
	return strings.Join(missing, "\n"), nil
}
