package render

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/optimization/search"
	"github.com/trainyard/trainyard/pkg/optimization/trial"
)

// Source is one input file: YAML or JSON, one or more documents separated by "---".
type Source struct {
	// Name names the file in errors, e.g. "trainjob.yaml" or "<stdin>".
	Name string
	Data []byte
}

// Inputs are the objects decoded from the sources, each remembered with its origin.
type Inputs struct {
	TrainJobs               []*trainer.TrainJob
	TrainingRuntimes        []*trainer.TrainingRuntime
	ClusterTrainingRuntimes []*trainer.ClusterTrainingRuntime
	ResourceClaimTemplates  []*resourcev1.ResourceClaimTemplate
	ResourceClaims          []*resourcev1.ResourceClaim
	DeviceClasses           []*resourcev1.DeviceClass

	// origins maps "<Kind>/<namespace>/<name>" (namespace empty for cluster-scoped
	// kinds) to where the object was read.
	origins map[string]string
}

// decoder decodes the accepted kinds strictly: an unknown or duplicated field is an
// error naming it, as the API server's strict field validation would.
var decoder = func() runtime.Decoder {
	scheme := runtime.NewScheme()
	if err := errors.Join(trainer.AddToScheme(scheme), resourcev1.AddToScheme(scheme)); err != nil {
		panic(err) // static registrations, a programming error
	}
	return serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
}()

// accepted lists the kinds Load reads, for error messages.
const accepted = "TrainJob, OptimizationJob, TrainingRuntime, ClusterTrainingRuntime (trainer.kubeflow.org/v1alpha1), " +
	"ResourceClaimTemplate, ResourceClaim, DeviceClass (resource.k8s.io/v1)"

// Load decodes every document of sources. Namespaced objects without a namespace get
// namespace (like kubectl apply -n). Documents holding only comments are skipped.
//
// Errors name the file and the document (from 1) and, once decoded, the object: YAML
// syntax errors, a kind render does not read, unknown or duplicated fields (strict
// decoding), a missing metadata.name, and the same object given twice.
func Load(sources []Source, namespace string) (*Inputs, error) {
	in := &Inputs{origins: map[string]string{}}
	for _, src := range sources {
		var docs [][]byte
		reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(src.Data)))
		for {
			doc, err := reader.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("%s: reading document %d: %w", src.Name, len(docs)+1, err)
			}
			docs = append(docs, doc)
		}
		for i, doc := range docs {
			where := src.Name
			if len(docs) > 1 {
				where += " (document " + strconv.Itoa(i+1) + ")"
			}
			if err := in.add(doc, where, namespace); err != nil {
				return nil, err
			}
		}
	}
	return in, nil
}

