package placement

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
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

func TestTooLarge(t *testing.T) {
	list := func(pairs ...string) corev1.ResourceList {
		l := corev1.ResourceList{}
		for i := 0; i+1 < len(pairs); i += 2 {
			l[corev1.ResourceName(pairs[i])] = resource.MustParse(pairs[i+1])
		}
		return l
	}
	largest := list("cpu", "2", "memory", "4Gi", "pods", "10")
	for _, tt := range []struct {
		name     string
		largest  corev1.ResourceList
		requests corev1.ResourceList
		want     string
	}{
		{"fits", largest, list("cpu", "2", "memory", "4Gi"), ""},
		{"cpu too large", largest, list("cpu", "2500m"), "no node has 2500m cpu free (the most on one node: 2)"},
		{"memory too large", largest, list("cpu", "1", "memory", "5Gi"), "no node has 5Gi memory free (the most on one node: 4Gi)"},
		{"no room for one more pod", list("cpu", "8", "pods", "0"), list("cpu", "1"), "no node has 1 pods free (the most on one node: 0)"},
		{"a resource the summary does not report", largest, list("nvidia.com/gpu", "1"), ""},
		{"no summary", nil, list("cpu", "100"), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := TooLarge(Cluster{Name: "c", LargestFree: tt.largest}, tt.requests); got != tt.want {
				t.Errorf("TooLarge = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestWithRoom(t *testing.T) {
	small := Cluster{Name: "small", LargestFree: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}}
	large := Cluster{Name: "large", LargestFree: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16")}}
	unknown := Cluster{Name: "unknown"}
	requests := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")}
	kept, left := WithRoom([]Cluster{small, large, unknown}, requests)
	if len(kept) != 2 || kept[0].Name != "large" || kept[1].Name != "unknown" || len(left) != 1 || !strings.Contains(left["small"], "4 cpu") {
		t.Errorf("WithRoom = %v, %v; want large and unknown kept, small left out", kept, left)
	}
	// When none may have room, all are kept: their nodes may grow.
	kept, left = WithRoom([]Cluster{small}, requests)
	if len(kept) != 1 || left != nil {
		t.Errorf("WithRoom of clusters none of which has room = %v, %v; want all kept", kept, left)
	}
}
