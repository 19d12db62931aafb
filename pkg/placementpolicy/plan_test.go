package placementpolicy

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/flotilla-dev/flotilla/pkg/placement"
)

const zoneKey = "topology.kubernetes.io/zone"

func target(name string, failed bool, lbls map[string]string, topology map[string][]string) Target {
	return Target{Cluster: placement.Cluster{Name: name, Labels: lbls, Topology: topology}, Failed: failed}
}

func zone(z string) map[string]string { return map[string]string{zoneKey: z, "tier": "gold"} }

// TestPlan: the plan the agent fans out by and explain states, from plain
// values: selection and its reasons, fallback groups widened only while
// every earlier target failed, the domains known, and the spread's
// exclusions, pins and unpinned targets.
func TestPlan(t *testing.T) {
	gold := labels.SelectorFromSet(labels.Set{"tier": "gold"})
	silver := labels.SelectorFromSet(labels.Set{"tier": "silver"})
	spread := []placement.Constraint{{TopologyKey: zoneKey, MaxSkew: 1, WhenUnsatisfiable: placement.DoNotSchedule}}
	for _, tc := range []struct {
		name     string
		policy   Compiled
		targets  []Target
		placed   []placement.Domain
		full     map[string]map[string]bool
		selected []string
		// excluded are the reasons' beginnings, per target.
		excluded map[string]string
		known    []string
		pins     map[string]string
		unpinned []string
	}{
		{
			name:     "the cluster selector excludes",
			policy:   Compiled{Selector: placement.Selector{Cluster: gold}},
			targets:  []Target{target("a", false, zone("a"), nil), target("s", false, map[string]string{"tier": "silver"}, nil)},
			selected: []string{"a"},
			excluded: map[string]string{"s": "does not match clusterSelector"},
		},
		{
			name:     "a later fallback group waits while an earlier target can run the pod",
			policy:   Compiled{Selector: placement.Selector{Groups: []labels.Selector{gold, silver}}},
			targets:  []Target{target("g1", true, zone("a"), nil), target("g2", false, zone("b"), nil), target("s", false, map[string]string{"tier": "silver"}, nil)},
			selected: []string{"g1", "g2"},
			excluded: map[string]string{"s": "in fallback group 2"},
		},
		{
			name:     "a later fallback group once every earlier target failed",
			policy:   Compiled{Selector: placement.Selector{Groups: []labels.Selector{gold, silver}}},
			targets:  []Target{target("g1", true, zone("a"), nil), target("g2", true, zone("b"), nil), target("s", false, map[string]string{"tier": "silver"}, nil)},
			selected: []string{"g1", "g2", "s"},
		},
		{
			name:     "the spread excludes the full zone",
			policy:   Compiled{Constraints: spread, Weight: 1},
			targets:  []Target{target("a", false, zone("a"), nil), target("b", false, zone("b"), nil)},
			placed:   []placement.Domain{{"a"}},
			selected: []string{"b"},
			excluded: map[string]string{"a": SpreadExclusion},
			known:    []string{"a", "b"},
		},
		{
			name:     "a target spanning zones is pinned to the one the spread allows",
			policy:   Compiled{Constraints: spread, Weight: 1},
			targets:  []Target{target("ab", false, nil, map[string][]string{zoneKey: {"a", "b"}}), target("a", false, zone("a"), nil)},
			placed:   []placement.Domain{{"a"}},
			selected: []string{"ab"},
			excluded: map[string]string{"a": SpreadExclusion},
			known:    []string{"a", "b"},
			pins:     map[string]string{"ab": "b"},
		},
		{
			name:     "a domain where the pod's candidate found no node is pinned to no more",
			policy:   Compiled{Constraints: spread, Weight: 1},
			targets:  []Target{target("ab", false, nil, map[string][]string{zoneKey: {"a", "b"}})},
			full:     map[string]map[string]bool{"ab": {placement.Domain{"a"}.Key(): true}},
			selected: []string{"ab"},
			known:    []string{"a", "b"},
			pins:     map[string]string{"ab": "b"},
		},
		{
			name:     "every domain full: pinned as the spread prefers",
			policy:   Compiled{Constraints: spread, Weight: 1},
			targets:  []Target{target("ab", false, nil, map[string][]string{zoneKey: {"a", "b"}})},
			placed:   []placement.Domain{{"b"}},
			full:     map[string]map[string]bool{"ab": {placement.Domain{"a"}.Key(): true, placement.Domain{"b"}.Key(): true}},
			selected: []string{"ab"},
			known:    []string{"a", "b"},
			pins:     map[string]string{"ab": "a"},
		},
		{
			name:     "a target whose zones are not known goes unpinned, and offers no known domain",
			policy:   Compiled{Constraints: spread, Weight: 1},
			targets:  []Target{target("a", false, zone("a"), nil), target("x", false, nil, nil)},
			placed:   []placement.Domain{{"a"}, {"a"}},
			selected: []string{"a", "x"},
			known:    []string{"a"},
			unpinned: []string{"x"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Select(&tc.policy, tc.targets)
			p.Spread(&tc.policy, tc.placed, tc.full)
			if !slices.Equal(p.Selected, tc.selected) {
				t.Errorf("selected %v, want %v", p.Selected, tc.selected)
			}
			if got, want := slices.Sorted(maps.Keys(p.Excluded)), slices.Sorted(maps.Keys(tc.excluded)); !slices.Equal(got, want) {
				t.Errorf("excluded %v, want %v", p.Excluded, tc.excluded)
			}
			for name, why := range tc.excluded {
				if !strings.HasPrefix(p.Excluded[name], why) {
					t.Errorf("%s excluded for %q, want %q...", name, p.Excluded[name], why)
				}
			}
			var known []string
			for _, d := range p.Known {
				known = append(known, strings.Join(d, "/"))
			}
			if !slices.Equal(known, tc.known) {
				t.Errorf("known %v, want %v", known, tc.known)
			}
			pins := map[string]string{}
			for name, d := range p.Pins {
				pins[name] = strings.Join(d, "/")
			}
			if len(pins) != len(tc.pins) || !maps.Equal(pins, tc.pins) && len(tc.pins) > 0 {
				t.Errorf("pins %v, want %v", pins, tc.pins)
			}
			if got := slices.Sorted(maps.Keys(p.Unpinned)); !slices.Equal(got, tc.unpinned) {
				t.Errorf("unpinned %v, want %v", got, tc.unpinned)
			}
		})
	}
}

