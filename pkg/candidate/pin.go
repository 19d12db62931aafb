package candidate

import (
	"encoding/json"

	corev1 "k8s.io/api/core/v1"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// Pin records on a candidate the topology domain the source counted it in
// (the values of keys, in order) and steers its target's scheduler there.
// A key whose constraint filters (hard[i]: DoNotSchedule) becomes a
// required node affinity, added to every term the pod already requires: the
// candidate goes nowhere else. A key whose constraint only scores
// (ScheduleAnyway) becomes a preferred one: the scheduler favours the
// domain, and places the candidate elsewhere when the domain has no room,
// as kube-scheduler places such a pod. A key with an empty value (a domain
// the target's labels name for all its nodes) is not pinned.
func Pin(c *corev1.Pod, keys, values []string, hard []bool) {
	raw, err := json.Marshal(values)
	if err != nil {
		return
	}
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[protocol.DomainAnnotation] = string(raw)
	var required, preferred []corev1.NodeSelectorRequirement
	for i, k := range keys {
		if i >= len(values) || values[i] == "" {
			continue
		}
		r := corev1.NodeSelectorRequirement{Key: k, Operator: corev1.NodeSelectorOpIn, Values: []string{values[i]}}
		if i < len(hard) && hard[i] {
			required = append(required, r)
		} else {
			preferred = append(preferred, r)
		}
	}
	RequireNodeLabels(&c.Spec, required)
	preferNodeLabels(&c.Spec, preferred)
}

// pinWeight is the weight of a preferred pin: the most node affinity
// gives, so that the domain wins over the other scores unless it has no
// room.
const pinWeight = 100

// preferNodeLabels adds one preferred node affinity term of the highest
// weight that asks for every requirement of reqs.
func preferNodeLabels(spec *corev1.PodSpec, reqs []corev1.NodeSelectorRequirement) {
	if len(reqs) == 0 {
		return
	}
	na := nodeAffinityOf(spec)
	na.PreferredDuringSchedulingIgnoredDuringExecution = append(na.PreferredDuringSchedulingIgnoredDuringExecution,
		corev1.PreferredSchedulingTerm{Weight: pinWeight, Preference: corev1.NodeSelectorTerm{MatchExpressions: reqs}})
}

// nodeAffinityOf is the pod's node affinity, made empty if it has none.
func nodeAffinityOf(spec *corev1.PodSpec) *corev1.NodeAffinity {
	if spec.Affinity == nil {
		spec.Affinity = &corev1.Affinity{}
	}
	if spec.Affinity.NodeAffinity == nil {
		spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	return spec.Affinity.NodeAffinity
}

// RequireNodeLabels adds requirements to the pod's required node affinity:
// to each of its terms (they are ORed, so each must carry them), or as the
// one term when it has none.
func RequireNodeLabels(spec *corev1.PodSpec, reqs []corev1.NodeSelectorRequirement) {
	if len(reqs) == 0 {
		return
	}
	na := nodeAffinityOf(spec)
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{}
	}
	terms := na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) == 0 {
		terms = []corev1.NodeSelectorTerm{{}}
	}
	for i := range terms {
		terms[i].MatchExpressions = append(append([]corev1.NodeSelectorRequirement(nil), terms[i].MatchExpressions...), reqs...)
	}
	na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms = terms
}

// PinnedDomain is the domain recorded on a candidate by Pin, nil when
// none (or when a peer made it unreadable).
func PinnedDomain(c *corev1.Pod) []string {
	raw := c.Annotations[protocol.DomainAnnotation]
	if raw == "" {
		return nil
	}
	var values []string
	if json.Unmarshal([]byte(raw), &values) != nil {
		return nil
	}
	return values
}
