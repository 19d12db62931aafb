package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/cli"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

const (
	regionKey = "topology.kubernetes.io/region"
	zoneKey   = "topology.kubernetes.io/zone"
)

// policyTopology is where each target of TestPlacementPolicy is: two
// regions of two zones each.
var policyTopology = map[string][2]string{
	"c1": {"us-east", "us-east-1a"},
	"c2": {"us-east", "us-east-1b"},
	"c3": {"us-west", "us-west-1a"},
	"c4": {"us-west", "us-west-1b"},
}

// TestPlacementPolicy spreads workloads over four targets in two regions
// and four zones, under PlacementPolicies of the source cluster c1 (its own
// target too). c4 has room for two one-CPU pods only.
func TestPlacementPolicy(t *testing.T) {
	t.Parallel()
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{
		{Name: "c1", Nodes: []sandbox.NodeSpec{{CPU: "16"}}},
		{Name: "c2", Nodes: []sandbox.NodeSpec{{CPU: "16"}}},
		{Name: "c3", Nodes: []sandbox.NodeSpec{{CPU: "16"}}},
		{Name: "c4", Nodes: []sandbox.NodeSpec{{CPU: "2"}}},
	}})
	ctx := t.Context()
	for _, c := range s.Clusters {
		createNamespace(t, c.Client(), placementNS)
	}
	c1 := s.Cluster("c1")
	if _, err := sandbox.StartAgent(ctx, c1, s.Clusters); err != nil {
		t.Fatal(err)
	}
	cr := c1.CRClient()
	for name, where := range policyTopology {
		labelTarget(t, cr, &v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: name}}, map[string]string{regionKey: where[0], zoneKey: where[1]})
	}
	kube := c1.Client()
	waitFor(t, 60*time.Second, "virtual nodes carry their target's region and zone", func() (bool, string) {
		for name, where := range policyTopology {
			n, err := kube.CoreV1().Nodes().Get(ctx, protocol.VirtualNodeName("", name), metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if n.Labels[regionKey] != where[0] || n.Labels[zoneKey] != where[1] {
				return false, fmt.Sprintf("%s has %v", n.Name, n.Labels)
			}
		}
		for name := range policyTopology {
			if err := c1.WaitTargetReady(ctx, name, 30*time.Second); err != nil {
				return false, err.Error()
			}
		}
		return true, ""
	})

	t.Run("region then zone: 8 replicas end 4/4 per region and 2/2/2/2 per zone", func(t *testing.T) {
		createPolicy(t, cr, "spread", map[string]string{"app": "spread"}, []v1alpha1.SpreadConstraint{
			{TopologyKey: regionKey, MaxSkew: 1, WhenUnsatisfiable: v1alpha1.DoNotSchedule},
			{TopologyKey: zoneKey, MaxSkew: 1, WhenUnsatisfiable: v1alpha1.DoNotSchedule},
		})
		if _, err := kube.AppsV1().Deployments(placementNS).Create(ctx, optedInDeployment("spread", 8, "500m"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pods := waitSourcePods(t, kube, "app=spread", 8, func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodRunning && strings.HasPrefix(p.Spec.NodeName, "flotilla-")
		})
		perZone, perRegion := map[string]int{}, map[string]int{}
		for _, p := range pods {
			where := policyTopology[strings.TrimPrefix(p.Spec.NodeName, "flotilla-")]
			perRegion[where[0]]++
			perZone[where[1]]++
		}
		if perRegion["us-east"] != 4 || perRegion["us-west"] != 4 {
			t.Errorf("per region %v, want 4/4", perRegion)
		}
		for _, where := range policyTopology {
			if perZone[where[1]] != 2 {
				t.Errorf("per zone %v, want 2 in each", perZone)
				break
			}
		}
		waitFor(t, 60*time.Second, "the policy's status counts its 8 pods, 2 in each target", func() (bool, string) {
			p := &v1alpha1.PlacementPolicy{}
			if err := cr.Get(ctx, client.ObjectKey{Namespace: placementNS, Name: "spread"}, p); err != nil {
				return false, err.Error()
			}
			if p.Status.Pods != 8 || p.Status.Pending != 0 || len(p.Status.Targets) != 4 {
				return false, fmt.Sprintf("%+v", p.Status)
			}
			for _, tp := range p.Status.Targets {
				if tp.Pods != 2 {
					return false, fmt.Sprintf("%+v", p.Status)
				}
			}
			return true, ""
		})
	})

	t.Run("a full zone under DoNotSchedule leaves the right number Pending, saying why", func(t *testing.T) {
		// c4 (us-west-1b) has room for one more one-CPU pod: with zone
		// maxSkew 1, each other zone takes two, and the eighth waits.
		createPolicy(t, cr, "tight", map[string]string{"app": "tight"}, []v1alpha1.SpreadConstraint{
			{TopologyKey: zoneKey, MaxSkew: 1, WhenUnsatisfiable: v1alpha1.DoNotSchedule},
		})
		if _, err := kube.AppsV1().Deployments(placementNS).Create(ctx, optedInDeployment("tight", 8, "1"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 120*time.Second, "7 tight pods running, two in each zone but one in us-west-1b, and 1 pending with the reason", func() (bool, string) {
			list, err := kube.CoreV1().Pods(placementNS).List(ctx, metav1.ListOptions{LabelSelector: "app=tight,!" + protocol.CandidateLabel})
			if err != nil {
				return false, err.Error()
			}
			running, zones, pending, explained := 0, map[string]int{}, 0, 0
			for _, p := range list.Items {
				switch {
				case p.Spec.NodeName != "":
					running++
					zones[policyTopology[strings.TrimPrefix(p.Spec.NodeName, "flotilla-")][1]]++
				default:
					pending++
					if saysSkew(ctx, kube, &p) {
						explained++
					}
				}
			}
			msg := fmt.Sprintf("running %d %v, pending %d (%d explained)", running, zones, pending, explained)
			ok := running == 7 && zones["us-west-1b"] == 1 && pending == 1 && explained == 1
			for z, n := range zones {
				ok = ok && (n == 2 || z == "us-west-1b")
			}
			return ok, msg
		})
	})

	t.Run("a topology key no target carries is told in the policy's status", func(t *testing.T) {
		createPolicy(t, cr, "rack", map[string]string{"app": "rack"}, []v1alpha1.SpreadConstraint{
			{TopologyKey: zoneKey}, {TopologyKey: "example.com/rack"},
		})
		waitFor(t, 60*time.Second, "Accepted with reason UnknownTopologyKey naming example.com/rack", func() (bool, string) {
			p := &v1alpha1.PlacementPolicy{}
			if err := cr.Get(ctx, client.ObjectKey{Namespace: placementNS, Name: "rack"}, p); err != nil {
				return false, err.Error()
			}
			c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.PlacementPolicyAccepted)
			if c == nil {
				return false, "no Accepted condition"
			}
			ok := c.Status == metav1.ConditionTrue && c.Reason == v1alpha1.ReasonUnknownTopologyKey &&
				strings.Contains(c.Message, "example.com/rack") && !strings.Contains(c.Message, zoneKey)
			return ok, fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
		})
	})

	t.Run("kubectl flotilla explain gives the pending pod's policy verdict per target", func(t *testing.T) {
		list, err := kube.CoreV1().Pods(placementNS).List(ctx, metav1.ListOptions{LabelSelector: "app=tight,!" + protocol.CandidateLabel})
		if err != nil {
			t.Fatal(err)
		}
		var pending string
		for _, p := range list.Items {
			if p.Spec.NodeName == "" {
				pending = p.Name
			}
		}
		if pending == "" {
			t.Fatal("no tight pod is pending")
		}
		plugin := buildPlugin(t)
		var e cli.Explanation
		runPlugin(t, plugin, "--kubeconfig", c1.Kubeconfig, "explain", pending, "-n", placementNS, "-o", "json").mustDecode(t, &e)
		text := runPlugin(t, plugin, "--kubeconfig", c1.Kubeconfig, "explain", pending, "-n", placementNS)
		if text.code != 0 || !strings.Contains(text.stdout, "Policy:    PlacementPolicy tight") {
			t.Errorf("explain's text names no policy:\n%s", text)
		}
		t.Logf("explain:\n%s", text.stdout)
		if e.Policy == nil || e.Policy.Name != "tight" || e.Policy.Siblings["us-west-1b"] != 1 || e.Policy.Siblings["us-east-1a"] != 2 {
			t.Errorf("policy %+v, want tight counting 2 pods per zone and 1 in us-west-1b", e.Policy)
		}
		verdicts := map[string]string{}
		for _, a := range e.Targets {
			verdicts[a.Target] = a.Answer + " " + a.Policy
		}
		for name, want := range map[string]string{"c1": "excluded: spread:", "c2": "excluded: spread:", "c3": "excluded: spread:", "c4": "selected"} {
			if !strings.Contains(verdicts[name], want) {
				t.Errorf("%s: %q, want %q; all: %v", name, verdicts[name], want, verdicts)
			}
		}
	})
}

// saysSkew reports whether a pending pod's events say that the spread
// keeps it from targets.
func saysSkew(ctx context.Context, kube kubernetes.Interface, p *corev1.Pod) bool {
	selector := fields.Set{"involvedObject.name": p.Name, "involvedObject.uid": string(p.UID)}.AsSelector().String()
	list, err := kube.CoreV1().Events(p.Namespace).List(ctx, metav1.ListOptions{FieldSelector: selector})
	if err != nil {
		return false
	}
	for _, e := range list.Items {
		if strings.Contains(e.Message, "maxSkew") {
			return true
		}
	}
	return false
}

func createPolicy(t *testing.T, cr client.Client, name string, podLabels map[string]string, spread []v1alpha1.SpreadConstraint) {
	t.Helper()
	p := &v1alpha1.PlacementPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: placementNS},
		Spec: v1alpha1.PlacementPolicySpec{
			PodSelector:       &metav1.LabelSelector{MatchLabels: podLabels},
			SpreadConstraints: spread,
		},
	}
	if err := cr.Create(t.Context(), p); err != nil {
		t.Fatal(err)
	}
}
