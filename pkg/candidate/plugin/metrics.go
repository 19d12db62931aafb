package plugin

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var (
	quotaUsed = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Name:           "flotilla_source_quota_used",
		Help:           "What an invitation's candidates hold now (reserved, in flight or bound), by resource (cpu in cores, memory in bytes, pods). Above flotilla_source_quota_limit when the quota was lowered below what already runs.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"invitation", "resource"})
	quotaLimit = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Name:           "flotilla_source_quota_limit",
		Help:           "An invitation's spec.quota, by resource (cpu in cores, memory in bytes, pods).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"invitation", "resource"})
	quotaRefusals = metrics.NewCounterVec(&metrics.CounterOpts{
		Name:           "flotilla_source_quota_refusals_total",
		Help:           "Scheduling attempts of candidates refused because they would exceed a quota of their invitations, by source cluster.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"cluster"})

	registerMetrics sync.Once
)

// register adds the metrics to the scheduler's registry once, however many
// profiles build the plugin.
func register() {
	registerMetrics.Do(func() {
		legacyregistry.MustRegister(quotaUsed, quotaLimit, quotaRefusals)
	})
}
