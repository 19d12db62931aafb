// Package chaos runs Flotilla on three sandbox clusters, each the source and
// a target of the others, under a seeded workload and injected faults
// (killed and paused processes, a blackholed target), and checks the
// protocol's invariants on every transition it observes.
//
// Checker is the pure core: it is fed plain values (what the watches of
// every cluster saw, then a final snapshot and what the workload expects)
// and reports violations. The rest of the package only feeds it.
package chaos

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// Candidate is one observed state of a candidate pod.
type Candidate struct {
	// Cluster is the target cluster that holds the candidate.
	Cluster              string
	Namespace, Name, UID string
	// SourceCluster and SourceUID are its labels: the source pod it stands for.
	SourceCluster, SourceUID string
	// SourceNamespace and SourceName are its annotations.
	SourceNamespace, SourceName string
	// Target is the target's name as the source knows it.
	Target string
	// NodeName is set once the candidate is bound.
	NodeName string
	// Allowed is its allowance annotation.
	Allowed     string
	Terminating bool
}

// Source is one observed state of a source pod.
type Source struct {
	Cluster, Namespace, Name, UID string
	// App is the workload the pod belongs to (its app label).
	App string
	// Election is its election annotation.
	Election string
	// NodeName is the virtual node it is bound to, once bound.
	NodeName    string
	Running     bool
	Terminating bool
	// DeletionDeadline is its deletionTimestamp: when it was deleted plus
	// its grace period.
	DeletionDeadline time.Time
	// Fits says whether some node of some target can run it: the workload
	// knows, since it chose the requests.
	Fits bool
}

// Snapshot is every candidate and source pod of every cluster, listed at
// one moment.
type Snapshot struct {
	Candidates []Candidate
	Sources    []Source
	// Taken is when the lists were read.
	Taken time.Time
}

// TerminationSlack is how long after its deletion deadline a deleted source
// pod may still be there at quiescence: the virtual node deletes the
// delegate, then the pod.
const TerminationSlack = 30 * time.Second

// ExpectedPod is a pod the workload created and did not delete (nor try to):
// it must still be there, with the UID it was created with.
type ExpectedPod struct {
	Cluster, Namespace, Name, UID string
}

// ExpectedWorkload is a controller (Deployment, StatefulSet) that must have
// Replicas live pods of its app label.
type ExpectedWorkload struct {
	Cluster, Namespace, App string
	Replicas                int
}

// Expectations is what the workload left behind.
type Expectations struct {
	Pods      []ExpectedPod
	Workloads []ExpectedWorkload
}

// Kind of violation.
type Kind string

const (
	// TwoBound: two candidates of one source pod seen bound at once (invariant 1).
	TwoBound Kind = "two-bound"
	// BoundAgain: a candidate of a source pod bound after another one of
	// it was bound and deleted (invariant 1: at most one is ever bound).
	BoundAgain Kind = "bound-again"
	// Unelected: a candidate bound without an allowance naming an election
	// its source pod recorded (invariants 3 and 5).
	Unelected Kind = "bound-without-election"
	// Orphan: after quiescence, a candidate or delegate whose source pod is
	// gone (invariant 2).
	Orphan Kind = "orphan"
	// Stray: after quiescence, a candidate of a bound source pod other than
	// its delegate, or a bound source pod without its delegate.
	Stray Kind = "stray"
	// Stuck: after quiescence, a source pod that fits somewhere is not bound
	// and Running, or a deleted one is still there long past its deadline.
	Stuck Kind = "stuck"
	// Lost: after quiescence, an opted-in pod the workload expects is gone.
	Lost Kind = "lost"
)

// Kinds lists every kind, in the order the summary prints them.
var Kinds = []Kind{TwoBound, BoundAgain, Unelected, Orphan, Stray, Stuck, Lost}

// Violation is one broken invariant.
type Violation struct {
	Kind   Kind
	Detail string
}

func (v Violation) String() string { return string(v.Kind) + ": " + v.Detail }

// podKey names a source pod across clusters: its cluster and UID.
type podKey struct{ cluster, uid string }

// boundCandidate is a candidate seen bound, with the allowance it carried
// when first seen bound.
type boundCandidate struct {
	Candidate
	live bool
}

// Checker judges the transitions it is fed. It is safe for concurrent use:
// each cluster's watch feeds it from its own goroutine.
type Checker struct {
	mu sync.Mutex
	// bound holds, per source pod, every candidate ever seen bound, by
	// "<cluster>/<candidate uid>".
	bound map[podKey]map[string]*boundCandidate
	// elections holds every election record seen on each source pod: the
	// history, since a watch of the target may show a binding before the
	// watch of the source shows the election that allowed it.
	elections map[podKey]map[protocol.Election]bool
	seen      map[podKey]bool
	sticky    []Violation
	reported  map[string]bool
	// Transitions counts the observations fed; Unjudged the bound
	// candidates whose source pod was never seen (created and gone while
	// a watch was re-listing), so that their election cannot be checked.
	transitions, unjudged int
}

