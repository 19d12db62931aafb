package placementpolicy

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/placement"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/sourcespec"
	"github.com/flotilla-dev/flotilla/pkg/workload"
)

// Counts reports whether a spread counts s among the siblings of pod: a
// source pod of the same workload (the webhook admitted it: it carries
// what its candidates run, and no scheduler of the source serves it), not
// pod itself, neither being deleted nor ended (Succeeded, Failed). A pod
// the source placed and that since ended holds no node. Whether s holds a
// place (bound or elected) is the caller's to tell (Sibling.Target).
func Counts(pod, s *corev1.Pod) bool {
	if s.UID == pod.UID || s.Spec.SchedulerName != protocol.SourceSchedulerName || !sourcespec.Saved(s) ||
		s.DeletionTimestamp != nil || s.Status.Phase == corev1.PodSucceeded || s.Status.Phase == corev1.PodFailed {
		return false
	}
	key, ok := workload.Of(pod)
	if !ok {
		return false
	}
	sk, ok := workload.Of(s)
	return ok && sk == key
}

// ReportedDomain is the domain of the node that holds or runs a source
// pod's elected reservation, as its target reported it at the election
// (raw is the pod's ElectedDomainAnnotation, or the election the agent
// just wrote): nil when none is recorded or it cannot be read.
func ReportedDomain(raw string) map[string]string {
	d, err := protocol.ParseDomain(raw)
	if err != nil {
		return nil
	}
	return d
}

// Place is one target as a spread counts the pods in it, at the policy's
// keys: the domains it spans, and how the domain of a node it reported is
// read.
type Place struct {
	keys []string
	// own are the labels of the Target object.
	own map[string]string
	// reports are the keys the target reports per node; nil when it
	// publishes no summary (a self target): then every key its scheduler
	// left out is one the node lacks.
	reports map[string]bool
	// common are the labels common to the target's nodes (its virtual
	// node's).
	common  map[string]string
	domains []placement.Domain
}

// PlaceOf is the place of a target at keys: cl as placement sees it
// (ClusterOf), own the labels of its Target object, s its ClusterSummary
// (nil when it publishes none).
func PlaceOf(cl placement.Cluster, own map[string]string, s *v1alpha1.ClusterSummaryStatus, keys []string) Place {
	p := Place{keys: keys, own: own, common: cl.Labels, domains: placement.Domains(cl, keys)}
	if s != nil {
		p.reports = make(map[string]bool, len(s.Topology))
		for _, ts := range s.Topology {
			p.reports[ts.Key] = true
		}
	}
	return p
}

// NodeDomain is the domain of a node of the target whose labels the target
// reported (a reservation's, or a sibling's at its election). A key the
// Target's own labels set takes their value, as the virtual node's labels
// do; a key the node's report has, or one the target reports per node, is
// the node's ("", no domain, when the node lacks it); any other key is the
// value common to the target's nodes, "" when they differ.
func (p Place) NodeDomain(reported map[string]string) placement.Domain {
	d := make(placement.Domain, len(p.keys))
	for i, k := range p.keys {
		if v, ok := p.own[k]; ok {
			d[i] = v
			continue
		}
		if v, ok := reported[k]; ok || p.reports == nil || p.reports[k] {
			d[i] = v
			continue
		}
		d[i] = p.common[k]
	}
	return d
}

// Domain is the domain a pod counts in there: its node's, when its target
// reported the node (NodeDomain); else the target's only domain; else the
// one its candidate there was pinned to (pinned, nil when not known). ok is
// false when none of these tells.
func (p Place) Domain(reported map[string]string, pinned []string) (placement.Domain, bool) {
	switch {
	case reported != nil:
		return p.NodeDomain(reported), true
	case len(p.domains) == 1:
		return p.domains[0], true
	case len(pinned) == len(p.keys):
		return placement.Domain(pinned), true
	}
	return nil, false
}

// Sibling is where one sibling a spread counts (Counts) holds a place.
type Sibling struct {
	// Target is the target whose virtual node runs it, or where it is
	// elected when it is not bound yet.
	Target string
	// Reported is its node's domain as its target reported it at the
	// election (ReportedDomain); nil when none is recorded.
	Reported map[string]string
	// Pinned is the domain its candidate in Target was pinned to; nil when
	// not known.
	Pinned []string
}

// Tally is the domains the siblings count in, in their order, and how many
// of them are in a target whose domain for them cannot be told (it spans
// several, its node was not reported and no pin is known): those count
// nowhere. places are the targets a sibling may count in, by name; one in
// another target counts nowhere either.
func Tally(siblings []Sibling, places map[string]Place) (placed []placement.Domain, unknown int) {
	for _, s := range siblings {
		p, ok := places[s.Target]
		if !ok {
			continue
		}
		if d, ok := p.Domain(s.Reported, s.Pinned); ok {
			placed = append(placed, d)
		} else {
			unknown++
		}
	}
	return placed, unknown
}
