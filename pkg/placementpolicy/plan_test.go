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
