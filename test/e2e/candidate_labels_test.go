package e2e

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// TestCandidatesSelectTheirSiblings checks that a candidate, which
// carries its source pod's labels renamed under
// label.multicluster.flotilla.dev/, keeps the pod (anti-)affinity of its
// workload in the target: its selectors are rewritten to select its
// sibling candidates, as kube-scheduler would have selected the source's
// pods in one cluster.
func TestCandidatesSelectTheirSiblings(t *testing.T) {
	t.Parallel()
	src, tgt := agentsOnSourceAndTarget(t, sandbox.NodeSpec{Name: "roomy", CPU: "8"}, sandbox.NodeSpec{Name: "busy", CPU: "8"})
	ctx := t.Context()
	invite(t, src, tgt)
	tgtPods := tgt.Client().CoreV1().Pods(placementNS)

	// Half of busy is taken by a pod of the target's own, so that both
	// replicas fit each node but kube-scheduler's scores put both on
	// roomy unless their anti-affinity keeps them apart.
	filler := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "filler", Namespace: "default"},
		Spec: corev1.PodSpec{NodeName: "busy", Containers: []corev1.Container{{
			Name: "app", Image: "registry.example/app:1",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")}},
		}}},
	}
	if _, err := tgt.Client().CoreV1().Pods("default").Create(ctx, filler, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	t.Run("required anti-affinity puts two replicas on two nodes of one target", func(t *testing.T) {
		d := optedInDeployment("apart", 2, "500m")
		d.Spec.Template.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "apart"}},
				TopologyKey:   corev1.LabelHostname,
			}},
		}}
		if _, err := src.Client().AppsV1().Deployments(placementNS).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitSourcePods(t, src.Client(), "app=apart", 2, func(p *corev1.Pod) bool { return p.Spec.NodeName == "flotilla-tgt" })
		carried, _ := protocol.CarriedLabelKey("app")
		selector := protocol.CandidateLabel + "=true," + carried + "=apart"
		var placed []string
		waitFor(t, 60*time.Second, "two delegates of apart, on two nodes", func() (bool, string) {
			list, err := tgtPods.List(ctx, metav1.ListOptions{LabelSelector: selector})
			if err != nil {
				return false, err.Error()
			}
			nodes := map[string]bool{}
			var seen []string
			for _, p := range list.Items {
				if p.Spec.NodeName != "" && p.DeletionTimestamp == nil {
					nodes[p.Spec.NodeName] = true
					seen = append(seen, p.Name+" on "+p.Spec.NodeName)
				}
			}
			placed = seen
			return len(seen) == 2 && len(nodes) == 2, fmt.Sprintf("%d candidates selected by %s, bound: %v", len(list.Items), selector, seen)
		})
		t.Logf("delegates: %v", placed)
	})

	t.Run("the target's own selectors of app=apart select no delegate", func(t *testing.T) {
		list, err := tgtPods.List(ctx, metav1.ListOptions{LabelSelector: "app=apart"})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != 0 {
			t.Errorf("app=apart selects %d pods of the target, want none", len(list.Items))
		}
	})
}
