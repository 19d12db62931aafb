package placement

import (
	"math"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

const (
	regionKey = "topology.kubernetes.io/region"
	zoneKey   = "topology.kubernetes.io/zone"
)

// outcome is what a test expects of one verdict, in the options' order.
type outcome struct {
	Excluded string
	Spread   int64
	Total    int64
}

func zoneOnly(whenUnsatisfiable string, maxSkew int) []Constraint {
	return []Constraint{{TopologyKey: zoneKey, MaxSkew: maxSkew, WhenUnsatisfiable: whenUnsatisfiable}}
}

func regionThenZone(region, zone string) []Constraint {
	return []Constraint{
		{TopologyKey: regionKey, MaxSkew: 1, WhenUnsatisfiable: region},
		{TopologyKey: zoneKey, MaxSkew: 1, WhenUnsatisfiable: zone},
	}
}

func d(values ...string) Domain { return Domain(values) }

func TestEvaluate(t *testing.T) {
	for _, tc := range []struct {
		name        string
		constraints []Constraint
		weight      int64
		known       []Domain
		placed      []Domain
		options     []Option
		want        []outcome
		best        string // cluster Best picks; "" when every option is excluded
	}{
		{
			// The product issue's example: c1 is already selected in
			// us-east-1a. A second pod in us-east-1a would put zones 2 to 0
			// inside us-east, so c2 is out despite its score; us-west has
			// no pod yet, so both its clusters beat c3, and c5's own score
			// breaks the tie.
			name:        "worked example: c2 excluded, c5 chosen",
			constraints: regionThenZone(ScheduleAnyway, DoNotSchedule),
			weight:      2,
			known:       []Domain{d("us-east", "us-east-1a"), d("us-east", "us-east-1b"), d("us-west", "us-west-1a")},
			placed:      []Domain{d("us-east", "us-east-1a")},
			options: []Option{
				{Cluster: "c2", Domain: d("us-east", "us-east-1a"), Score: 50},
				{Cluster: "c3", Domain: d("us-east", "us-east-1b"), Score: 0},
				{Cluster: "c4", Domain: d("us-west", "us-west-1a"), Score: 0},
				{Cluster: "c5", Domain: d("us-west", "us-west-1a"), Score: 50},
			},
			want: []outcome{
				{Excluded: "topology.kubernetes.io/zone=us-east-1a would have 2 pods against 0 in us-east-1b (maxSkew 1)", Spread: 0, Total: 50},
				{Spread: -100, Total: -200},
				{Spread: 100, Total: 200},
				{Spread: 100, Total: 250},
			},
			best: "c5",
		},
		{
			name:    "no constraints: every spread is 0 and the cluster score decides",
			weight:  10,
			known:   []Domain{d("a")},
			placed:  []Domain{d("a"), d("a")},
			options: []Option{{Cluster: "c1", Domain: d("a"), Score: 3}, {Cluster: "c2", Score: 7}},
			want:    []outcome{{Total: 3}, {Total: 7}},
			best:    "c2",
		},
		{
			name:        "ScheduleAnyway never excludes, however skewed",
			constraints: zoneOnly(ScheduleAnyway, 1),
			weight:      1,
			known:       []Domain{d("a"), d("b")},
			placed:      []Domain{d("a"), d("a"), d("a")},
			options:     []Option{{Cluster: "c1", Domain: d("a"), Score: 500}, {Cluster: "c2", Domain: d("b")}},
			want:        []outcome{{Spread: -100, Total: 400}, {Spread: 100, Total: 100}},
			best:        "c1",
		},
		{
			name:        "an unknown WhenUnsatisfiable is ScheduleAnyway",
			constraints: zoneOnly("", 1),
			weight:      1,
			known:       []Domain{d("a"), d("b")},
			placed:      []Domain{d("a"), d("a")},
			options:     []Option{{Cluster: "c1", Domain: d("a")}},
			want:        []outcome{{}},
			best:        "c1",
		},
		{
			name:        "a known domain with no option and no sibling still holds the minimum",
			constraints: zoneOnly(DoNotSchedule, 1),
			weight:      1,
			known:       []Domain{d("a"), d("b")},
			placed:      []Domain{d("a")},
			options:     []Option{{Cluster: "c1", Domain: d("a")}},
			want:        []outcome{{Excluded: zoneKey + "=a would have 2 pods against 0 in b (maxSkew 1)"}},
		},
		{
			name:        "a placed domain missing from known counts",
			constraints: zoneOnly(DoNotSchedule, 1),
			weight:      1,
			known:       []Domain{d("a")},
			placed:      []Domain{d("a"), d("a"), d("b")},
			options:     []Option{{Cluster: "c1", Domain: d("a")}},
			want:        []outcome{{Excluded: zoneKey + "=a would have 3 pods against 1 in b (maxSkew 1)"}},
		},
		{
			name:        "maxSkew 0 is read as 1",
			constraints: zoneOnly(DoNotSchedule, 0),
			weight:      1,
			known:       []Domain{d("a"), d("b")},
			options:     []Option{{Cluster: "c1", Domain: d("a")}},
			want:        []outcome{{}},
			best:        "c1",
		},
		{
			name:        "maxSkew 2 allows two against none, not three",
			constraints: zoneOnly(DoNotSchedule, 2),
			weight:      1,
			known:       []Domain{d("a"), d("b")},
			placed:      []Domain{d("a")},
			options:     []Option{{Cluster: "c1", Domain: d("a")}, {Cluster: "c2", Domain: d("b"), Score: -1}},
			want:        []outcome{{Spread: -100, Total: -100}, {Spread: 100, Total: 99}},
			best:        "c2",
		},
		{
			name:        "maxSkew 2 excludes a third pod against none",
			constraints: zoneOnly(DoNotSchedule, 2),
			weight:      1,
			known:       []Domain{d("a"), d("b")},
			placed:      []Domain{d("a"), d("a")},
			options:     []Option{{Cluster: "c1", Domain: d("a")}},
			want:        []outcome{{Excluded: zoneKey + "=a would have 3 pods against 0 in b (maxSkew 2)"}},
		},
		{
			// Zone "a" of us-west is not a sibling of zone "a" of us-east:
			// each region's zones are balanced among themselves.
			name:        "same zone name in two regions: two domains",
			constraints: regionThenZone(ScheduleAnyway, DoNotSchedule),
			weight:      1,
			known:       []Domain{d("east", "a"), d("west", "a")},
			placed:      []Domain{d("east", "a")},
			options:     []Option{{Cluster: "c1", Domain: d("east", "a")}, {Cluster: "c2", Domain: d("west", "a")}},
			want:        []outcome{{Spread: -100, Total: -100}, {Spread: 100, Total: 100}},
			best:        "c2",
		},
		{
			// r1 has 2 pods, r2 has 6: c1 is in the emptier region but in
			// its fuller zone; c2 is in its region's emptiest zone. The
			// region level dominates.
			name:        "an earlier level outweighs any imbalance of a later one",
			constraints: regionThenZone(ScheduleAnyway, ScheduleAnyway),
			weight:      1,
			known:       []Domain{d("r1", "z1"), d("r1", "z2"), d("r2", "z3"), d("r2", "z4")},
			placed: []Domain{
				d("r1", "z1"), d("r1", "z1"),
				d("r2", "z3"), d("r2", "z3"), d("r2", "z3"), d("r2", "z4"), d("r2", "z4"), d("r2", "z4"),
			},
			options: []Option{{Cluster: "c1", Domain: d("r1", "z1")}, {Cluster: "c2", Domain: d("r2", "z3")}},
			want:    []outcome{{Spread: 100, Total: 100}, {Spread: -100, Total: -100}},
			best:    "c1",
		},
		{
			// Raw scores 63 (b), 62 (a) and 60 (c): the spread of a is
			// (62-60)*200/3 - 100 = 33, rounded toward -100.
			name:        "normalized between the worst and the best option",
			constraints: zoneOnly(ScheduleAnyway, 1),
			weight:      3,
			known:       []Domain{d("a"), d("b"), d("c")},
			placed:      []Domain{d("a"), d("c"), d("c"), d("c")},
			options: []Option{
				{Cluster: "c1", Domain: d("a")}, {Cluster: "c2", Domain: d("b")}, {Cluster: "c3", Domain: d("c")},
			},
			want: []outcome{{Spread: 33, Total: 99}, {Spread: 100, Total: 300}, {Spread: -100, Total: -300}},
			best: "c2",
		},
		{
			// The excluded a would score lowest; it must not stretch the
			// scale of those that may be chosen.
			name:        "normalized among the options that are not excluded",
			constraints: zoneOnly(DoNotSchedule, 1),
			weight:      1,
			known:       []Domain{d("a"), d("b"), d("c")},
			placed:      []Domain{d("a"), d("b")},
			options: []Option{
				{Cluster: "c1", Domain: d("a"), Score: 7}, {Cluster: "c2", Domain: d("b")}, {Cluster: "c3", Domain: d("c")},
			},
			want: []outcome{
				{Excluded: zoneKey + "=a would have 2 pods against 0 in c (maxSkew 1)", Total: 7},
				{Excluded: zoneKey + "=b would have 2 pods against 0 in c (maxSkew 1)"},
				{Spread: 0, Total: 0},
			},
			best: "c3",
		},
		{
			name:        "equal spread everywhere: 0 for all",
			constraints: zoneOnly(DoNotSchedule, 1),
			weight:      5,
			known:       []Domain{d("a"), d("b")},
			placed:      []Domain{d("a"), d("b")},
			options:     []Option{{Cluster: "c1", Domain: d("a"), Score: 1}, {Cluster: "c2", Domain: d("b"), Score: 2}},
			want:        []outcome{{Total: 1}, {Total: 2}},
			best:        "c2",
		},
		{
			name:        "a negative weight is 0",
			constraints: zoneOnly(ScheduleAnyway, 1),
			weight:      -4,
			known:       []Domain{d("a"), d("b")},
			placed:      []Domain{d("a")},
			options:     []Option{{Cluster: "c1", Domain: d("a"), Score: 1}, {Cluster: "c2", Domain: d("b")}},
			want:        []outcome{{Spread: -100, Total: 1}, {Spread: 100, Total: 0}},
			best:        "c1",
		},
		{
			name:        "a huge weight saturates instead of wrapping",
			constraints: zoneOnly(ScheduleAnyway, 1),
			weight:      math.MaxInt64,
			known:       []Domain{d("a"), d("b")},
			placed:      []Domain{d("a")},
			options:     []Option{{Cluster: "c1", Domain: d("a"), Score: 1}, {Cluster: "c2", Domain: d("b"), Score: 1}},
			want:        []outcome{{Spread: -100, Total: math.MinInt64}, {Spread: 100, Total: math.MaxInt64}},
			best:        "c2",
		},
		{
			// c2 has no zone: it is in region r, but in no zone, as
			// kube-scheduler counts a node without the key in no domain.
			name:        "a node without a key is in no domain of it",
			constraints: regionThenZone(DoNotSchedule, DoNotSchedule),
			weight:      1,
			known:       []Domain{d("r", "z"), d("r")},
			placed:      []Domain{d("r", "z"), d("r", "")},
			options:     []Option{{Cluster: "c1", Domain: d("r", "z")}, {Cluster: "c2", Domain: d("r")}},
			want: []outcome{
				{Spread: 0, Total: 0},
				{Excluded: "its node has no " + zoneKey + " label", Spread: 0, Total: 0},
			},
			best: "c1",
		},
		{
			name:        "a node without a key under ScheduleAnyway scores lowest",
			constraints: zoneOnly(ScheduleAnyway, 1),
			weight:      1,
			known:       []Domain{d("a"), d("")},
			placed:      []Domain{d("a"), d("a")},
			options:     []Option{{Cluster: "c1", Domain: d("a")}, {Cluster: "c2", Domain: d("")}},
			want:        []outcome{{Spread: 100, Total: 100}, {Spread: -100, Total: -100}},
			best:        "c1",
		},
		{
			name:        "values past the constraints are ignored",
			constraints: zoneOnly(DoNotSchedule, 1),
			weight:      1,
			known:       []Domain{d("a", "x"), d("b", "y")},
			placed:      []Domain{d("a", "y")},
			options:     []Option{{Cluster: "c1", Domain: d("a", "z")}, {Cluster: "c2", Domain: d("b")}},
			want:        []outcome{{Excluded: zoneKey + "=a would have 2 pods against 0 in b (maxSkew 1)"}, {}},
			best:        "c2",
		},
		{
			// A target with nodes in zones a and b gives an option per zone;
			// each is weighed as the domain it would count in.
			name:        "a cluster spanning two zones: one option per zone",
			constraints: zoneOnly(DoNotSchedule, 1),
			weight:      1,
			known:       []Domain{d("a"), d("b")},
			placed:      []Domain{d("a")},
			options:     []Option{{Cluster: "t", Domain: d("a"), Score: 9}, {Cluster: "t", Domain: d("b"), Score: 9}},
			want:        []outcome{{Excluded: zoneKey + "=a would have 2 pods against 0 in b (maxSkew 1)", Total: 9}, {Total: 9}},
			best:        "t",
		},
		{
			name:        "nothing at all",
			constraints: zoneOnly(DoNotSchedule, 1),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			verdicts := Evaluate(tc.constraints, tc.weight, tc.known, tc.placed, tc.options)
			got := make([]outcome, len(verdicts))
			for i, v := range verdicts {
				if !slices.Equal(v.Domain, tc.options[i].Domain) || v.Cluster != tc.options[i].Cluster || v.Score != tc.options[i].Score {
					t.Errorf("verdict %d is of option %+v, want %+v", i, v.Option, tc.options[i])
				}
				got[i] = outcome{Excluded: v.Excluded, Spread: v.Spread, Total: v.Total}
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Evaluate (-want +got):\n%s", diff)
			}
			best, ok := Best(verdicts)
			if ok != (tc.best != "") || best.Cluster != tc.best {
				t.Errorf("Best = %q, %v; want %q", best.Cluster, ok, tc.best)
			}
		})
	}
}

