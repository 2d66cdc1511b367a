package bench

// The writes mode (issue 17, item 3): what one JobSet write costs the API server by the
// way it is sent. docs/design/jobset-writes.md records the experiment and the choice.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	"sigs.k8s.io/yaml"

	"github.com/trainyard/trainyard/e2e/cluster"
	"github.com/trainyard/trainyard/pkg/stages/status"
	"github.com/trainyard/trainyard/pkg/trainjob"
)

// ModeWrites measures, with no controller, the API server's cost of each way Trainyard
// could write a JobSet (WriteMethods), on the JobSet the controller renders for the
// upstream torch-distributed runtime.
const ModeWrites = "writes"

// The ways of writing a JobSet the writes mode compares. Each has a first write (the
// JobSet does not exist) and a later change (the TrainJob resumed: spec.suspend false,
// a pod template environment variable changed).
const (
	// MethodApply is what the status stage does: every write a server-side apply by
	// field manager "trainyard", with force.
	MethodApply = "apply"
	// MethodCreate is plain writes: a create, then a JSON merge patch of the fields
	// Trainyard sets (labels, annotations, the whole spec: a merge patch replaces lists).
	MethodCreate = "create"
	// MethodCreateThenApply is a create first, then server-side applies.
	MethodCreateThenApply = "create+apply"
	// MethodCreateAsApply is a create whose body carries the managedFields entry an
	// apply of the same JobSet would leave (operation Apply, manager "trainyard"), then
	// server-side applies: would the API server keep that entry, a create could stand in
	// for the first apply.
	MethodCreateAsApply = "create-as-apply"
)

// WriteMethods are the methods in the order of the first round; later rounds rotate it,
// so no method always runs first (on a colder or a fuller etcd).
var WriteMethods = []string{MethodApply, MethodCreate, MethodCreateThenApply, MethodCreateAsApply}

// WritesConfig is one writes-mode run.
type WritesConfig struct {
	// RepoRoot is the Trainyard checkout (the JobSet is read from its golden files).
	RepoRoot string
	// OutDir receives result.json, report.md and the cluster's logs.
	OutDir string
	// N is the number of JobSets each method writes per round (each written twice:
	// first write and later change).
	N int
	// Rounds is how often each method runs, interleaved.
	Rounds int
	// Parallelism is the writes in flight.
	Parallelism int
	// Progress receives one line per step.
	Progress io.Writer
}

// RunWrites runs the writes mode on a cluster of its own (no JobSet controller, so
// nothing but the benchmark writes a JobSet) and writes result.json and report.md into
// cfg.OutDir.
func RunWrites(ctx context.Context, cfg WritesConfig) (*WritesResult, error) {
	if cfg.N <= 0 || cfg.Rounds <= 0 || cfg.Parallelism <= 0 {
		return nil, fmt.Errorf("n, rounds and parallelism must be positive (got %d, %d, %d)", cfg.N, cfg.Rounds, cfg.Parallelism)
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	if err := os.MkdirAll(cfg.OutDir, 0o755); err != nil {
		return nil, err
	}
	template, err := goldenJobSet(cfg.RepoRoot)
	if err != nil {
		return nil, err
	}
	say := func(format string, args ...any) { fmt.Fprintf(cfg.Progress, "bench: "+format+"\n", args...) }
	c, err := cluster.Up(ctx, clusterOptions(cfg.RepoRoot, cfg.OutDir, cfg.Progress, ModeWrites, 0))
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := c.Down(); err != nil {
			say("stopping the cluster: %v", err)
		}
	}()
	r := &runner{cfg: Config{Parallelism: cfg.Parallelism}, say: say, cluster: c}
	if err := r.connect(); err != nil {
		return nil, err
	}
	w := &writer{runner: r, template: template}
	res := &WritesResult{StartedAt: time.Now().UTC(), CPUs: runtime.NumCPU(), N: cfg.N, Rounds: cfg.Rounds, Parallelism: cfg.Parallelism}
	for round := range cfg.Rounds {
		for k := range WriteMethods {
			method := WriteMethods[(round+k)%len(WriteMethods)]
			run, err := w.run(ctx, method, round, cfg.N)
			if err != nil {
				return nil, err
			}
			say("round %d %s: first %.2fs (apiserver %.2f s/1000), change %.2fs (apiserver %.2f s/1000)", round+1, method,
				run.First.Seconds, run.First.APIServerCPUPer1000, run.Change.Seconds, run.Change.APIServerCPUPer1000)
			res.Runs = append(res.Runs, run)
		}
	}
	res.Summary = summarize(res.Runs)
	res.Ownership = map[string][]OwnershipCheck{}
	for _, method := range WriteMethods {
		if res.Ownership[method], err = w.ownership(ctx, method); err != nil {
			return nil, err
		}
	}
	data, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(cfg.OutDir, "result.json"), append(data, '\n'), 0o644); err != nil {
		return nil, err
	}
	return res, os.WriteFile(filepath.Join(cfg.OutDir, "report.md"), []byte(WritesReport(res)), 0o644)
}

