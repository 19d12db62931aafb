// Package placement owns the pure decisions of a placement policy: which
// target clusters may get a pod (Select, PreferenceScore), which failure
// domains each cluster offers (Domains), and which of the places a pod could
// go wins under hierarchical topology spread and cluster scores (Evaluate,
// Best). Every function takes plain values and returns a decision: the agent
// reads the policy, the targets' labels and summaries and the workload's
// siblings (elected or bound, across all targets) and feeds them in, so the
// rules are tested here without an API server.
//
// A place is an Option: one cluster in one domain. A cluster that spans
// several domains (a target with nodes in two zones) gives one Option per
// domain, each weighed on its own, and the sibling it becomes counts in the
// domain of the Option that won. For that count to stay true, the agent pins
// the candidate's node affinity to that domain, so the target's scheduler
// cannot put the pod in another zone of the same cluster.
//
// Spread is hierarchical: constraint i is level i, and a domain of level i is
// the tuple of the first i+1 values (a zone is counted inside its region, so
// two regions may both have a zone "a"). A level's skew is measured only
// among the domains that share its parent: zones against the other zones of
// the same region, regions against all regions.
package placement
