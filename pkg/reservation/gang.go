package reservation

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/flotilla-dev/flotilla/pkg/candidate"
	"github.com/flotilla-dev/flotilla/pkg/gang"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/target"
)

// ReasonGangInvalid is the reason of the Event of a pod whose gang
// declaration is malformed: it is placed as an ordinary pod.
const ReasonGangInvalid = "GangInvalid"

// ReasonWaitingForGang is the reason of the PodScheduled condition of a
// gang member held back until its gang holds enough places.
const ReasonWaitingForGang = "WaitingForGang"

// gangRecheck is how soon a member elected, but not yet allowed, looks at
// its gang again: the other members' elections may not have reached this
// agent's cache when they woke it.
const gangRecheck = time.Second

// Gangs wait their turn (gang.Queue): the first stands first until
// gangHeadFor has passed without it holding more places than before (twice
// the targets' default Permit timeout, so that its members' reservations
// are made again once), and for gangMaxHeadFor at most; one that did not
// complete yields for gangBackoff, doubled at each yield up to
// gangMaxBackoff.
const (
	gangHeadFor    = time.Minute
	gangMaxHeadFor = 5 * time.Minute
	gangBackoff    = 30 * time.Second
	gangMaxBackoff = 5 * time.Minute
	// gangLookAgain bounds how long a member waits to look at its gang's
	// turn again: the gang ahead may be done sooner.
	gangLookAgain = 10 * time.Second
)

// gangDeclareGrace is how long a member whose gang's PodGroup or Workload
// does not exist waits for it before it is placed as an ordinary pod:
// the pods of a manifest may be made before the object that sizes them.
const gangDeclareGrace = time.Minute

// gangRound is a gang member's part of a round.
type gangRound struct {
	spec    gang.Spec
	verdict gang.Verdict
	// members are the gang's pods other than the round's.
	members []*corev1.Pod
	// waits is set when another gang goes first, or this one backs off:
	// every candidate of the member is denied, so it holds no node. why
	// says so.
	waits bool
	why   string
	// again is how soon to look at the member again for its gang's sake
	// (its turn may change, its wait is due to be reported, the object
	// that sizes it may have appeared); 0: only on a change.
	again time.Duration
}

// gangGate is what the pod's gang lets it do this round, nil when it is in
// no gang, or its declaration is malformed (an Event says so, and it is
// placed as an ordinary pod). It takes the gang's lock, held until the
// round's election is written, so that the members decide one at a time on
// each other's elections.
func (c *Controller) gangGate(ctx context.Context, r *round) *GangGate {
	pod := r.pod
	spec, ok, err := gang.Of(pod)
	if !ok {
		return nil
	}
	if errors.Is(err, gang.ErrNoMinMember) {
		n, serr := c.gangSize(ctx, pod.Namespace, spec)
		switch {
		case errors.Is(serr, gang.ErrNotAGang):
			return nil
		case serr == nil:
			spec.MinMember, err = n, nil
		case apierrors.IsNotFound(serr):
			if left := gangDeclareGrace - c.now().Sub(pod.CreationTimestamp.Time); left > 0 {
				// Made in the wrong order (the pods before their
				// PodGroup or Workload): held, for a while.
				// The message does not count down: it is written once.
				why := fmt.Sprintf("%s gives no size yet (%v); placed as an ordinary pod %s after its creation unless it appears", spec, serr, gangDeclareGrace)
				r.gang = &gangRound{spec: spec, why: why, again: min(left, gangLookAgain)}
				return &GangGate{Why: why}
			}
		}
	}
	if err != nil {
		if prev, loaded := c.problems.Swap(gangProblemKey(pod.UID), reported{err.Error(), c.now()}); !loaded || prev.(reported).msg != err.Error() {
			c.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, ReasonGangInvalid, "Elect", "%v; placed as an ordinary pod", err)
		}
		return nil
	}
	r.hold(c.locks.lock("gang:" + spec.Key(pod.Namespace)))

	self := gangMember(pod.Name, r.election, "", r.observed)
	members := []gang.Member{self}
	var others []*corev1.Pod
	if c.SourcePods != nil {
		objs, _ := c.SourcePods.ByIndex(gang.MemberIndex, spec.Key(pod.Namespace))
		for _, obj := range objs {
			m, ok := obj.(*corev1.Pod)
			if !ok || m.UID == pod.UID || !gangCounts(m) {
				continue
			}
			others = append(others, m)
			members = append(members, c.observeMember(m, r.targets))
		}
	}
	slices.SortFunc(members, func(a, b gang.Member) int { return strings.Compare(a.Name, b.Name) })
	v := gang.Decide(spec, members)
	r.gang = &gangRound{spec: spec, verdict: v, members: others, why: v.Missing}
	g := &GangGate{Target: self.Placed, Allow: v.MayBind(self), Why: v.Missing}
	if g.Target == "" {
		g.Target = v.Assign[self.Name]
		// Its election may complete the gang's places: then its
		// allowance follows it in the same round. Every other election
		// counted is written (this process's own writes included), and
		// its own is written before its allowance.
		g.Allow = g.Target != "" && allowsOnceElected(spec, members, self.Name, g.Target)
	}
	c.takeTurn(r, members, g)
	return g
}

