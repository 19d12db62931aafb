package scenario

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/test/chaos"
)

func fleetNodes(zones map[string][2]string) map[NodeRef]FleetNode {
	out := map[NodeRef]FleetNode{}
	for name, rz := range zones {
		labels := map[string]string{RegionKey: rz[0]}
		if rz[1] != "" {
			labels[ZoneKey] = rz[1]
		}
		out[NodeRef{"c", name}] = FleetNode{Labels: labels, Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")}}
	}
	return out
}

func bound(i int, node string) Placement {
	return Placement{Cluster: "c", UID: fmt.Sprintf("cand-%d", i), SourceUID: fmt.Sprintf("pod-%d", i), App: "web", Node: node, Bound: true,
		Target: protocol.TargetLabelValue("t"), Nonce: fmt.Sprintf("n%d", i)}
}

// place plays pod i elected on node, its candidate bound there: the
// checker sees the candidate, then the election that names it.
func place(sc *SpreadChecker, i int, node string) {
	sc.Observe(bound(i, node), false)
	sc.ObserveElection(fmt.Sprintf("pod-%d", i), "web", protocol.Election{Generation: 1, Target: "t", Nonce: fmt.Sprintf("n%d", i)}.Encode(), false)
}

func TestSpreadChecker(t *testing.T) {
	nodes := fleetNodes(map[string][2]string{
		"e1": {"eu", "eu-1"}, "e2": {"eu", "eu-2"}, "u1": {"us", "us-1"}, "bare": {"us", ""},
	})
	zone := Policy{Keys: []string{ZoneKey}, MaxSkew: 1, When: DoNotSchedule}
	joint := Policy{Keys: []string{RegionKey, ZoneKey}, MaxSkew: 1, When: DoNotSchedule}
	for _, tc := range []struct {
		name   string
		policy Policy
		placed []string
		want   chaos.Kind // "" for none
	}{
		{"balanced", zone, []string{"e1", "e2", "u1", "e1"}, ""},
		{"a second pod in a zone while another is empty", zone, []string{"e1", "e1"}, Skew},
		{"maxSkew 2 allows it", Policy{Keys: []string{ZoneKey}, MaxSkew: 2, When: DoNotSchedule}, []string{"e1", "e1", "e2", "u1"}, ""},
		{"a node without the key", zone, []string{"bare"}, NoDomain},
		{"ScheduleAnyway is not judged", Policy{Keys: []string{ZoneKey}, MaxSkew: 1, When: ScheduleAnyway}, []string{"e1", "e1", "e1"}, ""},
		// Region level: eu 2 against us 0 breaks maxSkew 1.
		{"joint: a region ahead", joint, []string{"e1", "e2", "e1"}, Skew},
		// Zone level within eu: eu-1 2 against eu-2 0; regions eu 2, us 1.
		{"joint: a zone ahead within its region", joint, []string{"u1", "e1", "e1"}, Skew},
		{"joint: balanced", joint, []string{"e1", "u1", "e2", "u1"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := NewSpreadChecker(nodes, map[string]Policy{"web": tc.policy})
			for i, n := range tc.placed {
				place(sc, i, n)
			}
			vs := sc.Violations()
			switch {
			case tc.want == "" && len(vs) != 0:
				t.Fatalf("violations %v, want none", vs)
			case tc.want != "" && (len(vs) == 0 || vs[0].Kind != tc.want):
				t.Fatalf("violations %v, want %s", vs, tc.want)
			}
		})
	}

	t.Run("a pod deleted no longer counts; an elected one counts where it holds its node", func(t *testing.T) {
		sc := NewSpreadChecker(nodes, map[string]Policy{"web": zone})
		place(sc, 0, "e1")
		sc.Observe(bound(0, "e1"), true)
		sc.ObserveElection("pod-0", "web", "", true)
		sc.Observe(Placement{Cluster: "c", UID: "cand-9", SourceUID: "pod-9", App: "web", Node: "e2"}, false)
		place(sc, 1, "e1")
		place(sc, 2, "u1")
		place(sc, 3, "e1")
		if vs := sc.Violations(); len(vs) != 0 {
			t.Fatalf("violations %v, want none (e1 2, e2 1 elected, u1 1)", vs)
		}
		place(sc, 4, "e1")
		if vs := sc.Violations(); len(vs) != 1 || vs[0].Kind != Skew {
			t.Fatalf("violations %v, want a skew: e1 3 against 1", vs)
		}
	})

	t.Run("a reservation counts from its source's election, before its allowance", func(t *testing.T) {
		// pod-9 holds a reservation on e2 in t1, and one on u1 in t2;
		// neither is allowed yet. Elected on e2, e1 then takes a second
		// pod within maxSkew (e1 2, e2 1, u1 1); elected elsewhere (or
		// not at all), e2 is empty and e1's second pod is a skew (and,
		// with pod-9 on u1, u1's second too).
		onE2 := Placement{Cluster: "c", UID: "cand-9", SourceUID: "pod-9", App: "web", Target: protocol.TargetLabelValue("t1"), Reserved: "e2", Nonce: "n9"}
		onU1 := Placement{Cluster: "c", UID: "cand-9b", SourceUID: "pod-9", App: "web", Target: protocol.TargetLabelValue("t2"), Reserved: "u1", Nonce: "n8"}
		for _, tc := range []struct {
			name     string
			election protocol.Election
			want     int
		}{
			{"elected", protocol.Election{Generation: 1, Target: "t1", Nonce: "n9"}, 0},
			{"another target's reservation elected", protocol.Election{Generation: 1, Target: "t2", Nonce: "n8"}, 2},
			{"no election", protocol.Election{}, 1},
		} {
			t.Run(tc.name, func(t *testing.T) {
				sc := NewSpreadChecker(nodes, map[string]Policy{"web": zone})
				sc.Observe(onE2, false)
				sc.Observe(onU1, false)
				sc.ObserveElection("pod-9", "web", tc.election.Encode(), false)
				place(sc, 1, "e1")
				place(sc, 2, "u1")
				place(sc, 3, "e1")
				if vs := sc.Violations(); len(vs) != tc.want {
					t.Fatalf("violations %v, want %d", vs, tc.want)
				}
			})
		}
	})

	t.Run("an election is judged once its siblings' elected reservations are seen", func(t *testing.T) {
		// pod-1's election on e1 is seen before its candidate (another
		// cluster's watch lags): pod-2's election on e1 waits for it,
		// then is judged after it, a skew (e1 2 against 0); pod-1's, first,
		// is none.
		sc := NewSpreadChecker(nodes, map[string]Policy{"web": zone})
		sc.ObserveElection("pod-1", "web", protocol.Election{Generation: 1, Target: "t", Nonce: "n1"}.Encode(), false)
		place(sc, 2, "e1")
		if n := sc.Judged(); n != 0 {
			t.Fatalf("%d elections judged while a sibling's reservation is not seen, want 0", n)
		}
		sc.Observe(bound(1, "e1"), false)
		if vs := sc.Violations(); len(vs) != 1 || vs[0].Kind != Skew {
			t.Fatalf("violations %v, want one skew", vs)
		}
	})

	t.Run("a cluster no target reaches no longer counts", func(t *testing.T) {
		two := map[NodeRef]FleetNode{}
		for ref, n := range nodes {
			two[ref] = n
		}
		two[NodeRef{"gone", "g1"}] = FleetNode{Labels: map[string]string{RegionKey: "us", ZoneKey: "us-9"}}
		sc := NewSpreadChecker(two, map[string]Policy{"web": zone})
		sc.SetLive(map[string]bool{"c": true})
		for i, n := range []string{"e1", "e2", "u1", "e1", "e2", "u1"} {
			place(sc, i, n)
		}
		if vs := sc.Violations(); len(vs) != 0 {
			t.Fatalf("violations %v, want none", vs)
		}
	})
}

func TestSettled(t *testing.T) {
	now := time.Now()
	mine := Target{Name: "mine", Namespace: Namespace, Cluster: SourceCluster}
	remote := Target{Name: "r1", Cluster: "r1"}
	src := func(name, uid, node, election string) chaos.Source {
		return chaos.Source{Cluster: SourceCluster, Namespace: Namespace, Name: name, UID: uid, App: "web", NodeName: node, Election: election, Running: node != ""}
	}
	cand := func(cluster, target, uid, node string) chaos.Candidate {
		return chaos.Candidate{Cluster: cluster, Namespace: Namespace, Name: uid + "-" + cluster, SourceCluster: SourceCluster, SourceUID: uid, Target: target, NodeName: node}
	}
	good := chaos.Snapshot{Taken: now,
		Sources:    []chaos.Source{src("a", "ua", mine.VirtualNode(), "1/scn/mine/n1"), src("b", "ub", remote.VirtualNode(), "1/r1/n2")},
		Candidates: []chaos.Candidate{cand(SourceCluster, "scn/mine", "ua", "src-n0"), cand("r1", "r1", "ub", "r1-n0")},
	}
	targets := []Target{mine, remote}
	if vs := Settled(good, targets, map[string]Expect{"web": {Replicas: 2, Oracle: 2, Slack: 1}}); len(vs) != 0 {
		t.Fatalf("a settled fleet: %v", vs)
	}
	for _, tc := range []struct {
		name   string
		change func(*chaos.Snapshot)
		expect Expect
		want   chaos.Kind
	}{
		{"an orphan", func(s *chaos.Snapshot) {
			s.Candidates = append(s.Candidates, cand("r1", "r1", "gone", ""))
		}, Expect{Replicas: 2, Oracle: 2}, chaos.Orphan},
		{"a second candidate of a bound pod", func(s *chaos.Snapshot) {
			s.Candidates = append(s.Candidates, cand("r1", "r1", "ua", ""))
		}, Expect{Replicas: 2, Oracle: 2}, chaos.Stray},
		{"a delegate in another target than the pod's node", func(s *chaos.Snapshot) {
			s.Sources[0].NodeName = remote.VirtualNode()
		}, Expect{Replicas: 2, Oracle: 2}, chaos.Stray},
		{"an open election without its candidate", func(s *chaos.Snapshot) {
			s.Sources = append(s.Sources, src("c", "uc", "", "3/r1/n3"))
			s.Candidates = append(s.Candidates, cand(SourceCluster, "scn/mine", "uc", ""))
		}, Expect{Replicas: 3, Oracle: 2}, OpenElection},
		{"fewer than kube-scheduler, beyond the slack", func(s *chaos.Snapshot) {}, Expect{Replicas: 2, Oracle: 4, Slack: 1}, UnderPlaced},
		{"a lost pod", func(s *chaos.Snapshot) {}, Expect{Replicas: 3, Oracle: 2}, chaos.Lost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := good
			snap.Sources = append([]chaos.Source(nil), good.Sources...)
			snap.Candidates = append([]chaos.Candidate(nil), good.Candidates...)
			tc.change(&snap)
			vs := Settled(snap, targets, map[string]Expect{"web": tc.expect})
			if len(vs) == 0 || vs[0].Kind != tc.want {
				t.Fatalf("violations %v, want %s first", vs, tc.want)
			}
		})
	}
}

