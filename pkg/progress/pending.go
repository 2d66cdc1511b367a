package progress

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"unsafe"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	configv1alpha1 "github.com/trainyard/trainyard/pkg/apis/config/v1alpha1"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/metrics"
)

// Bounds of the bytes pending reports hold (statusServer.maxPendingReportBytes).
const (
	// DefaultMaxPendingBytes is the default bound on the bytes the pending reports of a
	// replica hold (ReportBytes), 32 MiB. At the default write limits a replica writes
	// 500 TrainJobs' reports per 10 s period (DefaultWriteLimits); 32 MiB holds ~790 of
	// the largest reports the server accepts (~42 KiB: 256 metrics of 64-character
	// names and values), more than the writer can take in a period, so the bound never
	// slows the writes; and ~36,000 typical ones (a percentage, an ETA and ten short
	// metrics, ~930 bytes), so it binds only when many TrainJobs send large reports.
	// Unbounded, 10,000 TrainJobs sending the largest reports would hold ~410 MiB.
	DefaultMaxPendingBytes = configv1alpha1.DefaultStatusMaxPendingReportBytes
	// MinMaxPendingBytes is the least bound allowed, 1 MiB: over 20 of the largest
	// reports, so a valid report always fits once the writes have freed the bytes.
	MinMaxPendingBytes = configv1alpha1.MinStatusMaxPendingReportBytes
	// NamespaceShareDivisor divides the bound among namespaces: the pending reports of
	// one namespace hold at most 1/4 of it (8 MiB by default: ~195 of the largest
	// reports, ~9,000 typical ones; 256 KiB, 6 of the largest, at MinMaxPendingBytes),
	// so one namespace's TrainJobs sending large reports leave the others ¾ of it.
	NamespaceShareDivisor = 4
)

// ErrPendingFull is what Coalescer.Record returns (wrapped, with the figures) when
// keeping a report would take the pending reports' bytes over the Coalescer's bound.
var ErrPendingFull = errors.New("the progress reports waiting to be written hold the most bytes allowed")

// CoalescerOption configures NewCoalescer.
type CoalescerOption func(*Coalescer)

// MaxPendingBytes bounds the bytes (ReportBytes) the pending reports hold together,
// reports being written included: Record refuses a report that would go over it. 0
// means DefaultMaxPendingBytes; a negative n, no bound (tests).
func MaxPendingBytes(n int64) CoalescerOption {
	return func(c *Coalescer) {
		switch {
		case n == 0:
			c.maxBytes = DefaultMaxPendingBytes
		case n < 0:
			c.maxBytes = 0
		default:
			c.maxBytes = n
		}
	}
}

// MaxPendingBytesPerNamespace bounds the bytes the pending reports of one namespace
// hold: Record refuses a report that would take its namespace over it. 0 means the
// bound of MaxPendingBytes over NamespaceShareDivisor (the default); negative, no
// share (tests).
func MaxPendingBytesPerNamespace(n int64) CoalescerOption {
	return func(c *Coalescer) {
		if n == 0 {
			return
		}
		c.namespaceShare = true
		c.maxNamespaceBytes = max(n, 0)
	}
}

// PendingBytesObserver is told the bytes pending reports hold; *metrics.Metrics
// implements it. A Coalescer whose Observer implements it calls SetProgressPendingReportBytes
// on every change, under its lock (it must not block or call the Coalescer), and
// SetProgressMaxPendingReportBytes once, with the bound (0: none).
type PendingBytesObserver interface {
	SetProgressPendingReportBytes(bytes int64)
	SetProgressMaxPendingReportBytes(bytes int64)
}

var _ PendingBytesObserver = (*metrics.Metrics)(nil)

// Sizes of the values a decoded report is made of, in bytes, as this platform lays them out.
const (
	trainerStatusSize = int64(unsafe.Sizeof(trainer.TrainerStatus{}))
	metricSize        = int64(unsafe.Sizeof(trainer.Metric{}))
	timeSize          = int64(unsafe.Sizeof(metav1.Time{}))
	int32Size         = int64(unsafe.Sizeof(int32(0)))
)

// ReportBytes returns the bytes of heap the decoded report ts retains while it is
// pending: the TrainerStatus, the int32s and time its fields point to, the metrics
// slice's backing array (its capacity, as the JSON decoder grew it) and every metric
// name and value, each allocation rounded up as Go's allocator rounds small objects
// (8 bytes below 16, then 16). It is what the report costs the replica, not its JSON
// size: the decoder copies each string, so the request body is not retained. The
// largest report the server accepts (256 metrics, 64-byte names and values) is
// ~42 KiB; a typical one (ten short metrics) ~930 bytes. ReportBytes(nil) is 0.
func ReportBytes(ts *trainer.TrainerStatus) int64 {
	if ts == nil {
		return 0
	}
	n := allocBytes(trainerStatusSize)
	if ts.ProgressPercentage != nil {
		n += allocBytes(int32Size)
	}
	if ts.EstimatedRemainingSeconds != nil {
		n += allocBytes(int32Size)
	}
	if ts.LastUpdatedTime != nil {
		n += allocBytes(timeSize)
	}
	n += allocBytes(int64(cap(ts.Metrics)) * metricSize)
	for i := range ts.Metrics {
		n += allocBytes(int64(len(ts.Metrics[i].Name))) + allocBytes(int64(len(ts.Metrics[i].Value)))
	}
	return n
}

// allocBytes rounds n up to the granularity of Go's small allocations: 0 for none, 8
// bytes below 16, 16 above.
func allocBytes(n int64) int64 {
	switch {
	case n <= 0:
		return 0
	case n <= 8:
		return 8
	default:
		return (n + 15) &^ 15
	}
}

// refusePendingFull answers a report Record refused with ErrPendingFull: 429 Too Many
// Requests with Retry-After, so the trainer knows its report was not kept (upstream's
// trainers count any answer but 200 as a lost report and send their next one), and
// returns metrics.ReasonPendingBytes for the rejected-reports metric.
func refusePendingFull(w http.ResponseWriter, err error) string {
	w.Header().Set("Retry-After", strconv.Itoa(RetryAfterSeconds))
	writeStatus(w, http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests,
		fmt.Sprintf("%v: retry after %d s, once earlier reports are written", err, RetryAfterSeconds), nil)
	return metrics.ReasonPendingBytes
}
