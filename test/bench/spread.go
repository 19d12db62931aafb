package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

const (
	regionKey = "topology.kubernetes.io/region"
	zoneKey   = "topology.kubernetes.io/zone"

	// The ReplicaSets of the -spread runs, one workload each, and the
	// policy that governs the first one's pods.
	spreadWorkload   = "spread"
	noPolicyWorkload = "nopolicy"
	spreadPolicy     = "spread"
)

// place is where a target is: its region and zone.
type place struct{ Region, Zone string }

// topology puts K targets in two regions (one if K is 1), each target a
// zone of its own: t1..t3 in r1 (zones r1-a..r1-c) and t4..t6 in r2 for
// K=6. Every node of a target, and its copies in the baseline cluster,
// carry the target's region and zone.
func topology(targets int) map[string]place {
	regions := min(2, targets)
	perRegion := (targets + regions - 1) / regions
	out := map[string]place{}
	for k := range targets {
		r, z := k/perRegion, k%perRegion
		out[fmt.Sprintf("t%d", k+1)] = place{Region: fmt.Sprintf("r%d", r+1), Zone: fmt.Sprintf("r%d-%c", r+1, 'a'+z)}
	}
	return out
}

// labelTargets gives each ClusterTarget of src its region and zone, as an
// operator would, and waits until the virtual nodes carry them.
func labelTargets(ctx context.Context, src *sandbox.Cluster, where map[string]place) error {
	cr := src.CRClient()
	for name, p := range where {
		patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"labels": map[string]string{regionKey: p.Region, zoneKey: p.Zone}}})
		if err := cr.Patch(ctx, &v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: name}}, client.RawPatch(types.MergePatchType, patch)); err != nil {
			return fmt.Errorf("labelling ClusterTarget %s: %w", name, err)
		}
	}
	kube := src.Client()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		for name, p := range where {
			n, err := kube.CoreV1().Nodes().Get(ctx, protocol.VirtualNodeName("", name), metav1.GetOptions{})
			if err != nil {
				last = err.Error()
				return false, nil
			}
			if n.Labels[regionKey] != p.Region || n.Labels[zoneKey] != p.Zone {
				last = fmt.Sprintf("virtual node %s has region %q, zone %q", n.Name, n.Labels[regionKey], n.Labels[zoneKey])
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the virtual nodes to carry their target's region and zone: %s: %w", last, err)
	}
	return nil
}

// spreadConstraints spread by region, then zone within region, maxSkew 1,
// when unsatisfiable as -spread-when says. DoNotSchedule is the default:
// without a scoring window the agent elects the first reservation a policy
// allows, so ScheduleAnyway only prefers among the reservations in hand at
// that moment and the skew is no guarantee the report can check. Under
// DoNotSchedule every election must count the siblings elected before it,
// which is what the workload's lock serializes.
func spreadConstraints(when string) []v1alpha1.SpreadConstraint {
	return []v1alpha1.SpreadConstraint{
		{TopologyKey: regionKey, MaxSkew: 1, WhenUnsatisfiable: when},
		{TopologyKey: zoneKey, MaxSkew: 1, WhenUnsatisfiable: when},
	}
}

// createSpreadPolicy makes the PlacementPolicy that spreads the spread
// workload's pods, and waits until the agent has accepted it, so that
// no pod of the run is placed before the agent knows its policy.
func createSpreadPolicy(ctx context.Context, cfg config, src *sandbox.Cluster) error {
	cr := src.CRClient()
	p := &v1alpha1.PlacementPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: spreadPolicy, Namespace: namespace},
		Spec: v1alpha1.PlacementPolicySpec{
			PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": spreadWorkload}},
			SpreadConstraints: spreadConstraints(cfg.SpreadWhen),
		},
	}
	if err := cr.Create(ctx, p); err != nil {
		return fmt.Errorf("creating PlacementPolicy %s: %w", p.Name, err)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		got := &v1alpha1.PlacementPolicy{}
		if err := cr.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
			return false, nil
		}
		return meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.PlacementPolicyAccepted), nil
	})
	if err != nil {
		return fmt.Errorf("PlacementPolicy %s not Accepted by the agent: %w", p.Name, err)
	}
	return nil
}