// TestTranslation: the oracle's constraints are the policy's keys, skew
// and action; a split Deployment is two, one per capacity type.
func TestTranslation(t *testing.T) {
	od := int32(2)
	w := Workload{Name: "web", Kind: KindDeployment, Replicas: 5, CPU: "1", Memory: "1Gi", MaxOnDemand: &od,
		Policy: &Policy{Keys: []string{RegionKey, ZoneKey}, MaxSkew: 2, When: DoNotSchedule}}
	objs := OracleObjects(w, 5)
	if len(objs) != 2 || *objs[0].Deployment.Spec.Replicas != 2 || *objs[1].Deployment.Spec.Replicas != 3 {
		t.Fatalf("split into %d objects", len(objs))
	}
	c := objs[0].Deployment.Spec.Template.Spec.TopologySpreadConstraints
	if len(c) != 2 || c[0].TopologyKey != RegionKey || c[1].TopologyKey != ZoneKey || c[1].MaxSkew != 2 || c[1].WhenUnsatisfiable != corev1.DoNotSchedule {
		t.Fatalf("constraints %+v", c)
	}
	if v := objs[1].Deployment.Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0].Values[0]; v != protocol.CapacitySpot {
		t.Fatalf("the second part runs on %s", v)
	}
	src := SourceObjects(w, 5)
	if len(src) != 1 || src[0].Deployment.Annotations[protocol.MaxOnDemandAnnotation] != "2" || src[0].Deployment.Spec.Template.Labels[protocol.ElectLabel] != "true" {
		t.Fatalf("source object %+v", src[0].Deployment)
	}
}
