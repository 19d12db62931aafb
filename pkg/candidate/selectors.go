package candidate

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// carriedLabels are a source pod's labels as its candidate carries them
// when its target does not keep them: each key renamed with
// protocol.CarriedLabelKey, the value as it is. Flotilla's keys are not
// carried. Of two keys carried as one, the first in sorted order wins,
// whatever the map's order.
func carriedLabels(source map[string]string) map[string]string {
	carried := make(map[string]string, len(source))
	for _, k := range slices.Sorted(maps.Keys(source)) {
		ck, ok := protocol.CarriedLabelKey(k)
		if _, taken := carried[ck]; ok && !taken {
			carried[ck] = source[k]
		}
	}
	return carried
}

// selectCarriedLabels rewrites the selectors of pods in spec, which select
// the source's siblings by their labels, to select the keys under which
// candidates carry those labels (carriedLabels): the (anti-)affinity
// terms' and topology spread constraints' label selectors, matchLabelKeys
// and mismatchLabelKeys. The (anti-)affinity terms are confined to the
// source's own candidates in the candidate's namespace: their namespaces
// and namespace selector are dropped, and their label selector also
// requires the source-cluster label of sourceCluster. A candidate's terms
// act on the pods that come to its node after it too (a required
// anti-affinity keeps them off), and a selector that matches by the
// absence of a key (DoesNotExist, NotIn, mismatchLabelKeys) would match
// the target's own pods, in any namespace a namespace selector reached;
// confined, it matches nothing but the source's siblings, whose labels no
// other source may write (the invitation's admission policy refuses what
// is not so confined). spec is changed in place: it is the caller's copy.
func selectCarriedLabels(spec *corev1.PodSpec, sourceCluster string) {
	if a := spec.Affinity; a != nil {
		if a.PodAffinity != nil {
			selectCarriedInTerms(a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution, a.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution, sourceCluster)
		}
		if a.PodAntiAffinity != nil {
			selectCarriedInTerms(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution, a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution, sourceCluster)
		}
	}
	for i := range spec.TopologySpreadConstraints {
		c := &spec.TopologySpreadConstraints[i]
		c.LabelSelector = carriedSelector(c.LabelSelector)
		c.MatchLabelKeys = carriedKeys(c.MatchLabelKeys)
	}
}

func selectCarriedInTerms(required []corev1.PodAffinityTerm, preferred []corev1.WeightedPodAffinityTerm, sourceCluster string) {
	for i := range required {
		selectCarriedInTerm(&required[i], sourceCluster)
	}
	for i := range preferred {
		selectCarriedInTerm(&preferred[i].PodAffinityTerm, sourceCluster)
	}
}

func selectCarriedInTerm(term *corev1.PodAffinityTerm, sourceCluster string) {
	term.LabelSelector = carriedSelector(term.LabelSelector)
	term.MatchLabelKeys = carriedKeys(term.MatchLabelKeys)
	term.MismatchLabelKeys = carriedKeys(term.MismatchLabelKeys)
	term.Namespaces, term.NamespaceSelector = nil, nil
	if term.LabelSelector != nil {
		// A nil selector matches no pod, and stays so.
		term.LabelSelector.MatchExpressions = append(term.LabelSelector.MatchExpressions, OfSource(sourceCluster))
	}
}

// OfSource is the requirement every carried (anti-)affinity term of a
// candidate holds: the pods it matches are candidates of sourceCluster.
func OfSource(sourceCluster string) metav1.LabelSelectorRequirement {
	return metav1.LabelSelectorRequirement{Key: protocol.SourceClusterLabel, Operator: metav1.LabelSelectorOpIn, Values: []string{sourceCluster}}
}

// carriedSelector is s selecting carried keys. A requirement of matchLabels
// whose carried key another one of them has already taken becomes the
// matchExpression it stands for (key In [value]), so that the selector
// still requires both.
func carriedSelector(s *metav1.LabelSelector) *metav1.LabelSelector {
	if s == nil {
		return nil
	}
	out := &metav1.LabelSelector{}
	if s.MatchLabels != nil {
		out.MatchLabels = make(map[string]string, len(s.MatchLabels))
	}
	var moved []metav1.LabelSelectorRequirement
	for _, k := range slices.Sorted(maps.Keys(s.MatchLabels)) {
		ck, _ := protocol.CarriedLabelKey(k)
		if _, taken := out.MatchLabels[ck]; taken {
			moved = append(moved, metav1.LabelSelectorRequirement{Key: ck, Operator: metav1.LabelSelectorOpIn, Values: []string{s.MatchLabels[k]}})
			continue
		}
		out.MatchLabels[ck] = s.MatchLabels[k]
	}
	if s.MatchExpressions != nil || moved != nil {
		out.MatchExpressions = make([]metav1.LabelSelectorRequirement, 0, len(s.MatchExpressions)+len(moved))
	}
	for _, e := range s.MatchExpressions {
		e.Key, _ = protocol.CarriedLabelKey(e.Key)
		e.Values = slices.Clone(e.Values)
		out.MatchExpressions = append(out.MatchExpressions, e)
	}
	out.MatchExpressions = append(out.MatchExpressions, moved...)
	return out
}

// carriedKeys are keys as carried, each once: the API server merges every
// key of matchLabelKeys into the selector, and refuses a key merged twice.
func carriedKeys(keys []string) []string {
	if keys == nil {
		return nil
	}
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		ck, _ := protocol.CarriedLabelKey(k)
		if !slices.Contains(out, ck) {
			out = append(out, ck)
		}
	}
	return out
}
