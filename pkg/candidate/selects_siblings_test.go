package candidate

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/sourcespec"
)

// withPodSelectors is the source pod of sourcePod whose saved spec has
// affinity and spread.
func withPodSelectors(t *testing.T, name string, affinity *corev1.Affinity, spread []corev1.TopologySpreadConstraint) *corev1.Pod {
	t.Helper()
	src := sourcePod(t)
	spec, err := sourcespec.Original(src)
	if err != nil {
		t.Fatal(err)
	}
	spec.Affinity, spec.TopologySpreadConstraints = affinity, spread
	src.Name, src.UID = name, types.UID("uid-"+name)
	setSpec(t, src, *spec)
	return src
}

// selector is a label selector of matchLabels ml and one expression per
// key of exists (operator Exists).
func selector(ml map[string]string, exists ...string) *metav1.LabelSelector {
	s := &metav1.LabelSelector{MatchLabels: ml}
	for _, k := range exists {
		s.MatchExpressions = append(s.MatchExpressions, metav1.LabelSelectorRequirement{Key: k, Operator: metav1.LabelSelectorOpExists})
	}
	return s
}

const carried = protocol.SourceLabelPrefix

// TestBuildSelectsCarriedLabels: the candidate's selectors of pods select
// the labels as the candidates carry them (label.multicluster.flotilla.dev/),
// each kind of selector, and (anti-)affinity terms select the source's own
// candidates in the candidate's namespace only; Flotilla's keys and the
// spec of a target that keeps the labels are left as they are.
func TestBuildSelectsCarriedLabels(t *testing.T) {
	namespaces := selector(map[string]string{"team": "a"}, "env")
	term := func(s *metav1.LabelSelector, match, mismatch []string) corev1.PodAffinityTerm {
		return corev1.PodAffinityTerm{LabelSelector: s, NamespaceSelector: namespaces, Namespaces: []string{"shop"}, TopologyKey: "kubernetes.io/hostname", MatchLabelKeys: match, MismatchLabelKeys: mismatch}
	}
	sourceTerm := term(selector(map[string]string{"app": "web", "app.kubernetes.io/part-of": "shop"}, "tier"), []string{"pod-template-hash"}, []string{"team"})
	// Carried, a term selects the source's candidates alone, in the
	// candidate's namespace.
	carriedTerm := term(selector(map[string]string{carried + "app": "web", carried + "app.kubernetes.io_part-of": "shop"}, carried+"tier"), []string{carried + "pod-template-hash"}, []string{carried + "team"})
	carriedTerm.Namespaces, carriedTerm.NamespaceSelector = nil, nil
	carriedTerm.LabelSelector.MatchExpressions = append(carriedTerm.LabelSelector.MatchExpressions, OfSource("c1"))
	nilTerm := term(nil, nil, nil)
	nilTerm.Namespaces, nilTerm.NamespaceSelector = nil, nil
	spread := func(s *metav1.LabelSelector, match ...string) []corev1.TopologySpreadConstraint {
		return []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "zone", WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: s, MatchLabelKeys: match}}
	}
	for _, tt := range []struct {
		name               string
		self, keep         bool
		affinity, wantAff  *corev1.Affinity
		spread, wantSpread []corev1.TopologySpreadConstraint
	}{
		{
			name:     "required pod affinity",
			affinity: &corev1.Affinity{PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{sourceTerm}}},
			wantAff:  &corev1.Affinity{PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{carriedTerm}}},
		},
		{
			name:     "preferred pod affinity",
			affinity: &corev1.Affinity{PodAffinity: &corev1.PodAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{Weight: 5, PodAffinityTerm: sourceTerm}}}},
			wantAff:  &corev1.Affinity{PodAffinity: &corev1.PodAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{Weight: 5, PodAffinityTerm: carriedTerm}}}},
		},
		{
			name:     "required pod anti-affinity",
			affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{sourceTerm, term(nil, nil, nil)}}},
			wantAff:  &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{carriedTerm, nilTerm}}},
		},
		{
			name:     "preferred pod anti-affinity",
			affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{Weight: 100, PodAffinityTerm: sourceTerm}}}},
			wantAff:  &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{Weight: 100, PodAffinityTerm: carriedTerm}}}},
		},
		{
			name:       "topology spread constraints",
			spread:     spread(selector(map[string]string{"app": "web"}, "tier"), "pod-template-hash"),
			wantSpread: spread(selector(map[string]string{carried + "app": "web"}, carried+"tier"), carried+"pod-template-hash"),
		},
		{
			name:       "an empty selector selects every pod still",
			spread:     spread(&metav1.LabelSelector{}),
			wantSpread: spread(&metav1.LabelSelector{}),
		},
		{
			name:       "Flotilla's keys and carried keys are left alone",
			spread:     spread(selector(map[string]string{protocol.ElectLabel: "true", carried + "app": "web"}, protocol.CapacityTypeLabel)),
			wantSpread: spread(selector(map[string]string{protocol.ElectLabel: "true", carried + "app": "web"}, protocol.CapacityTypeLabel)),
		},
		{
			name:   "two keys carried as one are both required",
			spread: spread(selector(map[string]string{"a/b": "1", "a_b": "2"}), "x/y", "x_y"),
			wantSpread: spread(&metav1.LabelSelector{
				MatchLabels:      map[string]string{carried + "a_b": "1"},
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: carried + "a_b", Operator: metav1.LabelSelectorOpIn, Values: []string{"2"}}},
			}, carried+"x_y"),
		},
		{
			name: "a self target", self: true, keep: true,
			affinity:   &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{sourceTerm}}},
			wantAff:    &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{carriedTerm}}},
			spread:     spread(selector(map[string]string{"app": "web"})),
			wantSpread: spread(selector(map[string]string{carried + "app": "web"})),
		},
		{
			name: "kept labels, kept selectors", keep: true,
			affinity:   &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{sourceTerm}}},
			wantAff:    &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{sourceTerm}}},
			spread:     spread(selector(map[string]string{"app": "web"}), "pod-template-hash"),
			wantSpread: spread(selector(map[string]string{"app": "web"}), "pod-template-hash"),
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			src := withPodSelectors(t, "web-1", tt.affinity, tt.spread)
			c, err := Build(src, "c1", "c2", src.Namespace, tt.self, tt.keep)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.wantAff, c.Spec.Affinity); diff != "" {
				t.Errorf("affinity (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantSpread, c.Spec.TopologySpreadConstraints); diff != "" {
				t.Errorf("topology spread constraints (-want +got):\n%s", diff)
			}
		})
	}
}