// Eight siblings placed one at a time over four clusters, one per zone of
// two regions, all scoring the same: the spread alone fills the regions 4/4
// and the zones 2/2/2/2.
func TestEvaluateOneAtATimeFillsEvenly(t *testing.T) {
	constraints := regionThenZone(DoNotSchedule, DoNotSchedule)
	options := []Option{
		{Cluster: "c1", Domain: d("east", "east-a"), Score: 10},
		{Cluster: "c2", Domain: d("east", "east-b"), Score: 10},
		{Cluster: "c3", Domain: d("west", "west-a"), Score: 10},
		{Cluster: "c4", Domain: d("west", "west-b"), Score: 10},
	}
	known := make([]Domain, len(options))
	for i, o := range options {
		known[i] = o.Domain
	}
	var placed []Domain
	for range 8 {
		best, ok := Best(Evaluate(constraints, 1, known, placed, options))
		if !ok {
			t.Fatalf("no option for sibling %d after %v", len(placed)+1, placed)
		}
		placed = append(placed, best.Domain)
	}

	regions, zones := map[string]int{}, map[string]int{}
	for _, p := range placed {
		regions[p[0]]++
		zones[p[1]]++
	}
	if want := map[string]int{"east": 4, "west": 4}; !cmp.Equal(regions, want) {
		t.Errorf("regions %v, want %v (placed %v)", regions, want, placed)
	}
	if want := map[string]int{"east-a": 2, "east-b": 2, "west-a": 2, "west-b": 2}; !cmp.Equal(zones, want) {
		t.Errorf("zones %v, want %v (placed %v)", zones, want, placed)
	}
}

