package bench

// What progress mode watches during its reporting window besides the pods' own view:
// each reporting TrainJob's trainerStatus changes, and the controller's progress
// counters scraped every second.

import (
	"context"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/cache"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/metrics"
)

// trainerStatuses records, per reporting TrainJob, when the benchmark's watch saw its
// status.trainerStatus.lastUpdatedTime change, and its latest value.
type trainerStatuses struct {
	mu      sync.Mutex
	changes map[string][]time.Time
	last    map[string]time.Time // zero until written
}

// watchTrainerStatus watches the TrainJobs of namespaces until ctx ends, one watch per
// namespace so that the API server sends it nothing of the admission bursts.
func watchTrainerStatus(ctx context.Context, client cache.Getter, namespaces []string) (*trainerStatuses, error) {
	s := &trainerStatuses{changes: map[string][]time.Time{}, last: map[string]time.Time{}}
	observe := func(obj any) {
		tj, ok := obj.(*trainer.TrainJob)
		if !ok {
			return
		}
		key := tj.Namespace + "/" + tj.Name
		var at time.Time
		if ts := tj.Status.TrainerStatus; ts != nil && ts.LastUpdatedTime != nil {
			at = ts.LastUpdatedTime.Time
		}
		now := time.Now()
		s.mu.Lock()
		defer s.mu.Unlock()
		prev, known := s.last[key]
		if known && !at.Equal(prev) {
			s.changes[key] = append(s.changes[key], now)
		}
		s.last[key] = at
	}
	for _, ns := range namespaces {
		_, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{
			ListerWatcher: cache.NewListWatchFromClient(client, "trainjobs", ns, fields.Everything()),
			ObjectType:    &trainer.TrainJob{},
			Handler: cache.ResourceEventHandlerFuncs{
				AddFunc:    observe,
				UpdateFunc: func(_, obj any) { observe(obj) },
			},
		})
		go ctrl.RunWithContext(ctx)
		if !cache.WaitForCacheSync(ctx.Done(), ctrl.HasSynced) {
			return nil, ctx.Err()
		}
	}
	return s, nil
}

// snapshot copies what was seen: change times and latest lastUpdatedTime per TrainJob.
func (s *trainerStatuses) snapshot() (map[string][]time.Time, map[string]time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	changes := make(map[string][]time.Time, len(s.changes))
	for k, v := range s.changes {
		changes[k] = slices.Clone(v)
	}
	last := make(map[string]time.Time, len(s.last))
	for k, v := range s.last {
		last[k] = v
	}
	return changes, last
}

// seriesPoint is one scrape of the progress counters during the window.
type seriesPoint struct {
	At               time.Time
	Reports, Writes  float64
	Coalesced        float64
	TokenReviewsMiss float64
}

// record scrapes the controller every period until ctx ends; the returned func, to be
// called after ctx ended, gives the points.
func (s *sampler) record(ctx context.Context, every time.Duration) func() []seriesPoint {
	var points []seriesPoint
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if m, err := s.ctrl.Scrape(ctx); err == nil {
				points = append(points, seriesPoint{
					At:               m.At,
					Reports:          m.Value(metrics.ProgressReportsTotal, nil),
					Writes:           m.Value(metrics.ProgressWritesTotal, nil),
					Coalesced:        m.Value(metrics.ProgressReportsCoalescedTotal, nil),
					TokenReviewsMiss: m.Value(metrics.ProgressTokenReviewsTotal, Labels{metrics.LabelCached: "false"}),
				})
			}
			if sleepCtx(ctx, every) != nil {
				return
			}
		}
	}()
	return func() []seriesPoint {
		<-done
		return points
	}
}
