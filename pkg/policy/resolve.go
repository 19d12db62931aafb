// Package policy connects PlacementPolicies to the pods they govern: which
// policy a pod falls under (Choose, Resolver), what a policy means to the
// pure decisions of pkg/placement (Compile), and what each policy reports
// in its status (StatusController). The decisions themselves live in
// pkg/placement.
package policy

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// The agent reads policies on every replica (the webhook's split) and
// writes their status on the leader.
// +kubebuilder:rbac:groups=multicluster.flotilla.dev,resources=placementpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=multicluster.flotilla.dev,resources=placementpolicies/status,verbs=get;update;patch

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

// Resolver finds the policy governing a pod from a cache of policies.
type Resolver struct {
	Reader client.Reader
}

// For resolves the policy of pod. A failure to list policies (a cache not
// synced yet) is an error: placing the pod as if unpolicied could break
// what its policy demands.
func (r *Resolver) For(ctx context.Context, pod *corev1.Pod) (Resolved, error) {
	list := &v1alpha1.PlacementPolicyList{}
	if err := r.Reader.List(ctx, list, client.InNamespace(pod.Namespace)); err != nil {
		return Resolved{}, fmt.Errorf("listing the PlacementPolicies of namespace %s: %w", pod.Namespace, err)
	}
	return Choose(pod, list.Items), nil
}

// CapacityTypeFor returns the on-demand/spot split of the policy that
// governs pod, nil when none does (or the policies cannot be read: the
// pod is then split as its workload says, or not at all).
func (r *Resolver) CapacityTypeFor(pod *corev1.Pod) *v1alpha1.CapacityTypeSplit {
	res, err := r.For(context.Background(), pod)
	if err != nil || res.Policy == nil {
		return nil
	}
	return res.Policy.Spec.CapacityType
}
