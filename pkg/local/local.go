// Package local owns one choice the source's webhook makes at admission:
// whether an opted-in pod stays in its own cluster as an ordinary pod of
// that cluster's scheduler, with no candidate anywhere. It does when a self
// target with localFirst (a ClusterTarget, or a Target of the pod's
// namespace) is there, no PlacementPolicy that says where the pod may go
// governs it, and a node of the cluster has room for it (View, Fits).
// Every other opted-in pod becomes a source pod and goes through the
// targets. A pod kept here costs its cluster what a plain pod costs, and the
// webhook's call; a pod sent through a target costs a source pod, its
// candidates and a delegate.
package local

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/gang"
	"github.com/flotilla-dev/flotilla/pkg/policy"
)

// The webhook reads the targets on every replica.
// +kubebuilder:rbac:groups=multicluster.flotilla.dev,resources=clustertargets;targets,verbs=get;list;watch

// Keeper makes the choice for the webhook.
type Keeper struct {
	// Reader lists ClusterTargets and Targets (the manager's cache).
	Reader client.Reader
	// Policies tells which PlacementPolicy governs a pod.
	Policies *policy.Resolver
	// View is the cluster's room.
	View *View
}

// Keep reports whether pod stays in this cluster, and why, and when it
// does and dryRun is false, holds its room until the view sees it. An error
// reading the targets or policies keeps nothing: the pod goes through the
// targets, as it would without localFirst.
func (k *Keeper) Keep(ctx context.Context, pod *corev1.Pod, dryRun bool) (Verdict, error) {
	first, err := k.localFirst(ctx, pod.Namespace)
	if err != nil || !first {
		return Verdict{Reason: "no self target with localFirst"}, err
	}
	if spec, ok, err := gang.Of(pod); ok && (err == nil || errors.Is(err, gang.ErrNoMinMember)) {
		// Kept here one by one, a gang's members would escape its all or
		// nothing: they go through the targets, this cluster's self
		// target among them.
		return Verdict{Reason: fmt.Sprintf("a member of pod group %s, placed all or nothing through the targets", spec.Name)}, nil
	}
	k.View.Want()
	if k.Policies != nil {
		res, err := k.Policies.For(ctx, pod)
		if err != nil {
			return Verdict{}, err
		}
		if why := placesPods(res.Policy); why != "" {
			return Verdict{Reason: fmt.Sprintf("PlacementPolicy %s %s", res.Policy.Name, why)}, nil
		}
	}
	return k.View.Claim(pod, !dryRun), nil
}

// placesPods says how a policy decides where its pods go, which a pod kept
// here would escape; empty when it does not (it only weighs the targets or
// splits on-demand and spot, which hold here too).
func placesPods(p *v1alpha1.PlacementPolicy) string {
	switch {
	case p == nil:
		return ""
	case p.Spec.ClusterSelector != nil:
		return "selects clusters"
	case p.Spec.ClusterAffinity != nil:
		return "has a cluster affinity"
	case len(p.Spec.SpreadConstraints) > 0:
		return "spreads its pods across clusters"
	}
	return ""
}

// localFirst reports whether a self target with localFirst covers the
// namespace: a ClusterTarget, or a Target in the namespace, that is not
// being deleted. Namespace "" looks at the Targets of every namespace.
func (k *Keeper) localFirst(ctx context.Context, namespace string) (bool, error) {
	// Read only, at every admission: the cache's objects need no copy.
	cts := &v1alpha1.ClusterTargetList{}
	if err := k.Reader.List(ctx, cts, client.UnsafeDisableDeepCopy); err != nil {
		return false, fmt.Errorf("listing ClusterTargets: %w", err)
	}
	for i := range cts.Items {
		if keeps(cts.Items[i].DeletionTimestamp == nil, cts.Items[i].Spec.TargetCommon) {
			return true, nil
		}
	}
	ts := &v1alpha1.TargetList{}
	if err := k.Reader.List(ctx, ts, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
		return false, fmt.Errorf("listing the Targets of namespace %q: %w", namespace, err)
	}
	for i := range ts.Items {
		if keeps(ts.Items[i].DeletionTimestamp == nil, ts.Items[i].Spec.TargetCommon) {
			return true, nil
		}
	}
	return false, nil
}

func keeps(live bool, spec v1alpha1.TargetCommon) bool {
	return live && spec.Self && spec.LocalFirst
}
