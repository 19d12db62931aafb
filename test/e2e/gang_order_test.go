package e2e

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// TestGangsOfTwoSourcesMeetInOneTarget: two sources, each inviting
// itself into one target of six CPUs with the invited identity, make a
// gang of four one-CPU members each. The first three members of each are
// made first and left to reserve, so that the target holds three places
// of each gang and has no room left: neither gang can complete unless
// the target decides between them. Then the fourth members come. The
// target orders the shares by what it observed (equal priority: the share
// it saw first goes first), so the first source's gang runs whole well
// within one Permit timeout (30 s: without the order both shares would
// wait for it and be let go together), the second's binds nothing
// meanwhile, and it runs whole once the first is deleted. Watches of
// both sources check that no member binds before its whole gang stands
// elected.
func TestGangsOfTwoSourcesMeetInOneTarget(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s1, s2, tg := twoSourcesAndATarget(t)
	for _, c := range []*sandbox.Cluster{s1, s2} {
		if err := c.Invite(ctx, tg, placementNS); err != nil {
			t.Fatal(err)
		}
		if err := c.WaitTargetReady(ctx, tg.Name, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	tgNode := protocol.VirtualNodeName("", tg.Name)
	gangsOfTwoSourcesMeet(t, s1, s2, tg, tgNode, tgNode)
}

// twoSourcesAndATarget starts two sources, s1 and s2, with placementNS,
// and a target tg of one node of six CPUs, each with its agent; nothing
// invites anyone yet.
func twoSourcesAndATarget(t *testing.T) (s1, s2, tg *sandbox.Cluster) {
	t.Helper()
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{
		{Name: "s1", WithoutScheduler: true},
		{Name: "s2", WithoutScheduler: true},
		{Name: "tg", Nodes: []sandbox.NodeSpec{{CPU: "6"}}},
	}})
	s1, s2, tg = s.Cluster("s1"), s.Cluster("s2"), s.Cluster("tg")
	for _, c := range []*sandbox.Cluster{s1, s2} {
		createNamespace(t, c.Client(), placementNS)
	}
	for _, c := range s.Clusters {
		if _, err := sandbox.StartAgent(t.Context(), c, nil); err != nil {
			t.Fatal(err)
		}
	}
	return s1, s2, tg
}

// gangsOfTwoSourcesMeet is the body of the tests of two sources' gangs in
// one target tg of six CPUs, whichever way each source reaches it: a gang
// of four one-CPU oneCluster members in each source, three of each made
// and reserved first (tg full), then the fourth of each. The share tg saw
// first (s1's) runs whole on node1 (s1's virtual node of tg) within 20 s,
// s2's binds nothing meanwhile and runs whole on node2 once s1's gang is
// deleted; watches of both sources check every step.
func gangsOfTwoSourcesMeet(t *testing.T, s1, s2, tg *sandbox.Cluster, node1, node2 string) {
	t.Helper()
	ctx := t.Context()
	w1 := watchGangs(t, s1, placementNS, map[string]int{"first": 4})
	w2 := watchGangs(t, s2, placementNS, map[string]int{"second": 4})
	first, second := gangPods("first", 4, 4, protocol.GangOneCluster), gangPods("second", 4, 4, protocol.GangOneCluster)
	create := func(c *sandbox.Cluster, members ...*corev1.Pod) {
		for _, p := range members {
			if _, err := c.Client().CoreV1().Pods(placementNS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	check := func() {
		w1.check(t)
		w2.check(t)
	}

	create(s1, first[:3]...)
	waitFor(t, 60*time.Second, "three places of the first gang held in the target", func() (bool, string) {
		r := reservedBySource(t, tg)
		return r["s1"] == 3, fmt.Sprintf("reserved by source: %v", r)
	})
	create(s2, second[:3]...)
	waitFor(t, 60*time.Second, "three places of each gang held: the target is full", func() (bool, string) {
		r := reservedBySource(t, tg)
		return r["s1"] == 3 && r["s2"] == 3, fmt.Sprintf("reserved by source: %v", r)
	})
	check()

	// Well within the Permit timeout after the last reservation (30 s), at
	// which both shares would otherwise be let go together.
	create(s1, first[3])
	create(s2, second[3])
	waitFor(t, 20*time.Second, "the first source's gang, seen first by the target, bound whole on "+node1, func() (bool, string) {
		check()
		on, _, err := gangState(ctx, s1.Client().CoreV1().Pods(placementNS), first, "")
		if err != nil {
			return false, err.Error()
		}
		return on[node1] == 4, fmt.Sprintf("bound: %v", on)
	})
	on, _, err := gangState(ctx, s2.Client().CoreV1().Pods(placementNS), second, "")
	if err != nil {
		t.Fatal(err)
	}
	if podsOn(on) != 0 {
		t.Fatalf("members of the second gang bound while the first ran in a target that holds one of them: %v", on)
	}
	check()

	for _, p := range first {
		if err := s1.Client().CoreV1().Pods(placementNS).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 90*time.Second, "the second source's gang bound whole on "+node2+" once the first is gone", func() (bool, string) {
		check()
		on, _, err := gangState(ctx, s2.Client().CoreV1().Pods(placementNS), second, "")
		if err != nil {
			return false, err.Error()
		}
		return on[node2] == 4, fmt.Sprintf("bound: %v", on)
	})
	check()
}

// reservedBySource counts, per source cluster, the candidates in c's
// placement namespace whose reservation stands now.
func reservedBySource(t *testing.T, c *sandbox.Cluster) map[string]int {
	l, err := c.Client().CoreV1().Pods(placementNS).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		return nil
	}
	n := map[string]int{}
	for _, p := range l.Items {
		var s protocol.State
		if json.Unmarshal([]byte(p.Annotations[protocol.StateAnnotation]), &s) == nil && s.Phase == protocol.PhaseReserved {
			n[p.Labels[protocol.SourceClusterLabel]]++
		}
	}
	return n
}
