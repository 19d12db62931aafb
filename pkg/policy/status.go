package policy

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// LocalTarget is the name under which a policy's status counts the pods
// that run on this cluster's own nodes (the on-demand/spot split of a
// single cluster).
const LocalTarget = "(local)"

// StatusController keeps each PlacementPolicy's status: whether its spec
// could be used, how many pods it governs, how many wait, and where the
// others run. It counts from the cache every Resync, not on every pod
// change: the status is for people, and a burst of pods should not cost a
// status write each.
type StatusController struct {
	Client client.Client
	// TargetOf names the target a pod bound to a node runs in (its
	// election's, on that target's virtual node); false for a pod on a
	// node of this cluster.
	TargetOf func(pod *corev1.Pod) (string, bool)
	// TopologyKeys returns the label keys the targets offer a value for
	// (their labels, their virtual nodes' and their nodes' topology); nil
	// skips the check that a spread constraint's key is known.
	TopologyKeys func() map[string]bool
	// Resync is how often a policy's status is counted again.
	Resync time.Duration
}

// SetupWithManager registers the controller; it runs on the leader.
func (s *StatusController) SetupWithManager(mgr ctrl.Manager) error {
	if s.Resync <= 0 {
		s.Resync = 15 * time.Second
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("placementpolicy-status").
		For(&v1alpha1.PlacementPolicy{}).
		Complete(s)
}

// Reconcile counts one policy's pods and writes its status when it changed.
func (s *StatusController) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	p := &v1alpha1.PlacementPolicy{}
	if err := s.Client.Get(ctx, req.NamespacedName, p); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	policies := &v1alpha1.PlacementPolicyList{}
	if err := s.Client.List(ctx, policies, client.InNamespace(p.Namespace)); err != nil {
		return reconcile.Result{}, err
	}
	pods := &corev1.PodList{}
	if err := s.Client.List(ctx, pods, client.InNamespace(p.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return reconcile.Result{}, err
	}
	status := s.count(p, policies.Items, pods.Items)
	status.Conditions = p.Status.Conditions
	if _, err := Compile(p); err != nil {
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: v1alpha1.PlacementPolicyAccepted, Status: metav1.ConditionFalse,
			Reason: v1alpha1.ReasonInvalidSpec, Message: err.Error(), ObservedGeneration: p.Generation})
	} else if unknown := s.unknownKeys(p); len(unknown) > 0 {
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: v1alpha1.PlacementPolicyAccepted, Status: metav1.ConditionTrue,
			Reason: v1alpha1.ReasonUnknownTopologyKey, ObservedGeneration: p.Generation,
			Message: fmt.Sprintf("no target carries topology key %s (in its labels or its nodes'): the policy governs its pods, but spreads nothing by that key until a target does", strings.Join(unknown, ", "))})
	} else {
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: v1alpha1.PlacementPolicyAccepted, Status: metav1.ConditionTrue,
			Reason: v1alpha1.ReasonAccepted, Message: "the policy governs the pods it selects", ObservedGeneration: p.Generation})
	}
	if !equality.Semantic.DeepEqual(p.Status, status) {
		p.Status = status
		if err := s.Client.Status().Update(ctx, p); err != nil && !apierrors.IsConflict(err) {
			return reconcile.Result{}, err
		}
	}
	return reconcile.Result{RequeueAfter: s.Resync}, nil
}

// unknownKeys are the topology keys of p's spread constraints that no
// target offers, in the policy's order; none when there are no targets yet.
func (s *StatusController) unknownKeys(p *v1alpha1.PlacementPolicy) []string {
	if s.TopologyKeys == nil || len(p.Spec.SpreadConstraints) == 0 {
		return nil
	}
	known := s.TopologyKeys()
	if len(known) == 0 {
		return nil
	}
	var out []string
	for _, sc := range p.Spec.SpreadConstraints {
		if !known[sc.TopologyKey] {
			out = append(out, sc.TopologyKey)
		}
	}
	return out
}

// count is the status of policy p among its namespace's policies and pods.
func (s *StatusController) count(p *v1alpha1.PlacementPolicy, policies []v1alpha1.PlacementPolicy, pods []corev1.Pod) v1alpha1.PlacementPolicyStatus {
	status := v1alpha1.PlacementPolicyStatus{ObservedGeneration: p.Generation}
	perTarget := map[string]int32{}
	for i := range pods {
		pod := &pods[i]
		if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		res := Choose(pod, policies)
		if res.Policy == nil || res.Policy.Name != p.Name {
			continue
		}
		status.Pods++
		if pod.Spec.NodeName == "" {
			status.Pending++
			continue
		}
		name := LocalTarget
		if s.TargetOf != nil {
			if t, ok := s.TargetOf(pod); ok {
				name = t
			}
		}
		perTarget[name]++
	}
	for name, n := range perTarget {
		status.Targets = append(status.Targets, v1alpha1.TargetPods{Name: name, Pods: n})
	}
	sort.Slice(status.Targets, func(i, j int) bool { return status.Targets[i].Name < status.Targets[j].Name })
	return status
}