// goldenJobSet is the JobSet Trainyard renders for upstream's torch-distributed example
// (pkg/render's golden file, kept current by its tests).
func goldenJobSet(root string) (*jobsetv1alpha2.JobSet, error) {
	path := filepath.Join(root, "pkg", "render", "testdata", "golden", "torch-distributed", "01-multi-node.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	js := &jobsetv1alpha2.JobSet{}
	if err := yaml.UnmarshalStrict(data, js); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", path, err)
	}
	return js, nil
}

// probeName names the JobSet MethodCreateAsApply applies to learn an apply's managedFields.
const probeName = "probe"

type writer struct {
	*runner
	template *jobsetv1alpha2.JobSet

	mu sync.Mutex
	// applyFields is, per namespace, the managedFields an apply of the template leaves
	// there (MethodCreateAsApply).
	applyFields map[string][]metav1.ManagedFieldsEntry
}

// applyFieldsIn returns the managedFields entry of Trainyard's apply of js's shape in
// its namespace: it applies a copy named "probe" once per namespace and reads it back.
// Names and namespaces are not among the managed fields, so the entry is every
// JobSet's of that shape and owner.
func (w *writer) applyFieldsIn(ctx context.Context, js *jobsetv1alpha2.JobSet) ([]metav1.ManagedFieldsEntry, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if f, ok := w.applyFields[js.Namespace]; ok {
		return f, nil
	}
	probe := js.DeepCopy()
	probe.Name = probeName
	if err := w.write(ctx, MethodApply, true, probe); err != nil {
		return nil, err
	}
	got, err := w.jobsets.JobsetV1alpha2().JobSets(js.Namespace).Get(ctx, probe.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var fields []metav1.ManagedFieldsEntry
	for _, m := range got.ManagedFields {
		if m.Manager == trainjob.FieldManager && m.Operation == metav1.ManagedFieldsOperationApply {
			m.Time = nil
			fields = append(fields, m)
		}
	}
	if w.applyFields == nil {
		w.applyFields = map[string][]metav1.ManagedFieldsEntry{}
	}
	w.applyFields[js.Namespace] = fields
	return fields, nil
}

// desired is JobSet i in ns as Trainyard wants it, owned by owner (a ConfigMap standing
// for the TrainJob, so the garbage collector keeps it), suspended or not, with the
// pod template's PET_MASTER_PORT at port.
func (w *writer) desired(ns string, i int, owner types.UID, suspend bool, port string) *jobsetv1alpha2.JobSet {
	js := w.template.DeepCopy()
	js.Name, js.Namespace = fmt.Sprintf(trainJobNameFmt, i), ns
	js.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: owner,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}}
	js.Spec.Suspend = ptr.To(suspend)
	for r := range js.Spec.ReplicatedJobs {
		for c := range js.Spec.ReplicatedJobs[r].Template.Spec.Template.Spec.Containers {
			ctr := &js.Spec.ReplicatedJobs[r].Template.Spec.Template.Spec.Containers[c]
			for e := range ctr.Env {
				if ctr.Env[e].Name == "PET_MASTER_PORT" {
					ctr.Env[e].Value = port
				}
			}
		}
	}
	return js
}

