// Package placementpolicy reads PlacementPolicies as plain values: which
// policy governs a pod (Choose) and what a policy means to the pure
// decisions of pkg/placement (Compile); which targets get no candidate
// before any policy (Prefilter); the plan (Select, then Spread); and where
// a workload's siblings count (Counts, Tally). It holds no client and runs
// no controller, so that the agent and the kubectl plugin judge a pod by
// the same code; pkg/policy reads the policies from the agent's cache and
// reports their status.
package placementpolicy

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// Resolved is the policy that governs a pod, if any, and what kept one
// from governing it.
type Resolved struct {
	// Policy governs the pod; nil when none does.
	Policy *v1alpha1.PlacementPolicy
	// Problem, when set, says why a policy that meant to govern the pod
	// does not (a conflict, a missing policy the pod names): the pod is
	// placed as if no policy selected it, and its owner is told.
	Problem string
}

// Choose picks the policy that governs a pod among its namespace's
// policies: the one the pod names by annotation, else the most specific
// of those whose pod selector matches (the most requirements: matchLabels
// entries plus matchExpressions). Two matching policies equally specific
// are a conflict: neither governs the pod.
func Choose(pod *corev1.Pod, policies []v1alpha1.PlacementPolicy) Resolved {
	if name := pod.Annotations[protocol.PlacementPolicyAnnotation]; name != "" {
		for i := range policies {
			if policies[i].Name == name && policies[i].Namespace == pod.Namespace {
				return Resolved{Policy: &policies[i]}
			}
		}
		return Resolved{Problem: fmt.Sprintf("the pod names PlacementPolicy %s in annotation %s, which does not exist in namespace %s", name, protocol.PlacementPolicyAnnotation, pod.Namespace)}
	}
	var best []*v1alpha1.PlacementPolicy
	bestRank := -1
	for i := range policies {
		p := &policies[i]
		if p.Namespace != pod.Namespace || p.DeletionTimestamp != nil {
			continue
		}
		sel, err := podSelector(p)
		if err != nil || !sel.Matches(labels.Set(pod.Labels)) {
			continue
		}
		switch rank := specificity(p.Spec.PodSelector); {
		case rank > bestRank:
			best, bestRank = []*v1alpha1.PlacementPolicy{p}, rank
		case rank == bestRank:
			best = append(best, p)
		}
	}
	switch len(best) {
	case 0:
		return Resolved{}
	case 1:
		return Resolved{Policy: best[0]}
	}
	names := make([]string, len(best))
	for i, p := range best {
		names[i] = p.Name
	}
	sort.Strings(names)
	return Resolved{Problem: fmt.Sprintf("PlacementPolicies %s select the pod equally specifically; none applies: make one selector more specific, or name the policy in annotation %s",
		strings.Join(names, ", "), protocol.PlacementPolicyAnnotation)}
}

// podSelector is the policy's pod selector; an empty one selects every pod.
func podSelector(p *v1alpha1.PlacementPolicy) (labels.Selector, error) {
	if p.Spec.PodSelector == nil {
		return labels.Everything(), nil
	}
	return metav1.LabelSelectorAsSelector(p.Spec.PodSelector)
}

func specificity(s *metav1.LabelSelector) int {
	if s == nil {
		return 0
	}
	return len(s.MatchLabels) + len(s.MatchExpressions)
}
