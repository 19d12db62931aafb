package placement

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestUnfit(t *testing.T) {
	const capacity = "node.kubernetes.io/capacity"
	in := func(key string, values ...string) corev1.NodeSelectorRequirement {
		return corev1.NodeSelectorRequirement{Key: key, Operator: corev1.NodeSelectorOpIn, Values: values}
	}
	terms := func(terms ...[]corev1.NodeSelectorRequirement) *corev1.NodeSelector {
		s := &corev1.NodeSelector{}
		for _, reqs := range terms {
			s.NodeSelectorTerms = append(s.NodeSelectorTerms, corev1.NodeSelectorTerm{MatchExpressions: reqs})
		}
		return s
	}
	onDemandOnly := Cluster{Name: "a", Topology: map[string][]string{capacity: {"on-demand"}, "topology.kubernetes.io/zone": {"z1", "z2"}}}
	for _, tc := range []struct {
		name     string
		cluster  Cluster
		required *corev1.NodeSelector
		want     string // a part of the reason, "" for fit
	}{
		{"no affinity", onDemandOnly, nil, ""},
		{"spot required, only on-demand nodes", onDemandOnly, terms([]corev1.NodeSelectorRequirement{in(capacity, "spot")}), "no node with node.kubernetes.io/capacity in [spot] (its nodes have on-demand)"},
		{"one of the values is there", onDemandOnly, terms([]corev1.NodeSelectorRequirement{in(capacity, "spot", "on-demand")}), ""},
		{"terms are ORed: the second fits", onDemandOnly, terms([]corev1.NodeSelectorRequirement{in(capacity, "spot")}, []corev1.NodeSelectorRequirement{in("topology.kubernetes.io/zone", "z2")}), ""},
		{"every term unmet: the first is told", onDemandOnly, terms([]corev1.NodeSelectorRequirement{in(capacity, "spot")}, []corev1.NodeSelectorRequirement{in("topology.kubernetes.io/zone", "z9")}), "capacity in [spot]"},
		{"a key the summary does not report may be on its nodes", onDemandOnly, terms([]corev1.NodeSelectorRequirement{in("disk", "ssd")}), ""},
		{"no summary: nothing known", Cluster{Name: "b"}, terms([]corev1.NodeSelectorRequirement{in(capacity, "spot")}), ""},
		{"other operators are not judged", onDemandOnly, terms([]corev1.NodeSelectorRequirement{{Key: capacity, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"on-demand"}}}), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Unfit(tc.cluster, tc.required)
			if (got == "") != (tc.want == "") || !strings.Contains(got, tc.want) {
				t.Errorf("Unfit: %q, want %q", got, tc.want)
			}
		})
	}
}

func TestBestPerCluster(t *testing.T) {
	best, excluded := BestPerCluster([]Verdict{
		{Option: Option{Cluster: "a", Domain: Domain{"z2"}}, Total: 10},
		{Option: Option{Cluster: "a", Domain: Domain{"z1"}}, Total: 10},
		{Option: Option{Cluster: "a", Domain: Domain{"z0"}}, Excluded: "skew"},
		{Option: Option{Cluster: "b", Domain: Domain{"z1"}}, Total: 5},
		{Option: Option{Cluster: "b", Domain: Domain{"z3"}}, Total: 7},
		{Option: Option{Cluster: "c", Domain: Domain{"z1"}}, Excluded: "skew"},
	})
	if got := best["a"].Domain.Key(); got != (Domain{"z1"}).Key() {
		t.Errorf("a: %q, want z1 (equal totals: the smaller key)", got)
	}
	if got := best["b"].Domain.Key(); got != (Domain{"z3"}).Key() {
		t.Errorf("b: %q, want z3 (the higher total)", got)
	}
	if _, ok := best["c"]; ok || excluded["c"] != "skew" || len(excluded) != 1 {
		t.Errorf("best %v, excluded %v: want only c excluded", best, excluded)
	}
}