// write sends js by method: first write or later change.
func (w *writer) write(ctx context.Context, method string, first bool, js *jobsetv1alpha2.JobSet) error {
	client := w.jobsets.JobsetV1alpha2()
	if method == MethodCreateAsApply && first {
		fields, err := w.applyFieldsIn(ctx, js)
		if err != nil {
			return err
		}
		js = js.DeepCopy()
		js.ManagedFields = fields
	}
	switch {
	case method == MethodApply, (method == MethodCreateThenApply || method == MethodCreateAsApply) && !first:
		js = js.DeepCopy()
		js.APIVersion, js.Kind = jobsetv1alpha2.SchemeGroupVersion.String(), "JobSet"
		body, err := (&status.Desired{JobSet: js}).JobSetApplyBody()
		if err != nil {
			return err
		}
		return status.RESTJobSetApply(client.RESTClient())(ctx, js.Namespace, js.Name, body)
	case first:
		return client.RESTClient().Post().Namespace(js.Namespace).Resource("jobsets").
			VersionedParams(&metav1.CreateOptions{FieldManager: trainjob.FieldManager}, metav1.ParameterCodec).
			Body(js).Do(ctx).Error()
	default:
		patch, err := json.Marshal(map[string]any{
			"metadata": map[string]any{"labels": js.Labels, "annotations": js.Annotations},
			"spec":     js.Spec,
		})
		if err != nil {
			return err
		}
		return client.RESTClient().Patch(types.MergePatchType).Namespace(js.Namespace).Resource("jobsets").Name(js.Name).
			VersionedParams(&metav1.PatchOptions{FieldManager: trainjob.FieldManager}, metav1.ParameterCodec).
			Body(patch).Do(ctx).Error()
	}
}

// run writes n JobSets by method into a fresh namespace (first write, suspended), then
// changes each (resumed, a new port), measuring each phase.
func (w *writer) run(ctx context.Context, method string, round, n int) (WritesRun, error) {
	ns := fmt.Sprintf("writes-%s-%d", strings.ReplaceAll(method, "+", "-"), round)
	owner, err := w.ownerIn(ctx, ns)
	if err != nil {
		return WritesRun{}, err
	}
	run := WritesRun{Method: method, Round: round + 1}
	if run.First, err = w.phase(ctx, ns, n, func(ctx context.Context, i int) error {
		return w.write(ctx, method, true, w.desired(ns, i, owner, true, "29500"))
	}); err != nil {
		return run, err
	}
	run.Change, err = w.phase(ctx, ns, n, func(ctx context.Context, i int) error {
		return w.write(ctx, method, false, w.desired(ns, i, owner, false, "29501"))
	})
	return run, err
}

// ownerIn creates namespace ns and the ConfigMap "owner" in it, and returns its uid.
func (w *writer) ownerIn(ctx context.Context, ns string) (types.UID, error) {
	if err := w.createNamespace(ctx, ns); err != nil {
		return "", err
	}
	cm, err := w.kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return cm.UID, nil
}