func TestBest(t *testing.T) {
	for _, tc := range []struct {
		name     string
		verdicts []Verdict
		want     Verdict
		ok       bool
	}{
		{name: "none"},
		{
			name:     "all excluded",
			verdicts: []Verdict{{Option: Option{Cluster: "a"}, Excluded: "full", Total: 9}},
		},
		{
			name: "highest total, excluded ones skipped",
			verdicts: []Verdict{
				{Option: Option{Cluster: "a", Score: 100}, Excluded: "skewed", Total: 100},
				{Option: Option{Cluster: "b"}, Total: 5},
				{Option: Option{Cluster: "c"}, Total: 6},
			},
			want: Verdict{Option: Option{Cluster: "c"}, Total: 6},
			ok:   true,
		},
		{
			name: "equal totals: the higher cluster score",
			verdicts: []Verdict{
				{Option: Option{Cluster: "a", Score: 1}, Spread: 4, Total: 5},
				{Option: Option{Cluster: "b", Score: 5}, Total: 5},
			},
			want: Verdict{Option: Option{Cluster: "b", Score: 5}, Total: 5},
			ok:   true,
		},
		{
			name: "equal scores: the smaller cluster name",
			verdicts: []Verdict{
				{Option: Option{Cluster: "b", Domain: d("a")}, Total: 5},
				{Option: Option{Cluster: "a", Domain: d("b")}, Total: 5},
			},
			want: Verdict{Option: Option{Cluster: "a", Domain: d("b")}, Total: 5},
			ok:   true,
		},
		{
			name: "same cluster: the smaller domain",
			verdicts: []Verdict{
				{Option: Option{Cluster: "a", Domain: d("r", "zb")}, Total: 5},
				{Option: Option{Cluster: "a", Domain: d("r", "za")}, Total: 5},
				{Option: Option{Cluster: "a", Domain: d("r", "zc")}, Total: 5},
			},
			want: Verdict{Option: Option{Cluster: "a", Domain: d("r", "za")}, Total: 5},
			ok:   true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, verdicts := range [][]Verdict{tc.verdicts, reversed(tc.verdicts)} {
				got, ok := Best(verdicts)
				if ok != tc.ok || !cmp.Equal(got, tc.want) {
					t.Errorf("Best(%+v) = %+v, %v; want %+v, %v", verdicts, got, ok, tc.want, tc.ok)
				}
			}
		})
	}
}

