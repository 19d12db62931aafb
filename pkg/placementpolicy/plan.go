package placementpolicy

import (
	"fmt"
	"strings"

	"github.com/flotilla-dev/flotilla/pkg/placement"
)

// Target is what a plan knows of one target of a pod, as plain values: how
// placement sees it, and whether it failed the pod.
type Target struct {
	placement.Cluster
	// Failed is set when the target is unreachable, its candidate of the
	// pod says it cannot run it, or that candidate is overdue (the target
	// answers none of the agent's candidates): a later fallback group is
	// used only once every target of the earlier ones failed.
	Failed bool
}

// SpreadExclusion begins the reason of a target the spread excludes.
const SpreadExclusion = "spread: "

// Plan is what a policy makes of a pod's targets. The agent's fan-out and
// `kubectl flotilla explain` both make it with Select, then Spread, so
// that what explain says is what the agent does.
type Plan struct {
	// Selected are the targets the pod may go to: its fallback groups in
	// order, each widened to only once every target of the earlier ones
	// failed the pod, by name within a group.
	Selected []string
	// Excluded says, per other target, why the policy keeps the pod from
	// it; a spread's verdict begins with SpreadExclusion.
	Excluded map[string]string
	// HeldBack is how many targets of later fallback groups are not
	// selected while an earlier group may run the pod.
	HeldBack int
	// Known are the domains of the selected targets a spread counts
	// (placement.CountedDomains: with those of nodes that take no pods),
	// those whose domains are known (see DomainsKnown), without
	// duplicates.
	Known []placement.Domain
	// Best is, per selected target whose domains are known, the spread's
	// verdict on the domain its candidate counts in (set by Spread).
	Best map[string]placement.Verdict
	// Pins are, per selected target spanning several domains, the domain
	// its candidate is pinned to (Best's).
	Pins map[string]placement.Domain
	// Closed are, per target whose domains are known, the keys of its
	// domains the spread excludes now: a candidate pinned to one can
	// never be elected.
	Closed map[string]map[string]bool
	// Unpinned are the selected targets whose domains are not known
	// before they reserve: their candidates go unpinned, and the election
	// judges the node each reports.
	Unpinned map[string]bool

	clusters map[string]placement.Cluster
}

// Select selects the pod's targets by the policy's cluster selection and
// fallback groups, and gathers the domains they offer.
func Select(c *Compiled, targets []Target) Plan {
	p := Plan{Excluded: map[string]string{}, clusters: make(map[string]placement.Cluster, len(targets))}
	all := make([]placement.Cluster, len(targets))
	failed := make(map[string]bool, len(targets))
	for i, t := range targets {
		all[i] = t.Cluster
		failed[t.Name] = t.Failed
		p.clusters[t.Name] = t.Cluster
	}
	groups, excluded := placement.Select(c.Selector, all)
	for name, why := range excluded {
		p.Excluded[name] = why
	}
	allFailed := true
	for i, g := range groups {
		for _, cl := range g {
			p.Selected = append(p.Selected, cl.Name)
			allFailed = allFailed && failed[cl.Name]
		}
		if i < len(groups)-1 && allFailed {
			continue
		}
		for _, later := range groups[i+1:] {
			for _, cl := range later {
				p.Excluded[cl.Name] = fmt.Sprintf("in fallback group %d, not needed while an earlier group can run the pod", i+2)
				p.HeldBack++
			}
		}
		break
	}
	if !c.Spreads() {
		return p
	}
	keys := c.Keys()
	seen := map[string]bool{}
	for _, name := range p.Selected {
		cl := p.clusters[name]
		if !DomainsKnown(cl, keys) {
			continue
		}
		for _, d := range placement.CountedDomains(cl, keys) {
			if !seen[d.Key()] {
				seen[d.Key()] = true
				p.Known = append(p.Known, d)
			}
		}
	}
	return p
}

// Spread judges the selected targets by the policy's spread, placed being
// the domains of the pod's workload siblings that are bound or elected: a
// target none of whose domains the spread allows leaves Selected for
// Excluded; one spanning several is pinned to the best it allows. A target
// whose domains are not known stays selected, unpinned. full are, per
// target, the keys of domains where the pod's candidate found no node: a
// domain there is pinned to no more, as long as the target has another.
// Without a spread it changes nothing.
func (p *Plan) Spread(c *Compiled, placed []placement.Domain, full map[string]map[string]bool) {
	if !c.Spreads() {
		return
	}
	keys := c.Keys()
	var options []placement.Option
	p.Unpinned = map[string]bool{}
	for _, name := range p.Selected {
		cl := p.clusters[name]
		if !DomainsKnown(cl, keys) {
			p.Unpinned[name] = true
			continue
		}
		for _, d := range placement.Domains(cl, keys) {
			options = append(options, placement.Option{Cluster: name, Domain: d, Score: placement.PreferenceScore(c.Selector, cl)})
		}
	}
	verdicts := placement.Evaluate(c.Constraints, c.Weight, p.Known, placed, options)
	for i, v := range verdicts {
		if v.Excluded == "" && full[v.Cluster][v.Domain.Key()] && hasOther(verdicts, v, full) {
			verdicts[i].Excluded = fmt.Sprintf("the pod's candidate found no node in %s there", strings.Join(v.Domain, "/"))
		}
	}
	best, why := placement.BestPerCluster(verdicts)
	p.Best, p.Pins, p.Closed = best, map[string]placement.Domain{}, map[string]map[string]bool{}
	for _, v := range verdicts {
		if v.Excluded != "" {
			if p.Closed[v.Cluster] == nil {
				p.Closed[v.Cluster] = map[string]bool{}
			}
			p.Closed[v.Cluster][v.Domain.Key()] = true
		}
	}
	kept := p.Selected[:0:0]
	for _, name := range p.Selected {
		if p.Unpinned[name] {
			kept = append(kept, name)
			continue
		}
		v, ok := best[name]
		if !ok {
			reason := why[name]
			if reason == "" {
				reason = "none of its nodes takes pods"
			}
			p.Excluded[name] = SpreadExclusion + reason
			continue
		}
		kept = append(kept, name)
		if len(placement.Domains(p.clusters[name], keys)) > 1 {
			p.Pins[name] = v.Domain
		}
	}
	p.Selected = kept
}

// hasOther reports whether v's target offers another domain the spread
// allows and where the pod's candidate has not found every node full.
func hasOther(verdicts []placement.Verdict, v placement.Verdict, full map[string]map[string]bool) bool {
	for _, o := range verdicts {
		if o.Cluster == v.Cluster && o.Excluded == "" && o.Domain.Key() != v.Domain.Key() && !full[o.Cluster][o.Domain.Key()] {
			return true
		}
	}
	return false
}

// DomainsKnown reports whether the domains a target offers for keys are
// known before it reserves a node: its Topology says (a summary, or this
// cluster's own nodes for a self target), or its labels name every key.
func DomainsKnown(cl placement.Cluster, keys []string) bool {
	if cl.Topology != nil || cl.Combinations != nil {
		return true
	}
	for _, k := range keys {
		if _, ok := cl.Labels[k]; !ok {
			return false
		}
	}
	return true
}
