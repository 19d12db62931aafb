package chaos

import (
	"slices"
	"testing"
	"time"
)

// event is one observation fed to the checker, in order.
type event struct {
	cand    *Candidate
	src     *Source
	deleted bool
}

func candidate(cluster, uid, node, allowed string) Candidate {
	return Candidate{Cluster: cluster, Namespace: "chaos", Name: "web-" + cluster, UID: uid, SourceCluster: "c1", SourceUID: "s1",
		SourceNamespace: "chaos", SourceName: "web", Target: cluster, NodeName: node, Allowed: allowed}
}

func source(election, node string, running bool) Source {
	return Source{Cluster: "c1", Namespace: "chaos", Name: "web", UID: "s1", Election: election, NodeName: node, Running: running, Fits: true}
}

func cand(c Candidate) event     { return event{cand: &c} }
func candGone(c Candidate) event { return event{cand: &c, deleted: true} }
func src(s Source) event         { return event{src: &s} }
func kinds(vs []Violation) []string {
	var out []string
	for _, v := range vs {
		out = append(out, string(v.Kind))
	}
	return out
}

func TestCheckerTransitions(t *testing.T) {
	boundC2 := candidate("c2", "u2", "c2-node-0", "s1/1/n2")
	boundC3 := candidate("c3", "u3", "c3-node-0", "s1/2/n3")
	final := Snapshot{Sources: []Source{source("1/c2/n2", "flotilla-c2", true)}, Candidates: []Candidate{boundC2}}
	tests := []struct {
		name   string
		events []event
		snap   Snapshot
		want   []string
	}{{
		name:   "one candidate elected then bound",
		events: []event{cand(candidate("c2", "u2", "", "")), src(source("1/c2/n2", "", false)), cand(candidate("c2", "u2", "", "s1/1/n2")), cand(boundC2)},
		snap:   final,
	}, {
		name:   "the binding seen before the election that allowed it (watch lag)",
		events: []event{cand(boundC2), src(source("1/c2/n2", "", false))},
		snap:   final,
	}, {
		name:   "allowed by an earlier election the pod has since moved on from",
		events: []event{src(source("1/c2/n2", "", false)), src(source("2/c3/n3", "", false)), cand(boundC2)},
		snap:   final,
	}, {
		name:   "two candidates bound at once",
		events: []event{src(source("1/c2/n2", "", false)), cand(boundC2), src(source("2/c3/n3", "", false)), cand(boundC3)},
		snap:   final,
		want:   []string{"two-bound"},
	}, {
		name:   "seen twice: reported once",
		events: []event{src(source("1/c2/n2", "", false)), src(source("2/c3/n3", "", false)), cand(boundC2), cand(boundC3), cand(boundC3), cand(boundC2)},
		snap:   final,
		want:   []string{"two-bound"},
	}, {
		name:   "a second candidate bound after the first was deleted",
		events: []event{src(source("1/c2/n2", "", false)), src(source("2/c3/n3", "", false)), cand(boundC2), candGone(boundC2), cand(boundC3)},
		snap:   final,
		want:   []string{"bound-again"},
	}, {
		name:   "a candidate recreated under the same name and bound again is two candidates",
		events: []event{src(source("1/c2/n2", "", false)), cand(boundC2), candGone(boundC2), cand(candidate("c2", "u2-again", "c2-node-1", "s1/1/n2"))},
		snap:   final,
		want:   []string{"bound-again"},
	}, {
		name:   "bound with no allowance",
		events: []event{src(source("", "", false)), cand(candidate("c2", "u2", "c2-node-0", ""))},
		snap:   Snapshot{Sources: []Source{source("", "flotilla-c2", true)}, Candidates: []Candidate{candidate("c2", "u2", "c2-node-0", "")}},
		want:   []string{"bound-without-election"},
	}, {
		name:   "bound on an allowance no election of the pod named",
		events: []event{src(source("1/c3/n3", "", false)), cand(candidate("c2", "u2", "c2-node-0", "s1/1/n2"))},
		snap:   Snapshot{Sources: []Source{source("1/c3/n3", "flotilla-c2", true)}, Candidates: []Candidate{candidate("c2", "u2", "c2-node-0", "s1/1/n2")}},
		want:   []string{"bound-without-election"},
	}, {
		name:   "bound on an allowance naming the election of another target",
		events: []event{src(source("1/c3/n2", "", false)), cand(boundC2)},
		snap:   Snapshot{Sources: []Source{source("1/c3/n2", "flotilla-c2", true)}, Candidates: []Candidate{boundC2}},
		want:   []string{"bound-without-election"},
	}, {
		name:   "bound on an allowance of another pod",
		events: []event{src(source("1/c2/n2", "", false)), cand(candidate("c2", "u2", "c2-node-0", "s9/1/n2"))},
		snap:   Snapshot{Sources: []Source{source("1/c2/n2", "flotilla-c2", true)}, Candidates: []Candidate{candidate("c2", "u2", "c2-node-0", "s9/1/n2")}},
		want:   []string{"bound-without-election"},
	}, {
		name:   "every planted fault at once: allowed without election, two bound",
		events: []event{src(source("1/c2/n2", "", false)), cand(boundC2), cand(boundC3)},
		snap:   Snapshot{Sources: []Source{source("1/c2/n2", "flotilla-c2", true)}, Candidates: []Candidate{boundC2}},
		want:   []string{"two-bound", "bound-without-election"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ch := NewChecker()
			for _, e := range tt.events {
				if e.cand != nil {
					ch.ObserveCandidate(*e.cand, e.deleted)
				} else {
					ch.ObserveSource(*e.src, e.deleted)
				}
			}
			got := ch.Finish(tt.snap, Expectations{})
			if !slices.Equal(kinds(got), tt.want) {
				t.Errorf("violations %v, want kinds %v", got, tt.want)
			}
		})
	}
}

