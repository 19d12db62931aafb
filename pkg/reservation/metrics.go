package reservation

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
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
	placementRounds = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flotilla_placement_rounds_total",
		Help: "Rounds of the placement controller, by the state of the source pod each found: waiting (no target elected), elected (not bound yet), bound, deleting, gone, or stale (the cache did not show this agent's own election write yet: the round did nothing). Where the agent's CPU per pod goes: each round but a stale one reads the pod's targets.",
	}, []string{"pod"})
	roundsWaiting  = placementRounds.WithLabelValues("waiting")
	roundsElected  = placementRounds.WithLabelValues("elected")
	roundsBound    = placementRounds.WithLabelValues("bound")
	roundsDeleting = placementRounds.WithLabelValues("deleting")
	roundsGone     = placementRounds.WithLabelValues("gone")
	roundsStale    = placementRounds.WithLabelValues("stale")
	gangReleased   = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "flotilla_gang_reservations_released_total",
		Help: "Candidates of gang members that their gang denied, so that they hold or take no node: another gang goes first, or under anyClusters the member keeps a place in another target.",
	})
)

func init() {
	metrics.Registry.MustRegister(electionSeconds, podBoundSeconds, gangsWaiting, gangPlacedSeconds, gangYields, gangReleased, placementRounds)
}

// sinceCreation is how long ago pod was created.
func sinceCreation(pod *corev1.Pod) float64 {
	return time.Since(pod.CreationTimestamp.Time).Seconds()
}

var (
	waitingDesc = prometheus.NewDesc("flotilla_source_pods_waiting",
		"Source pods of this cluster not bound to a node yet (not being deleted), read from the agent's cache at each scrape. Only the leading agent reports it.",
		nil, nil)
	oldestWaitingDesc = prometheus.NewDesc("flotilla_source_pods_waiting_oldest_seconds",
		"Seconds since the creation of the oldest source pod not bound to a node yet (0: none waits). Only the leading agent reports it.",
		nil, nil)
)

// WaitingCollector reports the source pods that wait for a place, from
// Pods (the source pod informer's store: no API call) at each scrape, once
// Leading is closed: a standby reports nothing, so a fleet's sum counts
// each pod once.
type WaitingCollector struct {
	Pods    toolscache.Store
	Leading <-chan struct{}
}

// Describe implements prometheus.Collector.
func (c WaitingCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- waitingDesc
	ch <- oldestWaitingDesc
}

// Collect implements prometheus.Collector.
func (c WaitingCollector) Collect(ch chan<- prometheus.Metric) {
	select {
	case <-c.Leading:
	default:
		return
	}
	// The store's own pointers, read only: a list of the cache's pods
	// copies each pod's struct (5 MB at 5,000 pods, at every scrape).
	n, oldest := sourcePodsWaiting(c.Pods.List(), time.Now())
	ch <- prometheus.MustNewConstMetric(waitingDesc, prometheus.GaugeValue, float64(n))
	ch <- prometheus.MustNewConstMetric(oldestWaitingDesc, prometheus.GaugeValue, oldest)
}

// sourcePodsWaiting counts the source pods of pods not bound and not being deleted,
// and the age at now of the oldest in seconds.
func sourcePodsWaiting(pods []any, now time.Time) (n int, oldest float64) {
	for _, obj := range pods {
		pod, ok := obj.(*corev1.Pod)
		if !ok || !isSourcePod(pod) || pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil {
			continue
		}
		n++
		oldest = max(oldest, now.Sub(pod.CreationTimestamp.Time).Seconds())
	}
	return n, oldest
}