// phase runs write(i) for i in [0, n) with the parallelism in flight and measures it:
// latency per request, the API server's and etcd's CPU, the watch events of ns, and
// the JobSets' stored size read back afterwards.
func (w *writer) phase(ctx context.Context, ns string, n int, write func(ctx context.Context, i int) error) (WritesPhase, error) {
	events, stop, err := w.countEvents(ctx, ns)
	if err != nil {
		return WritesPhase{}, err
	}
	defer stop()
	pids := w.cluster.ComponentPids()
	cpu := func() (api, etcd float64) {
		api, _ = ProcCPUSeconds(pids[cluster.KubeAPIServer])
		etcd, _ = ProcCPUSeconds(pids[cluster.Etcd])
		return api, etcd
	}
	latencies := make([]float64, n)
	api0, etcd0 := cpu()
	b := burst(ctx, n, w.cfg.Parallelism, func(ctx context.Context, i int) error {
		start := time.Now()
		err := write(ctx, i)
		latencies[i] = time.Since(start).Seconds()
		return err
	})
	api1, etcd1 := cpu()
	if b.Errors > 0 {
		return WritesPhase{}, fmt.Errorf("%d of %d writes in %s failed, the first: %w", b.Errors, n, ns, b.FirstError)
	}
	waitEvents(ctx, events, n)
	sort.Float64s(latencies)
	p := WritesPhase{
		Writes: n, Seconds: round3(b.Seconds()),
		LatencyP50: round4(percentile(latencies, 50)), LatencyP99: round4(percentile(latencies, 99)),
		APIServerCPUPer1000: round3((api1 - api0) * 1000 / float64(n)),
		EtcdCPUPer1000:      round3((etcd1 - etcd0) * 1000 / float64(n)),
		WatchEvents:         round3(float64(events.Load()) / float64(n)),
	}
	err = w.storedSizes(ctx, ns, &p)
	return p, err
}

// waitEvents waits until events reaches n or has stayed the same for 5 s, for at most
// a minute. The watch delivers the last events after the last write returns, seconds
// later on a saturated machine; a write that changed nothing makes none.
func waitEvents(ctx context.Context, events *atomic.Int64, n int) {
	seen, still := int64(-1), 0
	_ = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		cur := events.Load()
		if cur == seen {
			still++
		} else {
			seen, still = cur, 0
		}
		return cur >= int64(n) || still >= 20, nil
	})
}

// storedSizes reads back the JobSets of ns and sets p's mean stored size (JSON bytes)
// of a JobSet and of its managedFields, and the managers of the first. Errors: the
// list failed.
func (w *writer) storedSizes(ctx context.Context, ns string, p *WritesPhase) error {
	list, err := w.jobsets.JobsetV1alpha2().JobSets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	// The phase's JobSets only: not MethodCreateAsApply's probe, which was applied.
	var objBytes, mfBytes, count int
	for i := range list.Items {
		js := &list.Items[i]
		if js.Name == probeName {
			continue
		}
		js.APIVersion, js.Kind = jobsetv1alpha2.SchemeGroupVersion.String(), "JobSet"
		obj, err := json.Marshal(js)
		if err != nil {
			return err
		}
		mf, err := json.Marshal(js.ManagedFields)
		if err != nil {
			return err
		}
		objBytes, mfBytes = objBytes+len(obj), mfBytes+len(mf)
		if count == 0 {
			p.Managers = managers(js)
		}
		count++
	}
	if count > 0 {
		p.ObjectBytes, p.ManagedFieldsBytes = objBytes/count, mfBytes/count
	}
	return nil
}

func managers(js *jobsetv1alpha2.JobSet) []string {
	var out []string
	for _, m := range js.ManagedFields {
		out = append(out, string(m.Operation)+" by "+m.Manager)
	}
	return out
}

// countEvents watches the JobSets of ns from now and counts the events; stop ends the
// watch. The watch resumes from its last resourceVersion when the API server closes it
// (a loaded API server does, and the events in between would go uncounted).
func (w *writer) countEvents(ctx context.Context, ns string) (*atomic.Int64, func(), error) {
	list, err := w.jobsets.JobsetV1alpha2().JobSets(ns).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return nil, nil, err
	}
	lw := cache.NewListWatchFromClient(w.jobsets.JobsetV1alpha2().RESTClient(), "jobsets", ns, fields.Everything())
	watchCtx, cancel := context.WithCancel(ctx)
	watcher, err := watchtools.NewRetryWatcherWithContext(watchCtx, list.ResourceVersion, lw)
	if err != nil {
		cancel()
		return nil, nil, err
	}
	var count atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for ev := range watcher.ResultChan() {
			if ev.Type != watch.Bookmark && ev.Type != watch.Error {
				count.Add(1)
			}
		}
	})
	return &count, func() { watcher.Stop(); cancel(); wg.Wait() }, nil
}
