// Package objectkeys holds the label and annotation keys Trainyard writes on the
// objects it owns for a TrainJob (its JobSet and side objects). The stages write them
// and the informers select, route and trim by them, so they sit below both
// (docs/design/architecture.md#layers): the caches know nothing of the plan.
package objectkeys

// LabelTrainJobName is the label every side object the pipeline creates carries
// (plan.OwnedObject, plan.SideObjectLabels): the name of the TrainJob it was created for. It lets
// the controller watch its own side objects only — a label selector, so its cache holds
// neither the cluster's other ConfigMaps nor its Secrets — and route an object's
// deletion to its TrainJob. It says nothing about ownership: a side object is a
// TrainJob's only when its controller owner reference carries the TrainJob's UID
// (anyone can set a label, and an earlier TrainJob of the same name left objects with
// the same value). Objects created before the label existed lack it.
const LabelTrainJobName = "trainyard.dev/trainjob-name"

// AnnotationRuntimeSnapshot on a JobSet holds the runtime the TrainJob was first built
// from, as JSON (see plan.EncodeSnapshot). It is Trainyard's form of upstream's
// "<name>-runtime-snapshot" ConfigMap (docs/compatibility.md#runtime-snapshots,
// KEP-2599): every later build of the TrainJob reads the runtime from here, so editing
// or deleting the runtime never changes a TrainJob that already has a JobSet. The
// JobSet controller does not copy JobSet annotations to Jobs or Pods.
const AnnotationRuntimeSnapshot = "trainyard.dev/runtime-snapshot"

// AnnotationRuntimeSnapshotHash on a JobSet is plan.SnapshotHash of its
// AnnotationRuntimeSnapshot value. The informer cache drops the snapshot (as large as the
// Job templates it also drops) but keeps this digest (32 characters), so a rebuild of a
// TrainJob that has a JobSet — Kueue's runtime patch, its unsuspend, any suspend or
// resume — can tell from the cache alone whether the live runtime is the one the
// snapshot recorded (plan.EncodeSnapshot of the live runtime has this hash) and read the
// snapshot from the API only when it is not: the runtime was edited, deleted or
// re-created since the first build, or the JobSet predates the digest.
const AnnotationRuntimeSnapshotHash = "trainyard.dev/runtime-snapshot-hash"

// AnnotationTrainJobGeneration on a JobSet is the generation of the TrainJob it was
// last built from (decimal). A JobSet that carries its TrainJob's current generation
// has nothing left to rebuild — the runtime comes from the snapshot, and a TrainJob
// spec change bumps the generation — so the informers' routing sends such a TrainJob
// to the status stage only: a controller restart then builds nothing and reads no
// snapshot, whatever the number of TrainJobs. Unlike the snapshot, the informer cache
// keeps it (a few bytes).
const AnnotationTrainJobGeneration = "trainyard.dev/trainjob-generation"
