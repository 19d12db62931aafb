// Package scenario is a differential test of Flotilla's placement against
// plain kube-scheduler.
//
// From a seed, Generate draws a fleet (one source cluster; cluster-scoped,
// namespaced and self targets whose kwok nodes span regions and zones, some
// without a zone label, on-demand and spot, of uneven sizes) and a script
// (workloads under PlacementPolicies that spread by region, zone or both,
// with an on-demand/spot split at times; scalings, deletions and faults).
// The script runs twice at once: through Flotilla on the fleet, and on an
// oracle cluster that holds every target's nodes, with the same labels, run
// by plain kube-scheduler, the policies translated into the pods'
// topologySpreadConstraints.
//
// The checker does not use the agent's code: it reads what the clusters
// show (pods, their nodes, the nodes' labels) through pkg/protocol's names.
// At every observation of a target's pods it checks that one candidate per
// source pod is bound (test/chaos's Checker) and that a placement never
// exceeds a DoNotSchedule spread's maxSkew, counted on the real nodes the
// delegates run on; after each phase settles, that Flotilla places at least
// what kube-scheduler places, less a stated slack, and that nothing is lost
// or left behind. docs/reliability.md ("Scenarios") says what is compared and
// how to reproduce a seed.
package scenario
