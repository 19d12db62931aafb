package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/sourcespec"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// TestLocalFirst turns on localFirst on home's self target (home has one
// node of 2 CPUs; away, its other target, 4): opted-in pods that fit stay
// in home as ordinary pods bound by home's own kube-scheduler to its real
// node, with no candidate anywhere; a pod a PlacementPolicy with a cluster
// selector governs becomes a source pod although home has room; and once
// the pods kept fill home, the next pod becomes a source pod and runs in
// away. Without localFirst every pod would be a source pod; without the
// room check the last pod would be kept and wait in home for ever. Last, a
// kept pod that home's scheduler finds no node for after all (an
// anti-affinity the room check does not weigh) is evicted, and its
// replacement goes to away.
func TestLocalFirst(t *testing.T) {
	t.Parallel()
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{
		{Name: "home", Nodes: []sandbox.NodeSpec{{CPU: "2"}}},
		{Name: "away", Nodes: []sandbox.NodeSpec{{CPU: "4"}}},
	}})
	ctx := t.Context()
	home, away := s.Cluster("home"), s.Cluster("away")
	homePods := home.Client().CoreV1().Pods(placementNS)
	for _, c := range []*sandbox.Cluster{home, away} {
		createNamespace(t, c.Client(), placementNS)
	}
	// A kept pod stuck for 2 s is evicted (30 s in the chart).
	if _, err := sandbox.StartAgent(ctx, home, []*sandbox.Cluster{home, away}, "agent.localOverflowAfter=2s"); err != nil {
		t.Fatal(err)
	}
	cr := home.CRClient()

	t.Run("localFirst needs self", func(t *testing.T) {
		ct := &v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: "not-self"}}
		ct.Spec.KubeconfigSecretRef = &v1alpha1.SecretKeyRef{LocalSecretKeyRef: v1alpha1.LocalSecretKeyRef{Name: "any"}}
		ct.Spec.LocalFirst = true
		err := cr.Create(ctx, ct)
		if err == nil || !strings.Contains(err.Error(), "spec.localFirst") {
			t.Fatalf("a ClusterTarget with localFirst and no self: %v, want a refusal naming spec.localFirst", err)
		}
	})

	if err := home.SetLocalFirst(ctx, "home", placementNS); err != nil {
		t.Fatal(err)
	}

	// candidatesOf lists the candidates of pod in both clusters.
	candidatesOf := func(pod *corev1.Pod) int {
		t.Helper()
		n := 0
		for _, c := range []*sandbox.Cluster{home, away} {
			list, err := c.Client().CoreV1().Pods(placementNS).List(ctx, metav1.ListOptions{LabelSelector: protocol.SourceUIDLabel + "=" + string(pod.UID)})
			if err != nil {
				t.Fatal(err)
			}
			n += len(list.Items)
		}
		return n
	}

	t.Run("a pod a policy places is a source pod", func(t *testing.T) {
		policy := &v1alpha1.PlacementPolicy{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere", Namespace: placementNS}}
		policy.Spec.PodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "placed"}}
		policy.Spec.ClusterSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"site": "elsewhere"}}
		if err := cr.Create(ctx, policy); err != nil {
			t.Fatal(err)
		}
		// The webhook reads policies from its cache: the first pods may
		// come before the policy does.
		waitFor(t, 30*time.Second, "a dry-run pod of the policy made a source pod", func() (bool, string) {
			got, err := homePods.Create(ctx, optedInPod("placed", "100m"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil {
				return false, err.Error()
			}
			return got.Spec.SchedulerName == protocol.SourceSchedulerName && got.Labels[protocol.LocalLabel] == "", fmt.Sprintf("schedulerName %q, labels %v", got.Spec.SchedulerName, got.Labels)
		})
	})

	t.Run("pods that fit stay, the next goes", func(t *testing.T) {
		// Home's flotilla-scheduler is stopped so that the candidate of the
		// pod that goes is never placed in home before home's own
		// scheduler has bound the pods kept there (two schedulers share
		// home's node). The four are created one after another without
		// waiting: when the fourth is admitted, the three before it are
		// claims, pending pods or bound, and fill home.
		if err := home.Stop(sandbox.CandidateScheduler); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if _, err := homePods.Create(ctx, optedInPod(fmt.Sprintf("stay-%d", i), "600m"), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := homePods.Create(ctx, optedInPod("go", "600m"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			name := fmt.Sprintf("stay-%d", i)
			waitPod(t, home.Client(), placementNS, name, "bound to home's node", func(p *corev1.Pod) bool {
				return p.Spec.NodeName == "home-node-0"
			})
			p, err := homePods.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if p.Labels[protocol.LocalLabel] != "true" || p.Spec.SchedulerName != corev1.DefaultSchedulerName || sourcespec.Saved(p) {
				t.Errorf("%s: labels %v, schedulerName %q, original fields %t: want a pod kept in home", name, p.Labels, p.Spec.SchedulerName, sourcespec.Saved(p))
			}
			if n := candidatesOf(p); n != 0 {
				t.Errorf("%s has %d candidates, want none", name, n)
			}
		}
		waitPod(t, home.Client(), placementNS, "go", "bound to away's virtual node", func(p *corev1.Pod) bool {
			return p.Spec.NodeName == "flotilla-away"
		})
		p, err := homePods.Get(ctx, "go", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Labels[protocol.LocalLabel] != "" {
			t.Errorf("go was labelled %s=%s", protocol.LocalLabel, p.Labels[protocol.LocalLabel])
		}
		// A candidate of go that lost in home (its flotilla-scheduler is
		// stopped: it waits there, unbound) asks 600m of home's room until
		// it is deleted; the next subtest needs that room.
		waitFor(t, 30*time.Second, "go's losing candidates deleted", func() (bool, string) {
			n := candidatesOf(p)
			return n == 1, fmt.Sprintf("go has %d candidates", n)
		})
	})

	t.Run("a kept pod with no node leaves", func(t *testing.T) {
		// Two replicas that may not share a node, 50m each: home's one
		// node has room for both, so both are kept, and its scheduler
		// binds one of them only. The other is evicted after 2 s and the
		// ReplicaSet's next pod is not kept: it runs in away. Whether the
		// view still counts the evicted pod as stuck when its replacement
		// is admitted, or remembers it was deleted so, depends on which
		// watch is faster; TestStuckPodsKeepTheirControllersPodsOut in
		// pkg/local checks each.
		d := optedInDeployment("apart", 2, "50m")
		d.Spec.Template.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "apart"}},
				TopologyKey:   corev1.LabelHostname,
			}},
		}}
		if _, err := home.Client().AppsV1().Deployments(placementNS).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		list := func() []corev1.Pod {
			t.Helper()
			pods, err := homePods.List(ctx, metav1.ListOptions{LabelSelector: "app=apart"})
			if err != nil {
				t.Fatal(err)
			}
			return pods.Items
		}
		var stuck corev1.Pod
		waitFor(t, 30*time.Second, "a kept pod of apart that home's scheduler found no node for", func() (bool, string) {
			var seen []string
			for _, p := range list() {
				seen = append(seen, fmt.Sprintf("%s (local %q, node %q, conditions %v)", p.Name, p.Labels[protocol.LocalLabel], p.Spec.NodeName, p.Status.Conditions))
				for _, c := range p.Status.Conditions {
					if p.Labels[protocol.LocalLabel] == "true" && c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonUnschedulable {
						stuck = p
						return true, ""
					}
				}
			}
			return false, strings.Join(seen, "; ")
		})
		waitFor(t, 30*time.Second, "the stuck pod evicted, with an Overflow Event", func() (bool, string) {
			if _, err := homePods.Get(ctx, stuck.Name, metav1.GetOptions{}); err == nil {
				return false, stuck.Name + " is still there"
			}
			evs, err := home.Client().EventsV1().Events(placementNS).List(ctx, metav1.ListOptions{FieldSelector: "regarding.name=" + stuck.Name})
			if err != nil {
				return false, err.Error()
			}
			for _, e := range evs.Items {
				if e.Reason == "Overflow" {
					return true, ""
				}
			}
			return false, fmt.Sprintf("%d Events of %s, none Overflow", len(evs.Items), stuck.Name)
		})
		waitFor(t, 60*time.Second, "apart: one pod kept on home's node, one on away's virtual node", func() (bool, string) {
			var at []string
			atHome, atAway := 0, 0
			for _, p := range list() {
				at = append(at, fmt.Sprintf("%s on %q (local %q)", p.Name, p.Spec.NodeName, p.Labels[protocol.LocalLabel]))
				switch {
				case p.Spec.NodeName == "home-node-0" && p.Labels[protocol.LocalLabel] == "true":
					atHome++
				case p.Spec.NodeName == "flotilla-away" && p.Labels[protocol.LocalLabel] == "":
					atAway++
				}
			}
			return atHome == 1 && atAway == 1 && len(at) == 2, strings.Join(at, "; ")
		})
	})
}
