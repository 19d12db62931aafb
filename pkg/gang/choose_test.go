package gang

import (
	"fmt"
	"slices"
	"testing"
)

// TestChoose: a gang's targets are chosen for the whole gang, from the
// targets' room for all its members, once per cluster.
func TestChoose(t *testing.T) {
	one := Spec{Name: "train", MinMember: 4, Mode: OneCluster}
	anyc := Spec{Name: "train", MinMember: 4, Mode: AnyClusters}
	for _, tc := range []struct {
		name     string
		spec     Spec
		pinned   string
		places   []Place
		limit    int
		want     []string // in any order when sorted is set
		sorted   bool
		wantFits bool
	}{
		{
			name:   "oneCluster: only the targets that hold the whole gang",
			spec:   one,
			places: []Place{{Name: "a", Room: 3}, {Name: "b", Room: 4}, {Name: "c", Room: 10}, {Name: "d", Room: 2}},
			limit:  2, want: []string{"b", "c"}, sorted: true, wantFits: true,
		},
		{
			name:   "oneCluster: one that fits is chosen alone rather than beside one too small",
			spec:   one,
			places: []Place{{Name: "a", Room: 3}, {Name: "b", Room: 5}, {Name: "c", Room: 1}},
			limit:  2, want: []string{"b"}, wantFits: true,
		},
		{
			name:   "oneCluster: a target that publishes no room comes after those that fit",
			spec:   one,
			places: []Place{{Name: "a", Room: -1}, {Name: "b", Room: 5}, {Name: "c", Room: 1}},
			limit:  2, want: []string{"b", "a"}, wantFits: true,
		},
		{
			name:   "oneCluster: none fits: the roomiest, and the gang is said not to fit",
			spec:   one,
			places: []Place{{Name: "a", Room: 1}, {Name: "b", Room: 3}, {Name: "c", Room: 2}},
			limit:  2, want: []string{"b", "c"},
		},
		{
			name:   "oneCluster: a bound member pins the gang",
			spec:   one,
			pinned: "a",
			places: []Place{{Name: "a", Room: 0}, {Name: "b", Room: 5}},
			limit:  2, want: []string{"a"}, wantFits: true,
		},
		{
			name: "two targets of one cluster count once",
			spec: one,
			places: []Place{
				{Name: "self", Cluster: "self", Room: 8}, {Name: "ns/self", Cluster: "self", Room: 8},
			},
			limit: 2, want: []string{"?"}, wantFits: true, // one of the two
		},
		{
			name:   "unreachable targets are left out while another answers",
			spec:   one,
			places: []Place{{Name: "a", Room: 8, Unreachable: true}, {Name: "b", Room: 8}},
			limit:  2, want: []string{"b"}, wantFits: true,
		},
		{
			name:   "no limit: every target that fits",
			spec:   one,
			places: []Place{{Name: "a", Room: 8}, {Name: "b", Room: 8}, {Name: "c", Room: 1}},
			want:   []string{"a", "b"}, sorted: true, wantFits: true,
		},
		{
			name:   "anyClusters: every target, once per cluster; each member draws its own",
			spec:   anyc,
			places: []Place{{Name: "a", Room: 2}, {Name: "b", Room: 1, Cluster: "x"}, {Name: "c", Room: 1, Cluster: "x"}, {Name: "d", Room: 1}},
			limit:  2, want: []string{"?", "?", "?"}, wantFits: true,
		},
		{
			name:   "anyClusters: the targets together hold too few members: the gang does not fit",
			spec:   anyc,
			places: []Place{{Name: "a", Room: 2}, {Name: "b", Room: 1}},
			limit:  2, want: []string{"a", "b"}, sorted: true,
		},
		{
			name:   "anyClusters: a target holds whole members only",
			spec:   anyc,
			places: []Place{{Name: "a", Room: 1.5}, {Name: "b", Room: 1.5}, {Name: "c", Room: 1.5}},
			limit:  2, want: []string{"a", "b", "c"}, sorted: true,
		},
		{
			name:   "anyClusters: a target of one cluster already counted adds no room",
			spec:   anyc,
			places: []Place{{Name: "a", Room: 2, Cluster: "x"}, {Name: "b", Room: 2, Cluster: "x"}, {Name: "c", Room: 1}},
			limit:  2, want: []string{"?", "?"},
		},
		{
			name:   "anyClusters: an unreachable target's room does not count while another answers",
			spec:   anyc,
			places: []Place{{Name: "a", Room: 8, Unreachable: true}, {Name: "b", Room: 2}},
			limit:  2, want: []string{"b"},
		},
		{
			name:   "anyClusters: a target that publishes no room may hold the rest",
			spec:   anyc,
			places: []Place{{Name: "a", Room: 1}, {Name: "b", Room: -1}},
			limit:  2, want: []string{"a", "b"}, sorted: true, wantFits: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Choose(tc.spec, "ns/train#0", tc.pinned, tc.places, tc.limit)
			if got.Fits != tc.wantFits {
				t.Errorf("fits %v, want %v", got.Fits, tc.wantFits)
			}
			names := slices.Clone(got.Targets)
			if tc.sorted {
				slices.Sort(names)
			}
			if len(names) != len(tc.want) {
				t.Fatalf("chose %v, want %v", got.Targets, tc.want)
			}
			for i := range names {
				if tc.want[i] != "?" && names[i] != tc.want[i] {
					t.Fatalf("chose %v, want %v", got.Targets, tc.want)
				}
			}
		})
	}
}