// NewChecker returns an empty checker.
func NewChecker() *Checker {
	return &Checker{
		bound:     map[podKey]map[string]*boundCandidate{},
		elections: map[podKey]map[protocol.Election]bool{},
		seen:      map[podKey]bool{},
		reported:  map[string]bool{},
	}
}

// ObserveCandidate feeds one observed state of a candidate; deleted is true
// for its last state (a watch's DELETED event, or gone from a re-list).
func (ch *Checker) ObserveCandidate(c Candidate, deleted bool) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.transitions++
	if c.NodeName == "" {
		return
	}
	key := podKey{c.SourceCluster, c.SourceUID}
	id := c.Cluster + "/" + c.UID
	all := ch.bound[key]
	if all == nil {
		all = map[string]*boundCandidate{}
		ch.bound[key] = all
	}
	if b, ok := all[id]; ok {
		if deleted {
			b.live = false
		}
		return
	}
	for otherID, other := range all {
		kind, how := BoundAgain, "after it was deleted"
		if other.live {
			kind, how = TwoBound, "while it was still bound"
		}
		pair := []string{otherID, id}
		sort.Strings(pair)
		ch.report(string(kind)+"/"+strings.Join(pair, "+"), Violation{kind, fmt.Sprintf(
			"pod %s/%s (uid %s) of %s: candidate %s bound on %s in %s %s candidate %s was bound on %s in %s",
			c.SourceNamespace, c.SourceName, c.SourceUID, c.SourceCluster, c.Name, c.NodeName, c.Cluster, how,
			other.Name, other.NodeName, other.Cluster)})
	}
	all[id] = &boundCandidate{Candidate: c, live: !deleted}
}

// ObserveSource feeds one observed state of a source pod.
func (ch *Checker) ObserveSource(s Source, deleted bool) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.transitions++
	key := podKey{s.Cluster, s.UID}
	ch.seen[key] = true
	e, err := protocol.ParseElection(s.Election)
	if err != nil || !e.Elected() {
		return
	}
	if ch.elections[key] == nil {
		ch.elections[key] = map[protocol.Election]bool{}
	}
	ch.elections[key][e] = true
}

// report records a violation once per key.
func (ch *Checker) report(key string, v Violation) {
	if ch.reported[key] {
		return
	}
	ch.reported[key] = true
	ch.sticky = append(ch.sticky, v)
}

// Violations are the violations seen in the transitions so far (two bound
// candidates); the election of bound candidates is judged by Finish, once
// every watch has caught up.
func (ch *Checker) Violations() []Violation {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return append([]Violation(nil), ch.sticky...)
}

// Counts reports how many observations were fed, how many candidates were
// seen bound, and how many bound candidates could not be judged.
func (ch *Checker) Counts() (transitions, bound, unjudged int) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	for _, all := range ch.bound {
		bound += len(all)
	}
	return ch.transitions, bound, ch.unjudged
}

// Finish feeds the final snapshot, judges the election of every candidate
// ever seen bound, and adds the quiescence checks of the snapshot. It
// returns every violation, sorted by kind.
func (ch *Checker) Finish(snap Snapshot, exp Expectations) []Violation {
	for _, s := range snap.Sources {
		ch.ObserveSource(s, false)
	}
	for _, c := range snap.Candidates {
		ch.ObserveCandidate(c, false)
	}
	ch.mu.Lock()
	ch.unjudged = 0
	for key, all := range ch.bound {
		for id, b := range all {
			if v, judged := ch.electionOf(key, b.Candidate); !judged {
				ch.unjudged++
			} else if v != "" {
				ch.report(string(Unelected)+"/"+id, Violation{Unelected, v})
			}
		}
	}
	ch.mu.Unlock()
	out := append(ch.Violations(), Quiescence(snap, exp)...)
	sort.SliceStable(out, func(i, j int) bool { return kindIndex(out[i].Kind) < kindIndex(out[j].Kind) })
	return out
}

// electionOf says what is wrong with the allowance a bound candidate
// carried ("" when it names an election its source pod recorded), and
// whether it could be judged at all.
func (ch *Checker) electionOf(key podKey, c Candidate) (string, bool) {
	where := fmt.Sprintf("candidate %s in %s of pod %s/%s (uid %s) of %s, bound on %s", c.Name, c.Cluster, c.SourceNamespace, c.SourceName, c.SourceUID, c.SourceCluster, c.NodeName)
	if c.Allowed == "" {
		return where + ": no allowance", true
	}
	a, err := protocol.ParseAllowance(c.Allowed)
	if err != nil {
		return fmt.Sprintf("%s: %v", where, err), true
	}
	if a.SourceUID != c.SourceUID {
		return fmt.Sprintf("%s: allowance %s names another pod", where, c.Allowed), true
	}
	if !ch.seen[key] {
		return "", false
	}
	if ch.elections[key][protocol.Election{Generation: a.Generation, Target: c.Target, Nonce: a.Nonce}] {
		return "", true
	}
	var seen []string
	for e := range ch.elections[key] {
		seen = append(seen, e.Encode())
	}
	sort.Strings(seen)
	return fmt.Sprintf("%s: allowance %s for target %s, elections seen %v", where, c.Allowed, c.Target, seen), true
}