func TestCheckerUnjudged(t *testing.T) {
	// The source pod was never seen: its election cannot be judged, and
	// that is counted rather than reported.
	ch := NewChecker()
	ch.ObserveCandidate(candidate("c2", "u2", "c2-node-0", "s1/1/n2"), false)
	ch.ObserveCandidate(candidate("c2", "u2", "c2-node-0", "s1/1/n2"), true)
	if got := ch.Finish(Snapshot{}, Expectations{}); len(got) != 0 {
		t.Fatalf("violations %v, want none", got)
	}
	if _, bound, unjudged := ch.Counts(); bound != 1 || unjudged != 1 {
		t.Errorf("bound %d unjudged %d, want 1 and 1", bound, unjudged)
	}
}

func TestQuiescence(t *testing.T) {
	delegate := candidate("c2", "u2", "c2-node-0", "s1/1/n2")
	pending := candidate("c3", "u3", "", "")
	running := source("1/c2/n2", "flotilla-c2", true)
	unfit := Source{Cluster: "c1", Namespace: "chaos", Name: "huge", UID: "s2", Fits: false}
	deadline := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		snap Snapshot
		exp  Expectations
		want []string
	}{{
		name: "settled",
		snap: Snapshot{Sources: []Source{running, unfit}, Candidates: []Candidate{delegate}},
		exp:  Expectations{Pods: []ExpectedPod{{"c1", "chaos", "web", "s1"}, {"c1", "chaos", "huge", "s2"}}},
	}, {
		name: "a pod that fits nowhere waits with its candidates",
		snap: Snapshot{Sources: []Source{unfit}, Candidates: []Candidate{{Cluster: "c2", Name: "huge-x", UID: "h2", SourceCluster: "c1", SourceUID: "s2", Target: "c2"}}},
	}, {
		name: "a candidate whose source pod is gone",
		snap: Snapshot{Candidates: []Candidate{pending}},
		want: []string{"orphan"},
	}, {
		name: "a delegate whose source pod is terminating",
		snap: Snapshot{Sources: []Source{{Cluster: "c1", UID: "s1", Terminating: true}}, Candidates: []Candidate{delegate}},
		want: []string{"orphan"},
	}, {
		name: "a source pod of the same name but another uid does not keep a candidate alive",
		snap: Snapshot{Sources: []Source{{Cluster: "c1", Namespace: "chaos", Name: "web", UID: "s1-new"}}, Candidates: []Candidate{delegate}},
		want: []string{"orphan"},
	}, {
		name: "a candidate left beside the delegate",
		snap: Snapshot{Sources: []Source{running}, Candidates: []Candidate{delegate, pending}},
		want: []string{"stray"},
	}, {
		name: "a bound pod without its delegate",
		snap: Snapshot{Sources: []Source{running}},
		want: []string{"stray"},
	}, {
		name: "a bound pod whose delegate is in another target than its node",
		snap: Snapshot{Sources: []Source{source("1/c2/n2", "flotilla-c3", true)}, Candidates: []Candidate{delegate}},
		want: []string{"stray", "stray"},
	}, {
		name: "a pod that fits is still pending",
		snap: Snapshot{Sources: []Source{source("", "", false)}, Candidates: []Candidate{pending}},
		want: []string{"stuck"},
	}, {
		name: "bound but not running",
		snap: Snapshot{Sources: []Source{source("1/c2/n2", "flotilla-c2", false)}, Candidates: []Candidate{delegate}},
		want: []string{"stuck"},
	}, {
		name: "an expected pod is gone",
		snap: Snapshot{},
		exp:  Expectations{Pods: []ExpectedPod{{"c1", "chaos", "web", "s1"}}},
		want: []string{"lost"},
	}, {
		name: "an expected pod was replaced by another of its name",
		snap: Snapshot{Sources: []Source{{Cluster: "c1", Namespace: "chaos", Name: "web", UID: "other"}}},
		exp:  Expectations{Pods: []ExpectedPod{{"c1", "chaos", "web", "s1"}}},
		want: []string{"lost"},
	}, {
		name: "a workload short of pods",
		snap: Snapshot{Sources: []Source{{Cluster: "c1", Namespace: "chaos", Name: "d-1", UID: "d1", App: "d", NodeName: "", Fits: false}}},
		exp:  Expectations{Workloads: []ExpectedWorkload{{"c1", "chaos", "d", 2}}},
		want: []string{"lost"},
	}, {
		name: "a workload's terminating pods do not count",
		snap: Snapshot{Sources: []Source{{Cluster: "c1", Namespace: "chaos", Name: "d-1", UID: "d1", App: "d", Terminating: true}}},
		exp:  Expectations{Workloads: []ExpectedWorkload{{"c1", "chaos", "d", 1}}},
		want: []string{"lost"},
	}, {
		name: "a deleted pod still within its grace period",
		snap: Snapshot{Taken: deadline.Add(TerminationSlack), Sources: []Source{{Cluster: "c1", UID: "s1", NodeName: "flotilla-c2", Terminating: true, DeletionDeadline: deadline}}},
	}, {
		name: "a deleted pod still there long past its deadline",
		snap: Snapshot{Taken: deadline.Add(TerminationSlack + time.Second), Sources: []Source{{Cluster: "c1", UID: "s1", NodeName: "flotilla-c2", Terminating: true, DeletionDeadline: deadline}}},
		want: []string{"stuck"},
	}, {
		name: "a workload scaled to zero",
		exp:  Expectations{Workloads: []ExpectedWorkload{{"c1", "chaos", "d", 0}}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Quiescence(tt.snap, tt.exp)
			if !slices.Equal(kinds(got), tt.want) {
				t.Errorf("violations %v, want kinds %v", got, tt.want)
			}
		})
	}
}

func TestCountByKind(t *testing.T) {
	got := CountByKind([]Violation{{Kind: TwoBound}, {Kind: TwoBound}, {Kind: Lost}})
	if got[TwoBound] != 2 || got[Lost] != 1 || got[Stuck] != 0 || len(got) != len(Kinds) {
		t.Errorf("counts %v", got)
	}
}