// allowsOnceElected reports whether member name, elected in target, makes
// the gang's verdict let it bind.
func allowsOnceElected(spec gang.Spec, members []gang.Member, name, target string) bool {
	after := slices.Clone(members)
	for i, m := range after {
		if m.Name == name {
			after[i] = gang.Member{Name: name, Placed: target}
			return gang.Decide(spec, after).MayBind(after[i])
		}
	}
	return false
}

// takeTurn queues the gang while it waits for its places: only the first
// gang of this source holds reservations; the others' members are denied
// everywhere until their turn. A gang placed (or with a member running)
// leaves the queue; a complete one electing its members keeps its turn.
func (c *Controller) takeTurn(r *round, members []gang.Member, g *GangGate) {
	key := r.gang.spec.Key(r.pod.Namespace)
	v := r.gang.verdict
	defer func() { gangsWaiting.Set(float64(c.gangs().Len())) }()
	if v.Allow || slices.ContainsFunc(members, func(m gang.Member) bool { return m.Bound }) {
		if o, queued := c.gangs().Done(key); queued && v.Allow {
			gangPlacedSeconds.Observe(c.now().Sub(o.Created).Seconds())
		}
		return
	}
	if v.Complete {
		return
	}
	mine, head, again := c.gangs().Turn(key, gangOrder(r.pod, r.gang.members), v.Held, c.now())
	r.gang.again = min(again, gangLookAgain)
	if mine {
		return
	}
	r.gang.waits = true
	if head == "" {
		r.gang.why = fmt.Sprintf("%s could not be completed and backs off; it holds no node meanwhile", r.gang.spec)
	} else {
		r.gang.why = fmt.Sprintf("%s goes first; %s holds no node meanwhile", gang.NameOfKey(head), r.gang.spec)
	}
	g.Why = r.gang.why
}

// gangs is the controller's queue of gangs, made on first use.
func (c *Controller) gangs() *gang.Queue {
	c.gangQueueOnce.Do(func() {
		c.gangQueue = &gang.Queue{HeadFor: gangHeadFor, MaxHeadFor: gangMaxHeadFor, Backoff: gangBackoff, MaxBackoff: gangMaxBackoff, Jitter: rand.Float64,
			Yielded: func(string) { gangYields.Inc() }}
	})
	return c.gangQueue
}

// gangOrder ranks a gang by its members: their priority, and the oldest's
// creation.
func gangOrder(pod *corev1.Pod, others []*corev1.Pod) gang.Order {
	o := gang.Order{Created: pod.CreationTimestamp.Time}
	if pod.Spec.Priority != nil {
		o.Priority = *pod.Spec.Priority
	}
	for _, m := range others {
		if m.CreationTimestamp.Time.Before(o.Created) {
			o.Created = m.CreationTimestamp.Time
		}
	}
	return o
}

// gangDenial is what a member's gang denies of its candidates while
// nothing is elected (gangDenies).
type gangDenial struct {
	// want names the candidates to deny, by target.
	want func(target string) bool
	// now is true for denials written at once rather than after
	// placement.denyAfter.
	now bool
}

// gangDenies says which of a member's candidates its gang denies while
// nothing is elected; nil for none. Under anyClusters, every candidate
// but the reservation the member keeps, at once: they hold, or would
// hold, nodes another member could reserve. Once the gang is complete,
// every candidate but the one it is assigned, after placement.denyAfter
// (those denied already stay so: no lifting for a moment). While another
// gang goes first (or this one backs off), every candidate, after
// placement.denyAfter like any denial: gangs that all fit complete side
// by side meanwhile, and only where they contend does one wait.
func gangDenies(r *round) *gangDenial {
	if r.gang == nil {
		return nil
	}
	if r.gang.waits {
		return &gangDenial{want: func(string) bool { return true }}
	}
	if keep := r.gang.verdict.Keep[r.pod.Name]; keep != "" {
		return &gangDenial{want: func(t string) bool { return t != keep }, now: true}
	}
	if to := r.gang.verdict.Assign[r.pod.Name]; to != "" {
		// Complete, it is about to be elected there: what its gang
		// denied elsewhere stays denied, as the election would deny it
		// after placement.denyAfter anyway.
		return &gangDenial{want: func(t string) bool { return t != to }}
	}
	return nil
}

