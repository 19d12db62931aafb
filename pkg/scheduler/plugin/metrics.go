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

	candidatesReserved = metrics.NewCounterVec(&metrics.CounterOpts{
		Name:           "flotilla_candidates_reserved_total",
		Help:           "Reservations of candidates made at Reserve (each holds a node until its source allows or denies it, or Permit times out), by source cluster.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"cluster"})
	candidatesUnreserved = metrics.NewCounterVec(&metrics.CounterOpts{
		Name:           "flotilla_candidates_unreserved_total",
		Help:           "Reservations of candidates that ended without a binding, by source cluster and reason: rejected (the source denied it or the candidate was deleted), permit-timeout (no allowance within permitTimeoutSeconds), bind-failed (ended while or after waiting, before its timeout, without Flotilla rejecting it), cycle-failed (ended before Permit waited), share-expired (its gang share was let go as one, not allowed within shareTimeoutSeconds or the Permit timeout of its last member), share-yielded (its gang share was let go as one for an older share of another source that waits for room).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"cluster", "reason"})
	unreservedHeldSeconds = metrics.NewCounterVec(&metrics.CounterOpts{
		Name:           "flotilla_candidates_unreserved_held_seconds_total",
		Help:           "Seconds that reservations which ended without a binding held their nodes, from Reserve to Unreserve, by source cluster and reason (as flotilla_candidates_unreserved_total): the room candidates kept from other pods and did not use.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"cluster", "reason"})
	candidatesBound = metrics.NewCounterVec(&metrics.CounterOpts{
		Name:           "flotilla_candidates_bound_total",
		Help:           "Candidates bound to a node (PostBind), by source cluster.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"cluster"})

	registerMetrics sync.Once
)

// register adds the metrics to the scheduler's registry once, however many
// profiles build the plugin.
func register() {
	registerMetrics.Do(func() {
		legacyregistry.MustRegister(quotaUsed, quotaLimit, quotaRefusals, candidatesReserved, candidatesUnreserved, unreservedHeldSeconds, candidatesBound)
	})
}
