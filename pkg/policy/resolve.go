// Package policy connects PlacementPolicies to the pods they govern in the
// agent: which policy a pod falls under, read from the agent's cache
// (Resolver), and what each policy reports in its status
// (StatusController). Choosing and compiling a policy are pure, in
// pkg/placementpolicy; the decisions themselves live in pkg/placement.
package policy

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/placementpolicy"
)

// The agent reads policies on every replica (the webhook's split) and
// writes their status on the leader.
// +kubebuilder:rbac:groups=multicluster.flotilla.dev,resources=placementpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=multicluster.flotilla.dev,resources=placementpolicies/status,verbs=get;update;patch

// Resolved is placementpolicy.Resolved: the policy that governs a pod,
// if any, and what kept one from governing it.
type Resolved = placementpolicy.Resolved

// Compiled is placementpolicy.Compiled: a policy in the terms of
// pkg/placement.
type Compiled = placementpolicy.Compiled

// Window is placementpolicy.Window: the scoring window of a policy.
type Window = placementpolicy.Window

// Choose is placementpolicy.Choose: the policy that governs a pod among
// its namespace's policies.
func Choose(pod *corev1.Pod, policies []v1alpha1.PlacementPolicy) Resolved {
	return placementpolicy.Choose(pod, policies)
}

// Compile is placementpolicy.Compile: a policy's spec in placement's terms.
func Compile(p *v1alpha1.PlacementPolicy) (*Compiled, error) {
	return placementpolicy.Compile(p)
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