func reversed[T any](s []T) []T {
	r := slices.Clone(s)
	slices.Reverse(r)
	return r
}

func TestDomainKey(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    Domain
		want string
	}{
		{name: "empty", d: nil, want: ""},
		{name: "one value", d: d("us-east"), want: "us-east"},
		{name: "joined with NUL", d: d("us-east", "us-east-1a"), want: "us-east\x00us-east-1a"},
		{name: "an empty value keeps its place", d: d("", "a"), want: "\x00a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.d.Key(); got != tc.want {
				t.Errorf("%q.Key() = %q, want %q", tc.d, got, tc.want)
			}
		})
	}
}

// Keys must tell apart every two domains of the same length, and sort like
// them, even when a hostile value holds the separator.
func TestDomainKeyIsOrderedAndDistinct(t *testing.T) {
	values := []string{"", "a", "a\x00", "a\x00b", "a\x01", "a\x01\x00", "a\x02", "ab", "b", "\x00", "\x01", "\x01\x01"}
	var domains []Domain
	for _, x := range values {
		for _, y := range values {
			domains = append(domains, d(x, y))
		}
	}
	for _, a := range domains {
		for _, b := range domains {
			want := slices.Compare(a, b)
			got := cmpStrings(a.Key(), b.Key())
			if got != want {
				t.Errorf("Key(%q) vs Key(%q): %d, want %d as the domains compare", a, b, got, want)
			}
		}
	}
}

func cmpStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
