package target

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

var (
	candidatesCreated = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flotilla_candidates_created_total",
		Help: "Candidate pods this agent created in a target (a create the target answered with the new pod; one that existed already is not counted), by target.",
	}, []string{"target"})
	candidatesAllowed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flotilla_candidates_allowed_total",
		Help: "Allowances this agent wrote on candidates in a target, by target: one per reservation of an elected candidate it let bind (again when that candidate was reserved anew after its Permit wait timed out).",
	}, []string{"target"})
	candidatesDenied = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flotilla_candidates_denied_total",
		Help: "Denials this agent wrote on candidates in a target (a candidate that cannot be elected now, for placement.denyAfter), by target.",
	}, []string{"target"})
	denialsLifted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flotilla_candidate_denials_lifted_total",
		Help: "Denials this agent removed from candidates in a target, as they may be elected again, by target.",
	}, []string{"target"})
	candidatesRevoked = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flotilla_candidates_revoked_total",
		Help: "Elected candidates this agent deleted in a target because they stayed unbound for placement.electionTimeout (counted in flotilla_candidates_deleted_total too), by target.",
	}, []string{"target"})
	candidatesDeleted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flotilla_candidates_deleted_total",
		Help: "Candidate pods this agent deleted in a target (losers of an election, candidates of deleted or earlier source pods, delegates of ended pods; a delete of a pod already gone is not counted), by target.",
	}, []string{"target"})

	reachableDesc = prometheus.NewDesc("flotilla_target_reachable",
		"1 when the target's API server answered the agent's last look at it (every 10s, 3s while not Ready), else 0 (also before the first look), by target. Only the leading agent runs targets.",
		[]string{"target"}, nil)
	readyDesc = prometheus.NewDesc("flotilla_target_ready",
		"1 when the agent's last look at the target found it Ready (it answers, accepts this source's identity and its candidate cache has listed: the Target's Ready condition), else 0, by target. A target the agent does not run (its spec or Secret is refused) has no series.",
		[]string{"target"}, nil)
	tokenIssuedDesc = prometheus.NewDesc("flotilla_target_token_issued_timestamp_seconds",
		"When the ServiceAccount token the agent holds for the target was issued (its iat claim, Unix seconds), by target; the agent renews it once agent.tokenRenewAfter of its lifetime has passed. Only targets reached with a ServiceAccount token that expires.",
		[]string{"target"}, nil)
	tokenExpiryDesc = prometheus.NewDesc("flotilla_target_token_expiry_timestamp_seconds",
		"When the ServiceAccount token the agent holds for the target expires (its exp claim, Unix seconds), by target. Only targets reached with a ServiceAccount token that expires.",
		[]string{"target"}, nil)
	cachedDesc = prometheus.NewDesc("flotilla_target_candidates",
		"Candidate pods of this source the agent's cache of the target holds, by target.",
		[]string{"target"}, nil)
)

func init() {
	metrics.Registry.MustRegister(candidatesCreated, candidatesAllowed, candidatesDenied, denialsLifted, candidatesRevoked, candidatesDeleted)
}

// Collector reports the state of a Set's targets at each scrape, so a
// removed target leaves no series behind.
type Collector struct{ Set *Set }

// Describe implements prometheus.Collector.
func (c Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- reachableDesc
	ch <- readyDesc
	ch <- tokenIssuedDesc
	ch <- tokenExpiryDesc
	ch <- cachedDesc
}

// Collect implements prometheus.Collector.
func (c Collector) Collect(ch chan<- prometheus.Metric) {
	for _, t := range c.Set.All() {
		reachable, ready := 0.0, 0.0
		if h, _, ok := t.LastHealth(); ok {
			if h.Reachable {
				reachable = 1
			}
			// As Health.apply writes the Ready condition.
			if h.Reachable && h.Authorized && h.Reason == v1alpha1.ReasonConnected && t.HasSynced() {
				ready = 1
			}
		}
		ch <- prometheus.MustNewConstMetric(reachableDesc, prometheus.GaugeValue, reachable, t.Name)
		ch <- prometheus.MustNewConstMetric(readyDesc, prometheus.GaugeValue, ready, t.Name)
		// The token held now: SetToken takes a renewed one only once its
		// Secret was written, so a renewal that fails leaves it ageing.
		// A self target's is the agent's own, which client-go renews.
		if claims, err := parseToken(t.Token()); err == nil && !t.Self && claims.IssuedAt > 0 && claims.Expiry > claims.IssuedAt {
			if _, _, ok := claims.serviceAccount(); ok {
				ch <- prometheus.MustNewConstMetric(tokenIssuedDesc, prometheus.GaugeValue, float64(claims.IssuedAt), t.Name)
				ch <- prometheus.MustNewConstMetric(tokenExpiryDesc, prometheus.GaugeValue, float64(claims.Expiry), t.Name)
			}
		}
		ch <- prometheus.MustNewConstMetric(cachedDesc, prometheus.GaugeValue, float64(t.CandidateCount()), t.Name)
	}
}
