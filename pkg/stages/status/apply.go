package status

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	jobsetscheme "sigs.k8s.io/jobset/client-go/clientset/versioned/scheme"

	"github.com/trainyard/trainyard/pkg/trainjob"
)

// JobSetApplyFunc server-side applies body, a JobSet apply request, as the JobSet
// namespace/name under trainjob.FieldManager with force. Errors are the API server's.
//
// Every JobSet write is one, the first included: a create costs the API server 10–30%
// less CPU, but leaves Trainyard's fields under an Update entry that a later apply never
// removes them from, so a field Trainyard stops sending would stay on the JobSet
// (docs/design/jobset-writes.md, measured with `make bench-writes`).
type JobSetApplyFunc func(ctx context.Context, namespace, name string, body []byte) error

// RESTJobSetApply returns a JobSetApplyFunc on client, the jobset.x-k8s.io/v1alpha2
// REST client (jobsetclient.Interface.JobsetV1alpha2().RESTClient()). Unlike the typed
// client's Patch it does not decode the response, the whole JobSet the API server
// returns, which nothing reads: decoding it was about 8% of the controller's CPU while
// admitting a burst of TrainJobs (issue 9's profile).
func RESTJobSetApply(client rest.Interface) JobSetApplyFunc {
	return func(ctx context.Context, namespace, name string, body []byte) error {
		force := true
		return client.Patch(types.ApplyPatchType).
			Namespace(namespace).Resource("jobsets").Name(name).
			VersionedParams(&metav1.PatchOptions{FieldManager: trainjob.FieldManager, Force: &force}, jobsetscheme.ParameterCodec).
			Body(body).
			Do(ctx).
			Error()
	}
}

// applyJobSet applies body with s.ApplyJobSet, or the typed client when that is nil.
func (s *Stage) applyJobSet(ctx context.Context, namespace, name string, body []byte) error {
	if s.ApplyJobSet != nil {
		return s.ApplyJobSet(ctx, namespace, name, body)
	}
	force := true
	_, err := s.JobSetAPI.JobsetV1alpha2().JobSets(namespace).Patch(ctx, name, types.ApplyPatchType, body,
		metav1.PatchOptions{FieldManager: trainjob.FieldManager, Force: &force})
	return err
}