// TestChooseIsTheGangs: every member of a gang computes the same choice
// (it depends on the gang's draw, not on the member), and the attempt
// changes the draw: over attempts every target that fits comes first.
func TestChooseIsTheGangs(t *testing.T) {
	spec := Spec{Name: "train", MinMember: 4, Mode: OneCluster}
	places := []Place{{Name: "c1", Room: 8}, {Name: "c2", Room: 8}, {Name: "c3", Room: 8}, {Name: "c4", Room: 8}}
	first := map[string]bool{}
	for attempt := range 40 {
		draw := DrawKey("demo/train", attempt)
		a := Choose(spec, draw, "", places, 2)
		b := Choose(spec, draw, "", slices.Clone(places), 2)
		if !slices.Equal(a.Targets, b.Targets) || len(a.Targets) != 2 {
			t.Fatalf("attempt %d: two members chose %v and %v", attempt, a.Targets, b.Targets)
		}
		first[a.Targets[0]] = true
	}
	if len(first) != len(places) {
		t.Fatalf("over 40 attempts only %v came first", first)
	}
}

// TestChooseSpreadsGangs: gangs of one fleet draw their targets in
// proportion to the targets' weights, not all the same two.
func TestChooseSpreadsGangs(t *testing.T) {
	spec := Spec{MinMember: 2, Mode: OneCluster}
	places := []Place{{Name: "a", Room: 9, Weight: 1}, {Name: "b", Room: 9, Weight: 1}, {Name: "c", Room: 9, Weight: 1}}
	count := map[string]int{}
	for i := range 300 {
		c := Choose(spec, DrawKey(fmt.Sprintf("ns/g%d", i), 0), "", places, 1)
		count[c.Targets[0]]++
	}
	for _, p := range places {
		if count[p.Name] < 60 {
			t.Fatalf("first targets of 300 gangs: %v", count)
		}
	}
}

// TestChoiceShare: under anyClusters a gang's share is its need over the
// whole members of room its targets publish together (once per cluster);
// it cannot be told where a target publishes none, nor under oneCluster.
func TestChoiceShare(t *testing.T) {
	anyc := Spec{Name: "train", MinMember: 4, Mode: AnyClusters}
	c := Choose(anyc, "k", "", []Place{{Name: "a", Room: 3.5, Cluster: "x"}, {Name: "b", Room: 5, Cluster: "y"}, {Name: "a2", Room: 3.5, Cluster: "x"}}, 2)
	if c.Room != 8 || c.Share(4) != 0.5 {
		t.Errorf("room %v, share of 4 %v; want 8 whole members (a's cluster once), 0.5", c.Room, c.Share(4))
	}
	if s := c.Share(0); s != 0 {
		t.Errorf("share of no need %v, want 0", s)
	}
	if c := Choose(anyc, "k", "", []Place{{Name: "a", Room: 0.5}}, 2); c.Share(4) <= 1 {
		t.Errorf("no whole member of room: share %v, want more than 1", c.Share(4))
	}
	if c := Choose(anyc, "k", "", []Place{{Name: "a", Room: 3}, {Name: "b", Room: -1}}, 2); c.Share(4) != 0 {
		t.Errorf("a target publishing no room: share %v, want 0 (not known)", c.Share(4))
	}
	one := Spec{Name: "train", MinMember: 4, Mode: OneCluster}
	if c := Choose(one, "k", "", []Place{{Name: "a", Room: 8}}, 2); c.Share(4) != 0 {
		t.Errorf("oneCluster: share %v, want 0 (not known)", c.Share(4))
	}
}