// TestSpreadCountsOnlyDomainsNodesHave: zone (ScheduleAnyway), then
// capacity type (DoNotSchedule, maxSkew 1), over a target whose nodes are
// on-demand in zone a and spot in zone b, room for four pods in each, and
// a target of zone c with room for two on-demand and two spot pods.
// kube-scheduler places twelve pods there: every domain it counts has a
// node. The product of the first target's values counts a spot domain in
// zone a and an on-demand one in zone b that no node has, with no pod, and
// caps the real ones at one pod each; the combinations its nodes carry
// count none of them. A domain whose nodes take no pods (a cordoned spot
// node) still counts, as kube-scheduler counts it, and is offered no pod.
func TestSpreadCountsOnlyDomainsNodesHave(t *testing.T) {
	const capacityKey = "node.kubernetes.io/capacity"
	policy := &Compiled{Weight: 1, Constraints: []placement.Constraint{
		{TopologyKey: zoneKey, MaxSkew: 1, WhenUnsatisfiable: placement.ScheduleAnyway},
		{TopologyKey: capacityKey, MaxSkew: 1, WhenUnsatisfiable: placement.DoNotSchedule},
	}}
	comb := func(zone, capacity string, open bool) placement.Combination {
		return placement.Combination{Values: map[string]string{zoneKey: zone, capacityKey: capacity}, Open: open}
	}
	// room is what each real domain holds, by cluster and domain.
	room := map[string]map[string]int{
		"ab": {placement.Domain{"a", "on-demand"}.Key(): 4, placement.Domain{"b", "spot"}.Key(): 4},
		"c":  {placement.Domain{"c", "on-demand"}.Key(): 2, placement.Domain{"c", "spot"}.Key(): 2},
	}
	fleet := func(combinations bool) []Target {
		ab := placement.Cluster{Name: "ab", Topology: map[string][]string{zoneKey: {"a", "b"}, capacityKey: {"on-demand", "spot"}}}
		c := placement.Cluster{Name: "c", Labels: map[string]string{zoneKey: "c"}, Topology: map[string][]string{capacityKey: {"on-demand", "spot"}}}
		if combinations {
			ab.Combinations = []placement.Combination{comb("a", "on-demand", true), comb("b", "spot", true)}
			c.Combinations = []placement.Combination{comb("c", "on-demand", true), comb("c", "spot", true)}
		}
		return []Target{{Cluster: ab}, {Cluster: c}}
	}
	// place places pods one at a time where the plan's best verdict is, as
	// the agent elects the best candidate; a candidate that finds no node
	// in its domain (none there, or none with room) marks it full for the
	// pod, as the agent learns from the target's answer, and the pod is
	// planned again.
	place := func(targets []Target, pods int) (int, []placement.Domain) {
		var placed []placement.Domain
		held := map[string]int{}
		for range pods {
			full := map[string]map[string]bool{}
			for range 8 {
				p := Select(policy, targets)
				p.Spread(policy, placed, full)
				best, ok := placement.Best(slices.Collect(maps.Values(p.Best)))
				if !ok {
					break
				}
				at := best.Cluster + "/" + best.Domain.Key()
				if held[at] < room[best.Cluster][best.Domain.Key()] {
					held[at]++
					placed = append(placed, best.Domain)
					break
				}
				if full[best.Cluster] == nil {
					full[best.Cluster] = map[string]bool{}
				}
				full[best.Cluster][best.Domain.Key()] = true
			}
		}
		return len(placed), placed
	}
	if n, placed := place(fleet(true), 12); n != 12 {
		t.Fatalf("placed %d of 12 over the combinations the nodes carry: %v", n, placed)
	}
	// The product's phantom domains are what the combinations fix: without
	// them the same fleet places fewer.
	if n, _ := place(fleet(false), 12); n == 12 {
		t.Fatal("the product of values placed all twelve: the test does not reach the phantom domains")
	}

	// A cordoned spot node in zone a: its domain counts with no pod, so
	// zone a's on-demand domain takes no more than one pod beside it
	// (maxSkew 1), and no candidate is pinned to it.
	targets := fleet(true)
	targets[0].Combinations = append(targets[0].Combinations, comb("a", "spot", false))
	p := Select(policy, targets)
	if !slices.ContainsFunc(p.Known, func(d placement.Domain) bool { return d.Key() == placement.Domain{"a", "spot"}.Key() }) {
		t.Errorf("known %v: the cordoned node's domain is not counted", p.Known)
	}
	p.Spread(policy, []placement.Domain{{"a", "on-demand"}}, nil)
	for name, v := range p.Best {
		if v.Domain.Key() == (placement.Domain{"a", "spot"}).Key() {
			t.Errorf("%s's candidate goes to the cordoned domain", name)
		}
		if name == "ab" && v.Domain.Key() == (placement.Domain{"a", "on-demand"}).Key() {
			t.Errorf("a second pod goes to zone a's on-demand domain beside an empty spot domain (maxSkew 1)")
		}
	}
}