// gangMember is a member as the gang sees it: placed where it stands
// elected on a reservation its target still reports (or bound there), and
// holding the other reservations it may be elected on.
func gangMember(name string, e protocol.Election, boundTo string, observed []Observed) gang.Member {
	m := gang.Member{Name: name, Placed: boundTo, Bound: boundTo != "", Elected: boundTo}
	if m.Elected == "" && e.Elected() {
		m.Elected = e.Target
	}
	for _, o := range observed {
		if !o.Exists {
			continue
		}
		elected := e.Elected() && o.Target == e.Target
		switch {
		case m.Placed != "":
		case elected && o.State.Phase == protocol.PhaseBound:
			m.Placed, m.Bound = o.Target, true
			continue
		case elected && o.State.Phase == protocol.PhaseReserved && o.State.Nonce == e.Nonce:
			m.Placed = o.Target
			continue
		}
		if o.State.Phase == protocol.PhaseReserved && o.Excluded == "" && o.Err == nil {
			m.Reserved = append(m.Reserved, o.Target)
		}
	}
	if m.Placed != "" {
		m.Reserved = nil
	}
	return m
}

// gangCounts reports whether a member counts in its gang: not when it is
// deleted or failed (a Job's failed pod keeps its node name; the pod that
// replaces it takes its place in the gang). A member that succeeded
// counts: it held its place and did its work.
func gangCounts(p *corev1.Pod) bool {
	return p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodFailed
}

// observeMember reads another member of a gang from the caches (and the
// elections this process wrote that they do not show yet): its election,
// and its candidates in the targets.
func (c *Controller) observeMember(pod *corev1.Pod, targets []*target.Target) gang.Member {
	// An election this process wrote that the cache does not show yet
	// counts at once for the member it woke.
	raw, _ := c.electionOf(pod)
	e, _ := protocol.ParseElection(raw)
	boundTo := ""
	if pod.Spec.NodeName != "" {
		if t, ok := c.Targets.ByVirtualNode(pod.Spec.NodeName); ok {
			boundTo = t.Name
		}
	}
	observed := make([]Observed, 0, len(targets))
	for _, t := range targets {
		name := candidate.CandidateNameOf(pod, c.SourceCluster, t.Name)
		cand, ok := t.Candidate(t.NamespaceFor(pod.Namespace), name)
		if !ok || types.UID(cand.Labels[protocol.SourceUIDLabel]) != pod.UID {
			continue
		}
		observed = append(observed, observe(candidate.Placement{Target: t, Candidate: cand}))
	}
	return gangMember(pod.Name, e, boundTo, observed)
}

// wakeGang looks at the gang's other members again after the round's
// election, when that may change what they may do: the gang's first
// election (the others may be elected now) and the one whose allowance it
// carries (the others may be allowed now). Waking them at every election
// would cost a gang of n members n² rounds of n observations each; an
// elected member waiting for its allowance looks again every gangRecheck
// anyway.
func (c *Controller) wakeGang(r *round, d Decision) {
	if r.gang == nil || !d.Elects() || (r.gang.verdict.Placed > 0 && d.Allow == nil) {
		return
	}
	pods := make([]types.NamespacedName, 0, len(r.gang.members))
	for _, m := range r.gang.members {
		pods = append(pods, types.NamespacedName{Namespace: m.Namespace, Name: m.Name})
	}
	c.lookAgain(pods)
}

// gangReportAfter is how long after its creation a member may wait for
// its gang unreported: gangs that find room complete within a few seconds,
// and a status write and an Event for each of their members would cost
// the source's API server more than they tell.
const gangReportAfter = 5 * time.Second

// reportGang says why a member waits for its gang, once per message, once
// it has waited gangReportAfter.
func (c *Controller) reportGang(ctx context.Context, r *round) {
	if r.gang == nil || r.gang.verdict.Complete || r.election.Elected() {
		return
	}
	if left := gangReportAfter - c.now().Sub(r.pod.CreationTimestamp.Time); left > 0 {
		r.gang.again = soonest(r.gang.again, left)
		return
	}
	c.reportUnscheduled(ctx, r.pod, ReasonWaitingForGang, "Elect", "waiting for its gang: "+r.gang.why)
}

func gangProblemKey(uid types.UID) string { return "gang/" + string(uid) }

// gangSizeTTL is how long a gang's size, as its owner gives it, is
// remembered: the gang's members look at it in every round.
const gangSizeTTL = 10 * time.Second

type gangSize struct {
	n   int
	err error
	at  time.Time
}

// gangSize reads the size of gang spec from what declares it (gang.SizeOf:
// its PodGroup, Workload, Job or JobSet), remembered for gangSizeTTL; the
// error says why there is none.
func (c *Controller) gangSize(ctx context.Context, namespace string, spec gang.Spec) (int, error) {
	key := spec.Key(namespace)
	if v, ok := c.gangSizes.Load(key); ok && c.now().Sub(v.(gangSize).at) < gangSizeTTL {
		return v.(gangSize).n, v.(gangSize).err
	}
	r := c.Reader
	if r == nil {
		r = c.Client
	}
	n, err := gang.SizeOf(ctx, r, namespace, spec)
	c.gangSizes.Store(key, gangSize{n: n, err: err, at: c.now()})
	return n, err
}
