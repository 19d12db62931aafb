package e2e

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// TestSplitCountsPodsKeptHome: the pods a self target with localFirst
// keeps in their own cluster hold their places in the on-demand/spot split
// like every other pod of the workload. A Deployment with max-on-demand 1
// starts with one pod, kept home on the on-demand node; the agent is
// killed and restarted, so that only what the pods carry tells the
// places; scaled to 3, the new pods go to spot. Were the kept pod not
// counted, its on-demand place would be given out again and two pods
// would run on on-demand nodes.
func TestSplitCountsPodsKeptHome(t *testing.T) {
	t.Parallel()
	onDemand := map[string]string{protocol.DefaultCapacityNodeLabel: protocol.CapacityOnDemand}
	spot := map[string]string{protocol.DefaultCapacityNodeLabel: protocol.CapacitySpot}
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{{Name: "home", Nodes: []sandbox.NodeSpec{
		{Name: "od-1", Labels: onDemand}, {Name: "spot-1", Labels: spot}, {Name: "spot-2", Labels: spot},
	}}}})
	ctx := t.Context()
	home := s.Cluster("home")
	client := home.Client()
	release, err := home.InstallRelease(ctx, sandbox.ReleaseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	createNamespace(t, client, splitNS)
	if err := home.AddTarget(ctx, home); err != nil {
		t.Fatal(err)
	}
	if err := home.SetLocalFirst(ctx, "home", splitNS); err != nil {
		t.Fatal(err)
	}

	dep := splitDeployment("web", 1, "1")
	dep.Spec.Template.Labels = map[string]string{"app": "web", protocol.ElectLabel: "true"}
	if _, err := client.AppsV1().Deployments(splitNS).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kept := func(t *testing.T, want int) {
		t.Helper()
		list, err := client.CoreV1().Pods(splitNS).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, p := range list.Items {
			if p.Labels[protocol.LocalLabel] == "true" && p.Spec.SchedulerName != protocol.SourceSchedulerName {
				n++
			}
		}
		if n != want {
			t.Fatalf("%d of %d pods kept home, want %d: the test is about pods kept home", n, len(list.Items), want)
		}
	}

	t.Run("one pod, kept home on the on-demand node", func(t *testing.T) {
		waitSplit(t, client, "web", 1, 1)
		kept(t, 1)
	})
	t.Run("the agent restarted, scaled to 3: the new pods go to spot", func(t *testing.T) {
		crashAgent(t, release.Agent)
		scaleDeployment(t, client, "web", 3)
		pods := waitSplit(t, client, "web", 3, 1)
		kept(t, 3)
		slots := map[string]int{}
		for _, p := range pods {
			if v, ok := p.Labels[protocol.OnDemandSlotLabel]; ok {
				slots[v]++
			}
		}
		if fmt.Sprint(slots) != "map[0:1]" {
			t.Errorf("on-demand slots %v, want slot 0 once", slots)
		}
	})
}
