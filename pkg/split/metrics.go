package split

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	places = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flotilla_split_places_total",
		Help: "Pods of split workloads admitted by the webhook, by the place they were given (on-demand, spot).",
	}, []string{"type"})

	evictions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flotilla_split_evictions_total",
		Help: "Pods the rebalancer asked to evict to bring a workload back to its split, by result (evicted, refused: a PodDisruptionBudget or the API said no).",
	}, []string{"result"})
)

func init() {
	metrics.Registry.MustRegister(places, evictions)
}