// TestBuildLeavesTheSourceAlone: the rewrite is the candidate's; neither
// the source pod (whose spec the agent's cache shares between siblings)
// nor what its candidates run change.
func TestBuildLeavesTheSourceAlone(t *testing.T) {
	anti := &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
		LabelSelector: selector(map[string]string{"app": "web"}, "tier"), TopologyKey: "kubernetes.io/hostname", MatchLabelKeys: []string{"pod-template-hash"},
	}}}}
	spread := []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "zone", LabelSelector: selector(map[string]string{"app": "web"})}}
	src := withPodSelectors(t, "web-1", anti, spread)
	before := src.DeepCopy()
	savedBefore, err := sourcespec.Original(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, self := range []bool{false, true} {
		if _, err := Build(src, "c1", "c2", src.Namespace, self, false); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff(before, src); diff != "" {
		t.Errorf("Build changed the source pod (-before +after):\n%s", diff)
	}
	saved, err := sourcespec.Original(src)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(savedBefore, saved); diff != "" {
		t.Errorf("Build changed the decoded saved spec (-before +after):\n%s", diff)
	}
}

// TestAntiAffinitySelectsSiblingCandidates: one replica a node holds in
// the target as in the source. A candidate's anti-affinity on app=web
// selects the candidate of another pod labelled app=web, whether or not
// the target keeps the labels, and selects none of the target's own pods
// labelled app=web unless it does.
func TestAntiAffinitySelectsSiblingCandidates(t *testing.T) {
	anti := &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
		LabelSelector: &metav1.LabelSelector{
			MatchLabels:      map[string]string{"app": "web"},
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"front"}}},
		},
		TopologyKey: "kubernetes.io/hostname",
	}}}}
	spread := []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: selector(map[string]string{"app": "web"})}}
	targetsOwn := labels.Set{"app": "web", "tier": "front"}
	for _, tt := range []struct {
		self, keep       bool
		selectsTargetPod bool
	}{
		{},
		{self: true},
		{keep: true, selectsTargetPod: true},
	} {
		t.Run(fmt.Sprintf("self=%v keep=%v", tt.self, tt.keep), func(t *testing.T) {
			var candidates []*corev1.Pod
			for _, name := range []string{"web-1", "web-2"} {
				src := withPodSelectors(t, name, anti, spread)
				src.Labels["tier"] = "front"
				c, err := Build(src, "c1", "c2", src.Namespace, tt.self, tt.keep)
				if err != nil {
					t.Fatal(err)
				}
				candidates = append(candidates, c)
			}
			first, sibling := candidates[0], labels.Set(candidates[1].Labels)
			selectors := map[string]*metav1.LabelSelector{
				"anti-affinity":   first.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].LabelSelector,
				"topology spread": first.Spec.TopologySpreadConstraints[0].LabelSelector,
			}
			for kind, ls := range selectors {
				sel, err := metav1.LabelSelectorAsSelector(ls)
				if err != nil {
					t.Fatalf("%s: %v", kind, err)
				}
				if !sel.Matches(sibling) {
					t.Errorf("%s %s does not select the sibling candidate %v", kind, sel, sibling)
				}
				if got := sel.Matches(targetsOwn); got != tt.selectsTargetPod {
					t.Errorf("%s %s selects the target's own pod %v: %v, want %v", kind, sel, targetsOwn, got, tt.selectsTargetPod)
				}
			}
		})
	}
}

// selectedKeys are the label keys by which spec selects pods.
func selectedKeys(spec *corev1.PodSpec) []string {
	var keys []string
	ofSelector := func(s *metav1.LabelSelector) {
		if s == nil {
			return
		}
		for k := range s.MatchLabels {
			keys = append(keys, k)
		}
		for _, e := range s.MatchExpressions {
			keys = append(keys, e.Key)
		}
	}
	ofTerm := func(t corev1.PodAffinityTerm) {
		ofSelector(t.LabelSelector)
		keys = append(keys, t.MatchLabelKeys...)
		keys = append(keys, t.MismatchLabelKeys...)
	}
	if a := spec.Affinity; a != nil {
		var required []corev1.PodAffinityTerm
		var preferred []corev1.WeightedPodAffinityTerm
		if a.PodAffinity != nil {
			required = append(required, a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution...)
			preferred = append(preferred, a.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution...)
		}
		if a.PodAntiAffinity != nil {
			required = append(required, a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution...)
			preferred = append(preferred, a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution...)
		}
		for _, t := range required {
			ofTerm(t)
		}
		for _, t := range preferred {
			ofTerm(t.PodAffinityTerm)
		}
	}
	for _, c := range spec.TopologySpreadConstraints {
		ofSelector(c.LabelSelector)
		keys = append(keys, c.MatchLabelKeys...)
	}
	return keys
}
