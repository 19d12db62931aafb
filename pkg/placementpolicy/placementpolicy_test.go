package placementpolicy

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/placement"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

func pp(name string, sel *metav1.LabelSelector) v1alpha1.PlacementPolicy {
	return v1alpha1.PlacementPolicy{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop"}, Spec: v1alpha1.PlacementPolicySpec{PodSelector: sel}}
}

func TestChoose(t *testing.T) {
	web := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	webProd := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web", "tier": "prod"}}
	tierProd := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"prod"}}}}
	other := v1alpha1.PlacementPolicy{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere", Namespace: "other"}}
	cases := []struct {
		name        string
		labels      map[string]string
		annotation  string
		policies    []v1alpha1.PlacementPolicy
		want        string
		wantProblem string
	}{
		{name: "no policy", labels: map[string]string{"app": "web"}},
		{name: "empty selector selects all", labels: map[string]string{"app": "x"}, policies: []v1alpha1.PlacementPolicy{pp("all", nil)}, want: "all"},
		{name: "selector does not match", labels: map[string]string{"app": "db"}, policies: []v1alpha1.PlacementPolicy{pp("web", web)}},
		{name: "most specific wins", labels: map[string]string{"app": "web", "tier": "prod"},
			policies: []v1alpha1.PlacementPolicy{pp("all", nil), pp("web", web), pp("web-prod", webProd)}, want: "web-prod"},
		{name: "equally specific is a conflict", labels: map[string]string{"app": "web", "tier": "prod"},
			policies: []v1alpha1.PlacementPolicy{pp("web", web), pp("prod", tierProd), pp("all", nil)}, wantProblem: "prod, web"},
		{name: "annotation wins over selectors", labels: map[string]string{"app": "web", "tier": "prod"}, annotation: "all",
			policies: []v1alpha1.PlacementPolicy{pp("all", nil), pp("web-prod", webProd)}, want: "all"},
		{name: "annotation names a missing policy", labels: map[string]string{"app": "web"}, annotation: "gone",
			policies: []v1alpha1.PlacementPolicy{pp("web", web)}, wantProblem: "gone"},
		{name: "another namespace's policy never applies", labels: map[string]string{"app": "web"}, policies: []v1alpha1.PlacementPolicy{other}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "shop", Labels: tc.labels}}
			if tc.annotation != "" {
				pod.Annotations = map[string]string{protocol.PlacementPolicyAnnotation: tc.annotation}
			}
			got := Choose(pod, tc.policies)
			name := ""
			if got.Policy != nil {
				name = got.Policy.Name
			}
			if name != tc.want {
				t.Errorf("policy %q, want %q", name, tc.want)
			}
			if (tc.wantProblem == "") != (got.Problem == "") || !strings.Contains(got.Problem, tc.wantProblem) {
				t.Errorf("problem %q, want one naming %q", got.Problem, tc.wantProblem)
			}
		})
	}
}

func TestCompile(t *testing.T) {
	p := pp("spread", nil)
	p.Spec.ClusterSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"provider": "onprem"}}
	p.Spec.ClusterAffinity = &v1alpha1.ClusterAffinity{
		Preferred:      []v1alpha1.PreferredClusters{{Weight: 20, Selector: metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}}}},
		FallbackGroups: []metav1.LabelSelector{{MatchLabels: map[string]string{"site": "a"}}, {}},
	}
	p.Spec.SpreadConstraints = []v1alpha1.SpreadConstraint{{TopologyKey: "region"}, {TopologyKey: "zone", MaxSkew: 2, WhenUnsatisfiable: v1alpha1.DoNotSchedule}}
	p.Spec.Scoring = &v1alpha1.Scoring{SpreadWeight: ptr.To[int32](3), Window: &v1alpha1.ScoringWindow{Candidates: 2, TimeoutMilliseconds: 500}}
	c, err := Compile(&p)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Keys(); strings.Join(got, ",") != "region,zone" {
		t.Errorf("keys %v", got)
	}
	if c.Constraints[0].MaxSkew != 1 || c.Constraints[0].WhenUnsatisfiable != "ScheduleAnyway" || c.Constraints[1].MaxSkew != 2 || c.Constraints[1].WhenUnsatisfiable != "DoNotSchedule" {
		t.Errorf("constraints %+v", c.Constraints)
	}
	if c.Weight != 3 || c.Window == nil || c.Window.Candidates != 2 || c.Window.Timeout.Milliseconds() != 500 {
		t.Errorf("weight %d window %+v", c.Weight, c.Window)
	}
	if !c.Selector.Cluster.Matches(labels.Set{"provider": "onprem"}) || c.Selector.Cluster.Matches(labels.Set{"provider": "aws"}) {
		t.Error("cluster selector")
	}
	if len(c.Selector.Groups) != 2 || len(c.Selector.Preferred) != 1 || c.Selector.Preferred[0].Weight != 20 {
		t.Errorf("affinity %+v", c.Selector)
	}

	bad := pp("bad", nil)
	bad.Spec.ClusterSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "region", Operator: "Near"}}}
	if _, err := Compile(&bad); err == nil || !strings.Contains(err.Error(), "spec.clusterSelector") {
		t.Errorf("a bad selector gives %v, want an error naming spec.clusterSelector", err)
	}
}

// TestSelectWidensFallbackGroups: the next group is selected only once
// every target of the earlier ones failed the pod, and HeldBack counts
// the targets of the groups still held back.
func TestSelectWidensFallbackGroups(t *testing.T) {
	p := pp("tiers", nil)
	p.Spec.ClusterAffinity = &v1alpha1.ClusterAffinity{FallbackGroups: []metav1.LabelSelector{
		{MatchLabels: map[string]string{"tier": "1"}},
		{MatchLabels: map[string]string{"tier": "2"}},
		{MatchLabels: map[string]string{"tier": "3"}},
	}}
	c, err := Compile(&p)
	if err != nil {
		t.Fatal(err)
	}
	target := func(name, tier string, failed bool) Target {
		return Target{Cluster: placement.Cluster{Name: name, Labels: map[string]string{"tier": tier}}, Failed: failed}
	}
	for _, tc := range []struct {
		name     string
		failed   map[string]bool
		selected string
		heldBack int
	}{
		{"none failed", nil, "a1,a2", 3},
		{"one of the first group failed", map[string]bool{"a1": true}, "a1,a2", 3},
		{"the first group failed", map[string]bool{"a1": true, "a2": true}, "a1,a2,b1", 2},
		{"the first two failed", map[string]bool{"a1": true, "a2": true, "b1": true}, "a1,a2,b1,c1,c2", 0},
		{"a later group failed alone", map[string]bool{"b1": true}, "a1,a2", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := Select(c, []Target{
				target("a1", "1", tc.failed["a1"]), target("a2", "1", tc.failed["a2"]),
				target("b1", "2", tc.failed["b1"]),
				target("c1", "3", tc.failed["c1"]), target("c2", "3", tc.failed["c2"]),
			})
			if got := strings.Join(plan.Selected, ","); got != tc.selected || plan.HeldBack != tc.heldBack {
				t.Errorf("selected %s, held back %d; want %s, %d", got, plan.HeldBack, tc.selected, tc.heldBack)
			}
		})
	}
}
