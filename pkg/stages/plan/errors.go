package plan

import (
	"errors"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// InvalidInputError reports a TrainJob, or the runtime it references, that no JobSet
// can be built from. Retrying cannot fix it: the stage that gets one should surface it
// as a TrainJob condition and wait for the user to change the object. Any other error
// returned by the builders is a bug or a transient failure and should be retried.
type InvalidInputError struct {
	// Object is the object at fault: empty for the TrainJob itself, else the runtime as
	// "<Kind>/<name>" (e.g. "ClusterTrainingRuntime/torch-distributed").
	Object string
	// Field is the path of the offending field in Object, in the API's JSON naming with
	// list-map keys, e.g.
	// spec.runtimePatches[manager=example.io/x].trainingRuntimeSpec.template.spec.replicatedJobs[name=foo].
	Field string
	// Message says what is wrong and how to fix it.
	Message string
}

func (e *InvalidInputError) Error() string {
	if e.Object == "" {
		return e.Field + ": " + e.Message
	}
	return e.Object + " " + e.Field + ": " + e.Message
}

// UnsupportedError reports a runtime feature Trainyard does not implement yet, e.g. an
// unknown mlPolicy.mpi.mpiImplementation or a podGroupPolicy whose API the cluster does
// not serve. Like InvalidInputError it is terminal for the current inputs.
type UnsupportedError struct {
	// Object is the runtime as "<Kind>/<name>".
	Object string
	// Feature is the unsupported field and value, e.g.
	// `mlPolicy.mpi.mpiImplementation "OpenMPI5" (supported: OpenMPI, Intel, MPICH)`.
	Feature string
}

func (e *UnsupportedError) Error() string {
	msg := "not yet supported by Trainyard: " + e.Feature
	if e.Object != "" {
		msg += " (runtime " + e.Object + ")"
	}
	return msg
}

// WaitingError reports a TrainJob that is well-formed but cannot run as the cluster is
// now, e.g. it needs more devices than the cluster has: the stage records it as
// JobSetReady=False with Reason and waits for the cluster to change (an informer
// resumes it), like an InvalidInputError.
type WaitingError struct {
	// Reason is the condition reason, CamelCase, e.g. "InsufficientDevices": one of
	// trainjob.WaitingReasons, the reasons the TrainJob CRD's Reason printer column shows.
	Reason string
	// Message says what is missing and how to fix it.
	Message string
}

func (e *WaitingError) Error() string { return e.Message }

// IsInputError reports whether err (or an error it wraps) is an InvalidInputError, an
// UnsupportedError or a WaitingError: a problem that retrying cannot fix.
func IsInputError(err error) bool {
	var invalid *InvalidInputError
	var unsupported *UnsupportedError
	var waiting *WaitingError
	return errors.As(err, &invalid) || errors.As(err, &unsupported) || errors.As(err, &waiting)
}

// Ref returns the "<Kind>/<name>" form of r used in error messages.
func (r Runtime) Ref() string {
	return r.Kind + "/" + r.Name
}

// FirstInvalid returns the first of errs, the findings of a validation rule about
// object ("" for the TrainJob, else "<Kind>/<name>" of the runtime), as the
// *InvalidInputError a stage returns; nil when errs is empty. Rules shared by the
// stages and admission (package admission) return field.ErrorList: admission reports
// every error, a stage stops at the first and turns it into a condition.
func FirstInvalid(object string, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	e := errs[0]
	message := e.Detail
	if message == "" {
		message = e.ErrorBody()
	}
	return &InvalidInputError{Object: object, Field: e.Field, Message: message}
}
