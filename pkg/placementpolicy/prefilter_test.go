package placementpolicy

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/placement"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/sourcespec"
)

const capacityKey = protocol.DefaultCapacityNodeLabel

// standing is a target that publishes a summary: its nodes carry
// capacities of capacityKey, and the most cpu free on one node is
// largestCPU ("" when its summary does not say).
func standing(name, largestCPU string, capacities ...string) Standing {
	cl := placement.Cluster{Name: name, Topology: map[string][]string{capacityKey: capacities}}
	if largestCPU != "" {
		cl.LargestFree = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(largestCPU), corev1.ResourcePods: resource.MustParse("10")}
	}
	return Standing{Cluster: cl}
}

// tainted is s with its virtual node tainted dedicated=gpu:NoSchedule.
func tainted(s Standing) Standing {
	s.Taints = []corev1.Taint{{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}}
	return s
}

func heldBack(s Standing) Standing {
	s.HeldBack = "5 delegates of this cluster's pods vanished in the target"
	return s
}

// TestPrefilter: which targets get no candidate whatever the policy, and
// the reason each is given, in the order the agent applies the rules.
func TestPrefilter(t *testing.T) {
	toSpot := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
		{Key: capacityKey, Operator: corev1.NodeSelectorOpIn, Values: []string{protocol.CapacitySpot}},
	}}}}
	fourCPU := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")}
	for _, tc := range []struct {
		name    string
		targets []Standing
		needs   Needs
		// excluded are the reasons, per target left out.
		excluded map[string]string
	}{
		{
			name:    "nothing asked, nothing held back: every target is kept",
			targets: []Standing{standing("a", "8", protocol.CapacityOnDemand), standing("b", "", protocol.CapacitySpot)},
		},
		{
			name:     "a target held back is left out, for the reason it is held back",
			targets:  []Standing{heldBack(standing("a", "8", protocol.CapacitySpot)), standing("b", "8", protocol.CapacitySpot)},
			excluded: map[string]string{"a": "5 delegates of this cluster's pods vanished in the target"},
		},
		{
			name:     "held back, with room to spare, alone: still left out",
			targets:  []Standing{heldBack(standing("a", "8", protocol.CapacitySpot))},
			needs:    Needs{Requests: fourCPU},
			excluded: map[string]string{"a": "5 delegates of this cluster's pods vanished in the target"},
		},
		{
			name:     "no node meets the required node affinity",
			targets:  []Standing{standing("od", "", protocol.CapacityOnDemand), standing("spot", "", protocol.CapacitySpot, protocol.CapacityOnDemand)},
			needs:    Needs{Required: toSpot},
			excluded: map[string]string{"od": "no node with " + capacityKey + " in [spot] (its nodes have on-demand)"},
		},
		{
			name:    "a target that publishes no summary is always asked",
			targets: []Standing{{Cluster: placement.Cluster{Name: "self"}}, standing("big", "8", protocol.CapacitySpot)},
			needs:   Needs{Requests: fourCPU, Required: toSpot},
		},
		{
			name:     "too small while another may have room",
			targets:  []Standing{standing("small", "2", protocol.CapacitySpot), standing("big", "8", protocol.CapacitySpot)},
			needs:    Needs{Requests: fourCPU},
			excluded: map[string]string{"small": "no node has 4 cpu free (the most on one node: 2)"},
		},
		{
			name:    "none has room: each keeps its chance",
			targets: []Standing{standing("small", "2", protocol.CapacitySpot), standing("smaller", "1", protocol.CapacitySpot)},
			needs:   Needs{Requests: fourCPU},
		},
		{
			// The room is weighed among the targets that may run the pod
			// and take new pods: a roomy target held back, or whose nodes
			// are all on-demand, leaves the small one its chance.
			name: "room is weighed among the targets held back by nothing else",
			targets: []Standing{
				standing("small", "2", protocol.CapacitySpot),
				heldBack(standing("roomy-held", "8", protocol.CapacitySpot)),
				standing("roomy-on-demand", "8", protocol.CapacityOnDemand),
			},
			needs: Needs{Requests: fourCPU, Required: toSpot},
			excluded: map[string]string{
				"roomy-held":      "5 delegates of this cluster's pods vanished in the target",
				"roomy-on-demand": "no node with " + capacityKey + " in [spot] (its nodes have on-demand)",
			},
		},
		{
			name:     "a taint the pod does not tolerate leaves the target out",
			targets:  []Standing{tainted(standing("gpu", "8", protocol.CapacitySpot)), standing("b", "8", protocol.CapacitySpot)},
			excluded: map[string]string{"gpu": "its virtual node has the taint dedicated=gpu:NoSchedule, which the pod does not tolerate"},
		},
		{
			name:    "a taint the pod tolerates does not",
			targets: []Standing{tainted(standing("gpu", "8", protocol.CapacitySpot)), standing("b", "8", protocol.CapacitySpot)},
			needs:   Needs{Tolerations: []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "gpu", Effect: corev1.TaintEffectNoSchedule}}},
		},
		{
			name:     "tolerating another value of the key is not tolerating the taint",
			targets:  []Standing{tainted(standing("gpu", "8", protocol.CapacitySpot))},
			needs:    Needs{Tolerations: []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "cpu"}}},
			excluded: map[string]string{"gpu": "its virtual node has the taint dedicated=gpu:NoSchedule, which the pod does not tolerate"},
		},
		{
			name:     "held back before unfit: one reason, the first",
			targets:  []Standing{heldBack(standing("a", "", protocol.CapacityOnDemand)), standing("b", "", protocol.CapacitySpot)},
			needs:    Needs{Required: toSpot},
			excluded: map[string]string{"a": "5 delegates of this cluster's pods vanished in the target"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Prefilter(tc.targets, tc.needs)
			if !maps.Equal(got, tc.excluded) {
				t.Errorf("excluded %v, want %v", got, tc.excluded)
			}
		})
	}
}

