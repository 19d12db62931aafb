package placement

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

func TestDomains(t *testing.T) {
	many := make([]string, 10)
	for i := range many {
		many[i] = fmt.Sprintf("v%d", 9-i) // unsorted on purpose
	}
	for _, tc := range []struct {
		name    string
		cluster Cluster
		keys    []string
		want    []Domain
	}{
		{
			name:    "labels only",
			cluster: Cluster{Labels: map[string]string{regionKey: "us-east", zoneKey: "us-east-1a"}},
			keys:    []string{regionKey, zoneKey},
			want:    []Domain{d("us-east", "us-east-1a")},
		},
		{
			name:    "a cluster spanning two zones gives two domains",
			cluster: Cluster{Topology: map[string][]string{zoneKey: {"b", "a"}}},
			keys:    []string{zoneKey},
			want:    []Domain{d("a"), d("b")},
		},
		{
			name: "a region label plus summary zones",
			cluster: Cluster{
				Labels:   map[string]string{regionKey: "eu"},
				Topology: map[string][]string{zoneKey: {"eu-b", "eu-a", "eu-b"}},
			},
			keys: []string{regionKey, zoneKey},
			want: []Domain{d("eu", "eu-a"), d("eu", "eu-b")},
		},
		{
			// The label is what the virtual node carries: the summary cannot
			// widen it.
			name: "a label wins over the summary",
			cluster: Cluster{
				Labels:   map[string]string{zoneKey: "a"},
				Topology: map[string][]string{zoneKey: {"a", "b"}},
			},
			keys: []string{zoneKey},
			want: []Domain{d("a")},
		},
		{
			name:    "an empty label value is a value",
			cluster: Cluster{Labels: map[string]string{zoneKey: ""}, Topology: map[string][]string{zoneKey: {"a"}}},
			keys:    []string{zoneKey},
			want:    []Domain{d("")},
		},
		{
			name:    "a key with neither label nor summary values is the unnamed domain",
			cluster: Cluster{Labels: map[string]string{zoneKey: "a"}, Topology: map[string][]string{regionKey: {}}},
			keys:    []string{regionKey, zoneKey},
			want:    []Domain{d("", "a")},
		},
		{
			name:    "two spanned keys: the cross product, sorted",
			cluster: Cluster{Topology: map[string][]string{regionKey: {"r2", "r1"}, zoneKey: {"z2", "z1"}}},
			keys:    []string{regionKey, zoneKey},
			want:    []Domain{d("r1", "z1"), d("r1", "z2"), d("r2", "z1"), d("r2", "z2")},
		},
		{
			name:    "no keys: one domain with no values",
			cluster: Cluster{Labels: map[string]string{zoneKey: "a"}},
			want:    []Domain{{}},
		},
		{
			// 10*10*10 = 1000 domains: the 64 smallest are v0 v0 v0 .. v0 v6 v3.
			name:    "capped at 64, the first in sorted order",
			cluster: Cluster{Topology: map[string][]string{"a": many, "b": many, "c": many}},
			keys:    []string{"a", "b", "c"},
			want: func() []Domain {
				var want []Domain
				for i := range 64 {
					want = append(want, d("v0", fmt.Sprintf("v%d", i/10), fmt.Sprintf("v%d", i%10)))
				}
				return want
			}(),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Domains(tc.cluster, tc.keys)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Domains (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDomainsOfCombinations: a cluster that lists the combinations its
// nodes carry offers those (open ones) and counts those (all), projected on
// the keys, its own labels first; never the product of its values.
func TestDomainsOfCombinations(t *testing.T) {
	const capacityKey = "node.kubernetes.io/capacity"
	comb := func(open bool, kv ...string) Combination {
		c := Combination{Values: map[string]string{}, Open: open}
		for i := 0; i < len(kv); i += 2 {
			c.Values[kv[i]] = kv[i+1]
		}
		return c
	}
	cl := Cluster{
		Labels:   map[string]string{regionKey: "eu"},
		Topology: map[string][]string{zoneKey: {"a", "b"}, capacityKey: {"on-demand", "spot"}},
		Combinations: []Combination{
			comb(true, regionKey, "ignored", zoneKey, "b", capacityKey, "spot"),
			comb(true, zoneKey, "a", capacityKey, "on-demand"),
			comb(true, zoneKey, "a", capacityKey, "on-demand", "other", "x"), // the same once projected
			comb(false, zoneKey, "c", capacityKey, "spot"),
			comb(true, capacityKey, "spot"), // a node without a zone label
		},
	}
	keys := []string{regionKey, zoneKey, capacityKey}
	if diff := cmp.Diff([]Domain{d("eu", "", "spot"), d("eu", "a", "on-demand"), d("eu", "b", "spot")}, Domains(cl, keys)); diff != "" {
		t.Errorf("Domains (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]Domain{d("eu", "", "spot"), d("eu", "a", "on-demand"), d("eu", "b", "spot"), d("eu", "c", "spot")}, CountedDomains(cl, keys)); diff != "" {
		t.Errorf("CountedDomains (-want +got):\n%s", diff)
	}
	// Listed but empty: nothing offered, nothing counted; not the product.
	cl.Combinations = []Combination{}
	if got := Domains(cl, keys); len(got) != 0 {
		t.Errorf("Domains of a cluster listing no combination: %v", got)
	}
}

// A hostile summary: many values per key, some holding the Key separator.
// Domains stays within the cap, sorted by Key, distinct, and is the head of
// the full product.
func TestDomainsHostileSummary(t *testing.T) {
	values := []string{"b", "a\x00", "\x01", "a", "", "a\x00b", "a", "\x00", "c"}
	for i := range 200 {
		values = append(values, fmt.Sprintf("z%03d", i))
	}
	c := Cluster{Topology: map[string][]string{"x": values, "y": values}}
	got := Domains(c, []string{"x", "y"})
	if len(got) != maxDomainsPerCluster {
		t.Fatalf("%d domains, want the cap %d", len(got), maxDomainsPerCluster)
	}

	var all []Domain
	for _, x := range values {
		for _, y := range values {
			all = append(all, d(x, y))
		}
	}
	byKey := func(a, b Domain) int { return strings.Compare(a.Key(), b.Key()) }
	slices.SortFunc(all, byKey)
	all = slices.CompactFunc(all, func(a, b Domain) bool { return a.Key() == b.Key() })
	if diff := cmp.Diff(all[:maxDomainsPerCluster], got); diff != "" {
		t.Errorf("Domains is not the first %d of the product by Key (-want +got):\n%s", maxDomainsPerCluster, diff)
	}
}

func selector(t *testing.T, s string) labels.Selector {
	t.Helper()
	sel, err := labels.Parse(s)
	if err != nil {
		t.Fatalf("parse %q: %v", s, err)
	}
	return sel
}

func cluster(name string, kv ...string) Cluster {
	c := Cluster{Name: name, Labels: map[string]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		c.Labels[kv[i]] = kv[i+1]
	}
	return c
}

func names(groups [][]Cluster) [][]string {
	out := make([][]string, len(groups))
	for i, g := range groups {
		for _, c := range g {
			out[i] = append(out[i], c.Name)
		}
	}
	return out
}

func TestSelect(t *testing.T) {
	clusters := []Cluster{
		cluster("eu-2", "region", "eu", "capacity", "spot"),
		cluster("us-1", "region", "us", "capacity", "on-demand"),
		cluster("eu-1", "region", "eu", "capacity", "on-demand"),
		cluster("ap-1", "region", "ap"),
	}
	for _, tc := range []struct {
		name     string
		selector func(t *testing.T) Selector
		want     [][]string
		excluded map[string]string
	}{
		{
			name:     "nil selectors: everything, one group by name",
			selector: func(*testing.T) Selector { return Selector{} },
			want:     [][]string{{"ap-1", "eu-1", "eu-2", "us-1"}},
		},
		{
			name:     "clusterSelector",
			selector: func(t *testing.T) Selector { return Selector{Cluster: selector(t, "region=eu")} },
			want:     [][]string{{"eu-1", "eu-2"}},
			excluded: map[string]string{
				"us-1": "does not match clusterSelector region=eu",
				"ap-1": "does not match clusterSelector region=eu",
			},
		},
		{
			name: "required terms are ORed",
			selector: func(t *testing.T) Selector {
				return Selector{Required: []labels.Selector{selector(t, "region=us"), selector(t, "capacity=spot")}}
			},
			want: [][]string{{"eu-2", "us-1"}},
			excluded: map[string]string{
				"eu-1": "matches no required clusterAffinity term",
				"ap-1": "matches no required clusterAffinity term",
			},
		},
		{
			name: "clusterSelector is checked before the required terms",
			selector: func(t *testing.T) Selector {
				return Selector{Cluster: selector(t, "region!=ap"), Required: []labels.Selector{selector(t, "capacity")}}
			},
			want:     [][]string{{"eu-1", "eu-2", "us-1"}},
			excluded: map[string]string{"ap-1": "does not match clusterSelector region!=ap"},
		},
		{
			name: "fallback groups in order; a cluster goes in the first it matches",
			selector: func(t *testing.T) Selector {
				return Selector{Groups: []labels.Selector{selector(t, "capacity=on-demand"), selector(t, "region=eu")}}
			},
			want:     [][]string{{"eu-1", "us-1"}, {"eu-2"}},
			excluded: map[string]string{"ap-1": "in no fallback group"},
		},
		{
			name: "empty groups are dropped",
			selector: func(t *testing.T) Selector {
				return Selector{Groups: []labels.Selector{selector(t, "region=mars"), selector(t, "region=ap"), labels.Nothing(), nil}}
			},
			want: [][]string{{"ap-1"}, {"eu-1", "eu-2", "us-1"}},
		},
		{
			name: "nothing eligible",
			selector: func(t *testing.T) Selector {
				return Selector{Cluster: labels.Nothing()}
			},
			excluded: map[string]string{
				"eu-1": "does not match clusterSelector " + labels.Nothing().String(),
				"eu-2": "does not match clusterSelector " + labels.Nothing().String(),
				"us-1": "does not match clusterSelector " + labels.Nothing().String(),
				"ap-1": "does not match clusterSelector " + labels.Nothing().String(),
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			groups, excluded := Select(tc.selector(t), clusters)
			if diff := cmp.Diff(tc.want, names(groups), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("groups (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.excluded, excluded, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("excluded (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPreferenceScore(t *testing.T) {
	for _, tc := range []struct {
		name      string
		preferred []Preference
		cluster   Cluster
		want      int64
	}{
		{name: "no preferences", cluster: cluster("c", "region", "eu"), want: 0},
		{
			name:      "the weights of the matching preferences add up",
			preferred: []Preference{{Weight: 10, Selector: labels.SelectorFromSet(labels.Set{"region": "eu"})}, {Weight: 5, Selector: labels.SelectorFromSet(labels.Set{"capacity": "spot"})}, {Weight: 1, Selector: labels.SelectorFromSet(labels.Set{"region": "us"})}},
			cluster:   cluster("c", "region", "eu", "capacity", "spot"),
			want:      15,
		},
		{
			name:      "a nil selector matches every cluster",
			preferred: []Preference{{Weight: 3}},
			cluster:   cluster("c"),
			want:      3,
		},
		{
			name:      "negative weights count",
			preferred: []Preference{{Weight: 20, Selector: labels.Everything()}, {Weight: -30, Selector: labels.Everything()}},
			cluster:   cluster("c"),
			want:      -10,
		},
		{
			name:      "no match",
			preferred: []Preference{{Weight: 10, Selector: labels.SelectorFromSet(labels.Set{"region": "us"})}},
			cluster:   cluster("c", "region", "eu"),
			want:      0,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := PreferenceScore(Selector{Preferred: tc.preferred}, tc.cluster); got != tc.want {
				t.Errorf("PreferenceScore = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestForPod: the combinations a pod's node selector and required node
// affinity may match are kept, those they refute dropped; what a
// combination does not list is not judged.
func TestForPod(t *testing.T) {
	const capacityKey = "node.kubernetes.io/capacity"
	comb := func(zone, capacity string) Combination {
		return Combination{Values: map[string]string{zoneKey: zone, capacityKey: capacity}, Open: true}
	}
	cl := Cluster{Name: "c", Combinations: []Combination{comb("a", "on-demand"), comb("b", "spot"), comb("c", "spot"), {Values: map[string]string{zoneKey: "d"}, Open: true}}}
	req := func(terms ...[]corev1.NodeSelectorRequirement) *corev1.NodeSelector {
		s := &corev1.NodeSelector{}
		for _, exprs := range terms {
			s.NodeSelectorTerms = append(s.NodeSelectorTerms, corev1.NodeSelectorTerm{MatchExpressions: exprs})
		}
		return s
	}
	r := func(key string, op corev1.NodeSelectorOperator, values ...string) corev1.NodeSelectorRequirement {
		return corev1.NodeSelectorRequirement{Key: key, Operator: op, Values: values}
	}
	zones := func(c Cluster) string {
		var out []string
		for _, comb := range c.Combinations {
			out = append(out, comb.Values[zoneKey])
		}
		return strings.Join(out, ",")
	}
	for _, tc := range []struct {
		name     string
		selector map[string]string
		required *corev1.NodeSelector
		want     string
	}{
		{name: "nothing asked: all", want: "a,b,c,d"},
		{name: "the split's spot: zones with spot nodes, and the node without the key (not judged)", required: req([]corev1.NodeSelectorRequirement{r(capacityKey, corev1.NodeSelectorOpIn, "spot")}), want: "b,c,d"},
		{name: "NotIn", required: req([]corev1.NodeSelectorRequirement{r(capacityKey, corev1.NodeSelectorOpNotIn, "spot")}), want: "a,d"},
		{name: "DoesNotExist", required: req([]corev1.NodeSelectorRequirement{r(capacityKey, corev1.NodeSelectorOpDoesNotExist)}), want: "d"},
		{name: "terms are ORed", required: req([]corev1.NodeSelectorRequirement{r(zoneKey, corev1.NodeSelectorOpIn, "a")}, []corev1.NodeSelectorRequirement{r(zoneKey, corev1.NodeSelectorOpIn, "c")}), want: "a,c"},
		{name: "a key no combination lists is not judged", required: req([]corev1.NodeSelectorRequirement{r("example.com/gpu", corev1.NodeSelectorOpIn, "yes")}), want: "a,b,c,d"},
		{name: "a node selector", selector: map[string]string{capacityKey: "on-demand"}, want: "a,d"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := zones(ForPod(cl, tc.selector, tc.required)); got != tc.want {
				t.Errorf("zones %s, want %s", got, tc.want)
			}
		})
	}
	if got := ForPod(Cluster{Name: "old"}, map[string]string{capacityKey: "spot"}, nil); got.Combinations != nil {
		t.Errorf("a cluster listing no combinations got %v", got.Combinations)
	}
}
