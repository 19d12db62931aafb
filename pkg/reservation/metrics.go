package reservation

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	electionSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "flotilla_election_seconds",
		Help: "Seconds from a source pod's creation (its metadata.creationTimestamp, whole seconds, so up to 1s more than it took) to this agent writing the election of a target's candidate on it. A pod elected again after its election was withdrawn is observed again.",
		// From a fast election to a pod that waited minutes for room.
		Buckets: prometheus.ExponentialBuckets(0.25, 2, 12),
	})
	podBoundSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "flotilla_pod_bound_seconds",
		Help:    "Seconds from a source pod's creation (its metadata.creationTimestamp, whole seconds, so up to 1s more than it took) to this agent binding it to its elected target's virtual node, once its candidate was bound there.",
		Buckets: prometheus.ExponentialBuckets(0.25, 2, 12),
	})
)

func init() {
	metrics.Registry.MustRegister(electionSeconds, podBoundSeconds)
}

// sinceCreation is how long ago pod was created.
func sinceCreation(pod *corev1.Pod) float64 {
	return time.Since(pod.CreationTimestamp.Time).Seconds()
}