// add decodes one document read from where.
func (in *Inputs) add(doc []byte, where, namespace string) error {
	js, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	if s := bytes.TrimSpace(js); len(s) == 0 || bytes.Equal(s, []byte("null")) {
		return nil // empty or comments only
	}
	var head struct {
		metav1.TypeMeta `json:",inline"`
		Metadata        struct{ Name string } `json:"metadata"`
	}
	if err := yaml.Unmarshal(js, &head); err != nil {
		return fmt.Errorf("%s: not a Kubernetes object: %w", where, err)
	}
	tm := head.TypeMeta
	gvk := schema.FromAPIVersionAndKind(tm.APIVersion, tm.Kind)
	if tm.Kind == "" || tm.APIVersion == "" {
		return fmt.Errorf("%s: apiVersion and kind are required; render reads %s", where, accepted)
	}
	obj, _, err := decoder.Decode(js, nil, nil)
	if runtime.IsNotRegisteredError(err) {
		return fmt.Errorf("%s: %s %s is not an input of render; render reads %s", where, tm.APIVersion, tm.Kind, accepted)
	}
	if err != nil {
		return fmt.Errorf("%s: %s %s: %w", where, gvk.Kind, head.Metadata.Name, err)
	}
	m, ok := obj.(metav1.Object)
	if !ok {
		return fmt.Errorf("%s: %s is not an object with metadata; render reads %s", where, gvk.Kind, accepted)
	}
	if m.GetName() == "" {
		return fmt.Errorf("%s: %s: metadata.name: required", where, gvk.Kind)
	}
	switch o := obj.(type) {
	case *trainer.TrainJob:
		setNamespace(o, namespace)
		in.TrainJobs = append(in.TrainJobs, o)
	case *trainer.OptimizationJob:
		setNamespace(o, namespace)
		if err := in.addTrials(o, where); err != nil {
			return err
		}
	case *trainer.TrainingRuntime:
		setNamespace(o, namespace)
		in.TrainingRuntimes = append(in.TrainingRuntimes, o)
	case *trainer.ClusterTrainingRuntime:
		o.Namespace = ""
		in.ClusterTrainingRuntimes = append(in.ClusterTrainingRuntimes, o)
	case *resourcev1.ResourceClaimTemplate:
		setNamespace(o, namespace)
		in.ResourceClaimTemplates = append(in.ResourceClaimTemplates, o)
	case *resourcev1.ResourceClaim:
		setNamespace(o, namespace)
		in.ResourceClaims = append(in.ResourceClaims, o)
	case *resourcev1.DeviceClass:
		o.Namespace = ""
		in.DeviceClasses = append(in.DeviceClasses, o)
	default:
		return fmt.Errorf("%s: %s is not an input of render; render reads %s", where, gvk.Kind, accepted)
	}
	key := originKey(gvk.Kind, m.GetNamespace(), m.GetName())
	if first, dup := in.origins[key]; dup {
		return fmt.Errorf("%s: %s %s is given twice, first in %s: pass each object once", where, gvk.Kind, objectName(m.GetNamespace(), m.GetName()), first)
	}
	in.origins[key] = where
	return nil
}

func setNamespace(o metav1.Object, namespace string) {
	if o.GetNamespace() == "" {
		o.SetNamespace(namespace)
	}
}

func originKey(kind, namespace, name string) string {
	return kind + "/" + namespace + "/" + name
}

// objectName is "<namespace>/<name>", or "<name>" for cluster-scoped objects.
func objectName(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// origin returns where the object was read, or "" when it was not an input.
func (in *Inputs) origin(kind, namespace, name string) string {
	return in.origins[originKey(kind, namespace, name)]
}

// addTrials adds the trials an OptimizationJob creates first — parallelTrials of them,
// at most numTrials (both default 1) — as TrainJobs to render, each read "from" where.
// Without random.seed the controller seeds the search with the OptimizationJob's uid,
// which an offline object lacks (search.Seed then hashes its name): set random.seed to
// see the exact parameters the cluster will run. Errors: a search
// that cannot run (search.Validate's, naming the field) or a trial that cannot be made.
func (in *Inputs) addTrials(job *trainer.OptimizationJob, where string) error {
	srch, err := search.New(&job.Spec, search.Seed(job))
	if err != nil {
		return fmt.Errorf("%s: OptimizationJob %s: %w", where, objectName(job.Namespace, job.Name), err)
	}
	n := min(int(ptr.Deref(job.Spec.ParallelTrials, 1)), int(ptr.Deref(job.Spec.NumTrials, 1)), srch.Size())
	for index := range n {
		assignment, err := srch.Assignment(index)
		if err != nil {
			return fmt.Errorf("%s: OptimizationJob %s: %w", where, objectName(job.Namespace, job.Name), err)
		}
		tj, err := trial.New(job, index, assignment)
		if err != nil {
			return fmt.Errorf("%s: OptimizationJob %s: %w", where, objectName(job.Namespace, job.Name), err)
		}
		in.TrainJobs = append(in.TrainJobs, tj)
		in.origins[originKey(trainer.TrainJobKind, tj.Namespace, tj.Name)] = fmt.Sprintf("%s (OptimizationJob %s, trial %d)", where, job.Name, index)
	}
	return nil
}