// benchReplicaSet makes cfg.Pods pods of one workload.
func benchReplicaSet(shape podShape, cfg config, labels map[string]string) *appsv1.ReplicaSet {
	spec := corev1.PodSpec{Containers: []corev1.Container{{
		Name:      "app",
		Image:     "registry.example/bench:1",
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cfg.CPU)}},
	}}}
	if shape.topologySpread {
		for _, c := range spreadConstraints(cfg.SpreadWhen) {
			spec.TopologySpreadConstraints = append(spec.TopologySpreadConstraints, corev1.TopologySpreadConstraint{
				MaxSkew:           c.MaxSkew,
				TopologyKey:       c.TopologyKey,
				WhenUnsatisfiable: corev1.UnsatisfiableConstraintAction(c.WhenUnsatisfiable),
				LabelSelector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": shape.replicaSet}},
			})
		}
	}
	return &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: shape.replicaSet, Labels: map[string]string{"bench": "true"}},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: ptr.To(int32(cfg.Pods)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": shape.replicaSet}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec},
		},
	}
}

// removeWorkload deletes a ReplicaSet of src and waits until none of its
// pods is left in src and no candidate or delegate in any target, so that
// the next run starts with nothing of this one in flight.
func removeWorkload(ctx context.Context, cfg config, src *sandbox.Cluster, targets []*sandbox.Cluster, name string) error {
	kube := src.Client()
	err := kube.AppsV1().ReplicaSets(namespace).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
	if err != nil {
		return fmt.Errorf("deleting ReplicaSet %s: %w", name, err)
	}
	var last string
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, cfg.Timeout, true, func(context.Context) (bool, error) {
		pods, err := kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		if n := len(pods.Items); n > 0 {
			last = fmt.Sprintf("%d source pods left", n)
			return false, nil
		}
		for _, t := range targets {
			cands, err := t.Client().CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: protocol.CandidateLabel + "=true"})
			if err != nil {
				last = err.Error()
				return false, nil
			}
			if n := len(cands.Items); n > 0 {
				last = fmt.Sprintf("%d candidates left in %s", n, t.Name)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the pods of %s to be gone everywhere: %s: %w", name, last, err)
	}
	return nil
}

// Spread is what the -spread runs add to a report: the same workload
// placed by Flotilla without a policy, and where each run's pods ended.
type Spread struct {
	// NoPolicy is the Flotilla run of the same ReplicaSet without a
	// PlacementPolicy; the report's Flotilla run is the one with it.
	NoPolicy *Run `json:"noPolicy"`
	// PolicyFirst says which Flotilla run came first.
	PolicyFirst bool `json:"policyFirst"`
	// Places are the targets' regions and zones.
	Places map[string]place `json:"places"`
}

// zoneCounts counts a run's pods by zone: a node flotilla-<target> is in
// its target's zone, a baseline node t<k>-n<m> in target t<k>'s.
func zoneCounts(r *Run, where map[string]place) map[string]int {
	out := map[string]int{}
	for node, n := range r.PodsByNode {
		t := strings.TrimPrefix(node, "flotilla-")
		if i := strings.Index(t, "-n"); !strings.HasPrefix(node, "flotilla-") && i > 0 {
			t = t[:i]
		}
		zone := "?"
		if p, ok := where[t]; ok {
			zone = p.Zone
		}
		out[zone] += n
	}
	return out
}

// zoneText renders counts by name as "r1-a 34, r1-b 33, ..." in name order.
func zoneText(counts map[string]int) string { return keyedText(counts, strconv.Itoa) }

// keyedText renders values by name as "name value, ..." in name order.
func keyedText[V any](values map[string]V, text func(V) string) string {
	parts := make([]string, 0, len(values))
	for _, k := range slices.Sorted(maps.Keys(values)) {
		parts = append(parts, k+" "+text(values[k]))
	}
	return strings.Join(parts, ", ")
}
