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
	gangsWaiting = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "flotilla_gangs_waiting",
		Help: "Gangs of this source that wait for their places, taking turns (docs/gangs.md).",
	})
	gangPlacedSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "flotilla_gang_placed_seconds",
		Help:    "Seconds from a gang's oldest member's creation to enough of its members standing elected on reservations they hold for all of them to be allowed to bind.",
		Buckets: prometheus.ExponentialBuckets(0.5, 2, 12),
	})
	gangYields = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "flotilla_gang_yields_total",
		Help: "Turns that gangs of this source gave up without completing: their candidates were then denied (they held no node) for a backoff.",
	})
	gangReleased = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "flotilla_gang_reservations_released_total",
		Help: "Candidates of gang members that their gang denied, so that they hold or take no node: another gang goes first, or under anyClusters the member keeps a place in another target.",
	})
)

func init() {
	metrics.Registry.MustRegister(electionSeconds, podBoundSeconds, gangsWaiting, gangPlacedSeconds, gangYields, gangReleased)
}

// sinceCreation is how long ago pod was created.
func sinceCreation(pod *corev1.Pod) float64 {
	return time.Since(pod.CreationTimestamp.Time).Seconds()
}
