package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/leaderelection"
)

var registerLeaderOnce sync.Once

var leaderMetric *leaderMetrics

// RegisterLeaderElectionMetrics registers leader_election_master_status and
// leader_election_slowpath_total on reg, hooks them into client-go's leader election,
// and sets the status of lease to 0 so that a follower exports 0 before it ever leads.
// It returns the metric, for a process that runs without leader election to report
// itself as leader (On). client-go accepts one provider per process: only the first
// call registers; later calls return the same metric.
func RegisterLeaderElectionMetrics(reg prometheus.Registerer, lease string) leaderelection.LeaderMetric {
	registerLeaderOnce.Do(func() {
		m := &leaderMetrics{
			status: prometheus.NewGaugeVec(prometheus.GaugeOpts{
				Name: LeaderElectionMasterStatus,
				Help: "1 while this process holds the leader election Lease, else 0, by Lease name.",
			}, []string{"name"}),
			slowpath: prometheus.NewCounterVec(prometheus.CounterOpts{
				Name: LeaderElectionSlowpathTotal,
				Help: "Lease renewals that read the Lease from the API server, by Lease name.",
			}, []string{"name"}),
		}
		reg.MustRegister(m.status, m.slowpath)
		m.status.WithLabelValues(lease).Set(0)
		m.slowpath.WithLabelValues(lease)
		leaderelection.SetProvider(m)
		leaderMetric = m
	})
	return leaderMetric
}

// leaderMetrics is client-go's leaderelection.MetricsProvider and LeaderMetric.
type leaderMetrics struct {
	status   *prometheus.GaugeVec
	slowpath *prometheus.CounterVec
}

func (m *leaderMetrics) NewLeaderMetric() leaderelection.LeaderMetric { return m }
func (m *leaderMetrics) On(name string)                               { m.status.WithLabelValues(name).Set(1) }
func (m *leaderMetrics) Off(name string)                              { m.status.WithLabelValues(name).Set(0) }
func (m *leaderMetrics) SlowpathExercised(name string)                { m.slowpath.WithLabelValues(name).Inc() }
