package summary

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	writes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flotilla_summary_writes_total",
		Help: "Writes of ClusterSummaries by the target's agent, by operation (create, update, delete) and result (success, error).",
	}, []string{"operation", "result"})

	aggregateSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "flotilla_summary_aggregate_seconds",
		Help:    "Time to aggregate the cluster's nodes and pods into a summary.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 4, 8),
	})
)

func init() {
	metrics.Registry.MustRegister(writes, aggregateSeconds)
}