// TestOperatorTaints: of a virtual node's taints, those that keep pods off
// (NoSchedule, NoExecute) count, but the virtual node's own, which every
// source pod tolerates, and those kube-controller-manager sets from its
// conditions (a virtual node just registered is not-ready for a moment).
func TestOperatorTaints(t *testing.T) {
	node := &corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{
		{Key: protocol.VirtualNodeTaintKey, Value: protocol.VirtualNodeTaintValue, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute},
		{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule},
		{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule},
		{Key: "maintenance", Effect: corev1.TaintEffectNoExecute},
		{Key: "soft", Effect: corev1.TaintEffectPreferNoSchedule},
	}}}
	var keys []string
	for _, taint := range OperatorTaints(node) {
		keys = append(keys, taint.Key)
	}
	if want := []string{"dedicated", "maintenance"}; !slices.Equal(keys, want) {
		t.Errorf("operator taints %v, want %v", keys, want)
	}
}

// TestNeedsOf: a source pod's needs are those of the spec its candidates
// run, not of its own spec; a pod without one needs nothing.
func TestNeedsOf(t *testing.T) {
	saved := corev1.PodSpec{
		NodeSelector: map[string]string{"disk": "ssd"},
		Containers: []corev1.Container{{Name: "app", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")},
		}}},
		Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
				{Key: capacityKey, Operator: corev1.NodeSelectorOpIn, Values: []string{protocol.CapacitySpot}},
			}}},
		}}},
	}
	raw, err := json.Marshal(saved)
	if err != nil {
		t.Fatal(err)
	}
	// Its own spec asks for a little cpu and nothing of where it runs.
	own := corev1.PodSpec{SchedulerName: protocol.SourceSchedulerName, Containers: []corev1.Container{{Name: "app", Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
	}}}}
	withSpec := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{protocol.SourceSpecAnnotation: string(raw)}}, Spec: own}
	got := NeedsOf(withSpec)
	want := Needs{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}, NodeSelector: saved.NodeSelector, Required: saved.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution}
	if !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("needs %+v, want %+v", got, want)
	}

	fields, err := sourcespec.FieldsOf(&corev1.PodSpec{SchedulerName: "default-scheduler"}).Encode()
	if err != nil {
		t.Fatal(err)
	}
	withFields := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{protocol.OriginalFieldsAnnotation: fields}}, Spec: own}
	if got := NeedsOf(withFields); got.Requests.Cpu().String() != "100m" {
		t.Errorf("with original fields, its own containers' requests: cpu %s, want 100m", got.Requests.Cpu())
	}

	if got := NeedsOf(&corev1.Pod{Spec: own}); !equality.Semantic.DeepEqual(got, Needs{}) {
		t.Errorf("no saved spec: needs %+v, want none", got)
	}
}

// TestClusterOf: what a target's summary tells placement: the values of
// the nodes that take pods, every combination (open or not), the most
// free on one node; a target without a summary has labels only.
func TestClusterOf(t *testing.T) {
	s := &v1alpha1.ClusterSummaryStatus{
		LargestFree: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")},
		Topology: []v1alpha1.TopologySummary{{Key: zoneKey, Values: []v1alpha1.TopologyValue{
			{Value: "a", Nodes: 2}, {Value: "b", Nodes: 0},
		}}},
		Domains: []v1alpha1.TopologyDomain{
			{Values: map[string]string{zoneKey: "a"}, Nodes: 2},
			{Values: map[string]string{zoneKey: "b"}, Nodes: 0},
		},
	}
	labels := map[string]string{"tier": "gold"}
	got := ClusterOf("t", labels, s)
	want := placement.Cluster{
		Name: "t", Labels: labels, LargestFree: s.LargestFree,
		Topology: map[string][]string{zoneKey: {"a"}},
		Combinations: []placement.Combination{
			{Values: map[string]string{zoneKey: "a"}, Open: true},
			{Values: map[string]string{zoneKey: "b"}},
		},
	}
	if !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("cluster %+v, want %+v", got, want)
	}
	if got := ClusterOf("self", labels, nil); !equality.Semantic.DeepEqual(got, placement.Cluster{Name: "self", Labels: labels}) {
		t.Errorf("no summary: %+v", got)
	}
}
