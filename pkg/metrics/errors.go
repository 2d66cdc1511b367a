package metrics

import (
	"context"
	"errors"
	"net"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// ErrorReason maps err to one of the Reason* label values, looking through
// wrapped errors. API status errors are classified by their reason; context
// deadlines and network timeouts count as timeouts; anything else, including
// panics and cancellations, is ReasonInternal. ErrorReason(nil) is "".
func ErrorReason(err error) string {
	var netErr net.Error
	switch {
	case err == nil:
		return ""
	case apierrors.IsConflict(err), apierrors.IsAlreadyExists(err):
		return ReasonConflict
	case apierrors.IsNotFound(err):
		return ReasonNotFound
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err), apierrors.IsRequestEntityTooLargeError(err):
		return ReasonInvalid
	case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
		return ReasonForbidden
	case apierrors.IsTooManyRequests(err):
		return ReasonThrottled
	case apierrors.IsTimeout(err), apierrors.IsServerTimeout(err),
		errors.Is(err, context.DeadlineExceeded),
		errors.As(err, &netErr) && netErr.Timeout():
		return ReasonTimeout
	default:
		return ReasonInternal
	}
}
