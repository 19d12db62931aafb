package candidate

import (
	"encoding/json"

	corev1 "k8s.io/api/core/v1"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// Pin records on a candidate the topology domain the source counted it in
// (the values of keys, in order) and makes its target's scheduler place it
// only on nodes of that domain: each key with a value becomes a required
// node affinity, added to every term the pod already requires. A key with
// an empty value (a domain the target's labels name for all its nodes) is
// not pinned.
func Pin(c *corev1.Pod, keys, values []string) {
	raw, err := json.Marshal(values)
	if err != nil {
		return
	}
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[protocol.DomainAnnotation] = string(raw)
	var reqs []corev1.NodeSelectorRequirement
	for i, k := range keys {
		if i < len(values) && values[i] != "" {
			reqs = append(reqs, corev1.NodeSelectorRequirement{Key: k, Operator: corev1.NodeSelectorOpIn, Values: []string{values[i]}})
		}
	}
	RequireNodeLabels(&c.Spec, reqs)
}

// RequireNodeLabels adds requirements to the pod's required node affinity:
// to each of its terms (they are ORed, so each must carry them), or as the
// one term when it has none.
func RequireNodeLabels(spec *corev1.PodSpec, reqs []corev1.NodeSelectorRequirement) {
	if len(reqs) == 0 {
		return
	}
	if spec.Affinity == nil {
		spec.Affinity = &corev1.Affinity{}
	}
	if spec.Affinity.NodeAffinity == nil {
		spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := spec.Affinity.NodeAffinity
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