// Quiescence checks a snapshot taken once faults and workload have stopped
// and the clusters had time to settle: every candidate has its live source
// pod, a bound source pod has exactly its delegate, every source pod that
// fits is bound and Running, and nothing the workload expects is lost. It
// is pure, so a caller can poll it until it passes or time runs out.
func Quiescence(snap Snapshot, exp Expectations) []Violation {
	var out []Violation
	live := map[podKey]Source{}
	for _, s := range snap.Sources {
		if !s.Terminating {
			live[podKey{s.Cluster, s.UID}] = s
			continue
		}
		if !s.DeletionDeadline.IsZero() && snap.Taken.Sub(s.DeletionDeadline) > TerminationSlack {
			out = append(out, Violation{Stuck, fmt.Sprintf("pod %s/%s (uid %s) of %s is still terminating %s after its deletion deadline (node %q)",
				s.Namespace, s.Name, s.UID, s.Cluster, snap.Taken.Sub(s.DeletionDeadline).Round(time.Second), s.NodeName)})
		}
	}
	delegates := map[podKey]int{}
	for _, c := range snap.Candidates {
		what := "candidate"
		if c.NodeName != "" {
			what = "delegate"
		}
		src, ok := live[podKey{c.SourceCluster, c.SourceUID}]
		if !ok {
			out = append(out, Violation{Orphan, fmt.Sprintf("%s %s/%s in %s: source pod %s/%s (uid %s) of %s is gone",
				what, c.Namespace, c.Name, c.Cluster, c.SourceNamespace, c.SourceName, c.SourceUID, c.SourceCluster)})
			continue
		}
		if src.NodeName == "" {
			continue
		}
		if c.NodeName != "" && protocol.VirtualNodeNameOf(c.Target) == src.NodeName {
			delegates[podKey{src.Cluster, src.UID}]++
			continue
		}
		out = append(out, Violation{Stray, fmt.Sprintf("%s %s/%s in %s (target %s): its pod %s/%s of %s is bound to %s",
			what, c.Namespace, c.Name, c.Cluster, c.Target, src.Namespace, src.Name, src.Cluster, src.NodeName)})
	}
	byName := map[string]Source{}
	apps := map[string]int{}
	for _, s := range live {
		byName[s.Cluster+"/"+s.Namespace+"/"+s.Name] = s
		if s.App != "" {
			apps[s.Cluster+"/"+s.Namespace+"/"+s.App]++
		}
		switch {
		case s.NodeName != "" && delegates[podKey{s.Cluster, s.UID}] != 1:
			out = append(out, Violation{Stray, fmt.Sprintf("pod %s/%s of %s is bound to %s with %d delegates",
				s.Namespace, s.Name, s.Cluster, s.NodeName, delegates[podKey{s.Cluster, s.UID}])})
		case s.Fits && (s.NodeName == "" || !s.Running):
			out = append(out, Violation{Stuck, fmt.Sprintf("pod %s/%s of %s fits but is not bound and Running (node %q, running %v, election %q)",
				s.Namespace, s.Name, s.Cluster, s.NodeName, s.Running, s.Election)})
		}
	}
	for _, p := range exp.Pods {
		s, ok := byName[p.Cluster+"/"+p.Namespace+"/"+p.Name]
		switch {
		case !ok:
			out = append(out, Violation{Lost, fmt.Sprintf("pod %s/%s of %s (uid %s) is gone", p.Namespace, p.Name, p.Cluster, p.UID)})
		case p.UID != "" && s.UID != p.UID:
			out = append(out, Violation{Lost, fmt.Sprintf("pod %s/%s of %s: uid %s was replaced by %s", p.Namespace, p.Name, p.Cluster, p.UID, s.UID)})
		}
	}
	for _, w := range exp.Workloads {
		if got := apps[w.Cluster+"/"+w.Namespace+"/"+w.App]; got != w.Replicas {
			out = append(out, Violation{Lost, fmt.Sprintf("workload %s/%s of %s has %d live pods, wants %d", w.Namespace, w.App, w.Cluster, got, w.Replicas)})
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Kind != out[j].Kind {
			return kindIndex(out[i].Kind) < kindIndex(out[j].Kind)
		}
		return out[i].Detail < out[j].Detail
	})
	return out
}

func kindIndex(k Kind) int {
	for i, kk := range Kinds {
		if kk == k {
			return i
		}
	}
	return len(Kinds)
}

// CountByKind counts violations per kind, every kind present.
func CountByKind(vs []Violation) map[Kind]int {
	out := map[Kind]int{}
	for _, k := range Kinds {
		out[k] = 0
	}
	for _, v := range vs {
		out[v.Kind]++
	}
	return out
}
