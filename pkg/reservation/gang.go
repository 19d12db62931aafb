package reservation

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/flotilla-dev/flotilla/pkg/candidate"
	"github.com/flotilla-dev/flotilla/pkg/gang"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/target"
)

// ReasonGangInvalid is the reason of the Event of a pod whose gang
// declaration is malformed: it is placed as an ordinary pod.
const ReasonGangInvalid = "GangInvalid"

// ReasonGangSizeUnread is the reason of the Event of a member whose gang's
// size could not be read (a timeout, a refusal, a server error): it waits
// and reads it again, never placed as an ordinary pod on an error.
const ReasonGangSizeUnread = "GangSizeUnread"

// ReasonWaitingForGang is the reason of the PodScheduled condition of a
// gang member held back until its gang holds enough places.
const ReasonWaitingForGang = "WaitingForGang"

// gangRecheck is how soon a member elected, but not yet allowed, looks at
// its gang again: the other members' elections may not have reached this
// agent's cache when they woke it.
const gangRecheck = time.Second

// gangElectedRecheck is how soon one elected member of a gang looks at it
// again while the gang's elections are being written (its election was
// written beside other members', or the gang holds every place it needs;
// memory.pollGang picks the member): the members' rounds may each have
// missed the elections still being written, and no round would allow the
// gang for gangRecheck.
const gangElectedRecheck = 100 * time.Millisecond

// Gangs wait their turn (gang.Queue): the first stands first until
// gangHeadFor has passed without it holding more places than before (twice
// the targets' default Permit timeout, so that its members' reservations
// are made again once), and for gangMaxHeadFor at most; one that did not
// complete yields for gangBackoff, doubled at each yield up to
// gangMaxBackoff.
const (
	gangHeadFor = time.Minute
	// gangNoFitHeadFor is how long a gang no target publishes room for
	// stands first: long enough for its members to reserve what room the
	// summaries do not show yet, short enough not to keep a gang that fits
	// waiting.
	gangNoFitHeadFor = 10 * time.Second
	gangMaxHeadFor   = 5 * time.Minute
	// gangRideFor is how long after the first gang's last progress the
	// gangs behind it whose needs fit the room beside its own keep
	// holding reservations (gang.Queue.RideFor): a first gang that stalls
	// that long may be short of what they hold.
	gangRideFor = 10 * time.Second
	// gangSureShare is the most of its targets' published room that an
	// anyClusters gang may need for each member to get one candidate (the
	// first of its draw), as a pod gets in a target sure to hold it: room
	// for twice the gang.
	gangSureShare  = 0.5
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
	spec gang.Spec
	// sized is false while the gang's size is not known (its owner does
	// not exist yet, or could not be read): the member waits, why says
	// why, and nothing is chosen for it.
	sized   bool
	verdict gang.Verdict
	// members are the gang's pods other than the round's, as its gang's
	// lock found them (gangGate).
	members []*corev1.Pod
	// choice is where the gang's members get candidates (gang.Choose),
	// once the round has planned its targets; nil before.
	choice *gang.Choice
	// waits is set when another gang goes first, or this one backs off:
	// every candidate of the member is denied, so it holds no node. why
	// says so. backsOff is set when this one backs off: it gave up its
	// turn, and its candidates are denied at once.
	waits, backsOff bool
	why             string
	// again is how soon to look at the member again for its gang's sake
	// (its turn may change, its wait is due to be reported, the object
	// that sizes it may have appeared); 0: only on a change.
	again time.Duration
	// unlock releases the gang's lock (gangGate) before the round's
	// others; nil when not taken.
	unlock func()
	// keep is the target an earlier round chose for the gang (oneCluster),
	// whose election may not be written yet; "" for none.
	keep string
}

// gangOf reads the pod's gang into r.gang at the start of its round: nil
// when it is in no gang, or its declaration is malformed (an Event says
// so, and it is placed as an ordinary pod). A gang whose size is not known
// yet (its PodGroup or Workload not made yet, for a while) or could not be
// read (fail closed: never placed member by member on an error) holds the
// member back, with why.
func (c *Controller) gangOf(ctx context.Context, r *round) {
	pod := r.pod
	spec, ok, err := gang.Of(pod)
	if !ok {
		return
	}
	if errors.Is(err, gang.ErrNoMinMember) {
		n, serr := c.gangSize(ctx, pod.Namespace, spec)
		switch {
		case errors.Is(serr, gang.ErrNotAGang):
			return
		case serr == nil:
			spec.MinMember, err = n, nil
		case gang.ReadFailed(serr):
			why := fmt.Sprintf("%s: reading its size failed (%v); it waits, and reads it again", spec, serr)
			c.reportGangProblem(pod, ReasonGangSizeUnread, why)
			r.gang = &gangRound{spec: spec, why: why, again: gangLookAgain}
			return
		case apierrors.IsNotFound(serr):
			if left := gangDeclareGrace - c.now().Sub(pod.CreationTimestamp.Time); left > 0 {
				// Made in the wrong order (the pods before their
				// PodGroup or Workload): held, for a while.
				// The message does not count down: it is written once.
				why := fmt.Sprintf("%s gives no size yet (%v); placed as an ordinary pod %s after its creation unless it appears", spec, serr, gangDeclareGrace)
				r.gang = &gangRound{spec: spec, why: why, again: min(left, gangLookAgain)}
				return
			}
		}
	}
	if err != nil {
		c.reportGangProblem(pod, ReasonGangInvalid, fmt.Sprintf("%v; placed as an ordinary pod", err))
		return
	}
	c.memory.gangProblemSolved(pod.UID)
	r.gang = &gangRound{spec: spec, sized: true}
}

// gangMembers are the members of pod's gang other than pod, as the cache
// holds them now.
func (c *Controller) gangMembers(pod *corev1.Pod, spec gang.Spec) []*corev1.Pod {
	members, _ := c.countingMembers(spec.Key(pod.Namespace))
	return slices.DeleteFunc(members, func(m *corev1.Pod) bool { return m.UID == pod.UID })
}

// gangWaits reports whether the gang of key (gang.Spec.Key) has a member
// in the cache that waits for its place: one that counts (gangCounts) and
// is not bound. A gang whose pods were deleted while it waited, or that
// runs, must not stand first in the queue until it is forgotten. Without
// a cache to read, it says yes.
func (c *Controller) gangWaits(key string) bool {
	members, read := c.countingMembers(key)
	return !read || slices.ContainsFunc(members, func(m *corev1.Pod) bool { return m.Spec.NodeName == "" })
}

// countingMembers are the pods of the gang of key that count in it
// (gangCounts), as the cache holds them now; read is false when the cache
// could not be read.
func (c *Controller) countingMembers(key string) (members []*corev1.Pod, read bool) {
	if c.SourcePods == nil {
		return nil, false
	}
	objs, err := c.SourcePods.ByIndex(gang.MemberIndex, key)
	if err != nil {
		return nil, false
	}
	for _, obj := range objs {
		if m, ok := obj.(*corev1.Pod); ok && gangCounts(m) {
			members = append(members, m)
		}
	}
	return members, true
}

// reportGangProblem writes a Warning Event on the member, once per
// message.
func (c *Controller) reportGangProblem(pod *corev1.Pod, reason, msg string) {
	if c.memory.gangProblemIsNew(pod.UID, msg, c.now()) {
		c.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, reason, "Elect", "%s", msg)
	}
}

// chooseForGang chooses where the gang's members get candidates, from the
// targets the round's plan selected (gang.Choose): the same for every
// member of the gang, so that its targets each hold the whole gang's
// candidates. A gang whose member is bound under oneCluster goes where it
// is; a gang that gave up a turn draws again. prospects weighs the targets
// as the fan-out does (nil: all alike).
func (c *Controller) chooseForGang(r *round, prospects func(*target.Target) candidate.Prospect) {
	g := r.gang
	if g == nil || !g.sized {
		return
	}
	pinned := ""
	if g.spec.Mode != gang.AnyClusters {
		for _, m := range c.gangMembers(r.pod, g.spec) {
			if m.Spec.NodeName == "" {
				continue
			}
			if t, ok := c.Targets.OfPod(m); ok {
				pinned = t.Name
				break
			}
		}
	}
	raw := r.pl.room(c.SelfFree)
	places := make([]gang.Place, 0, len(r.pl.selected))
	for _, t := range r.pl.selected {
		p := gang.Place{Name: t.Name, Cluster: t.Cluster(), Room: raw[t.Name], Unreachable: t.Err() != nil, Weight: 1}
		if prospects != nil {
			// Its speed, its misses and the policy's preference; its room
			// decides the tiers, not the draw.
			pr := prospects(t)
			pr.Room = 1
			p.Weight = pr.Weight()
		}
		places = append(places, p)
	}
	key := g.spec.Key(r.pod.Namespace)
	choice := gang.Choose(g.spec, gang.DrawKey(key, c.gangs().Attempt(key)), pinned, places, c.MaxCandidates)
	g.choice = &choice
}

// shaper shapes the round's new candidates: pinned to the domain the
// spread counted (plan.shaper), and a gang member's marked with its
// gang's share, so that each target holds the gang's candidates there
// together (protocol.ShareAnnotation).
func (r *round) shaper() candidate.Shaper {
	pin := r.pl.shaper()
	if r.gang == nil || !r.gang.sized {
		return pin
	}
	share := protocol.ShareOf(r.gang.spec.Key(r.pod.Namespace))
	return func(t *target.Target, cand *corev1.Pod) {
		if pin != nil {
			pin(t, cand)
		}
		if cand.Annotations == nil {
			cand.Annotations = map[string]string{}
		}
		cand.Annotations[protocol.ShareAnnotation] = share
	}
}

// gangFanOut narrows the targets the member's candidates go to now to its
// gang's choice: under oneCluster every chosen target (each is to hold the
// whole gang), under anyClusters the member's own draw among them, as any
// pod's (candidate.ToFanOut). The
// others are left out, and their candidates denied (gangDenies).
func (c *Controller) gangFanOut(r *round, views []candidate.View) []candidate.View {
	// In the targets' order, as any pod's: the gang's verdict breaks ties
	// by it.
	chosen := make([]candidate.View, 0, len(r.gang.choice.Targets))
	for _, v := range views {
		if r.gang.choice.Has(v.Name) {
			chosen = append(chosen, v)
		}
	}
	if r.gang.spec.Mode == gang.AnyClusters {
		if sh := r.gang.choice.Share(r.gang.spec.MinMember); sh > 0 && sh <= gangSureShare {
			// Its targets publish room for the gang twice over or
			// more: a member's miss is unlikely in any of them, however busy
			// they are (their answers are slow when the source is).
			// One candidate a member, drawn by their prospects (room
			// first), as a sure target's pod gets; a miss or an overdue
			// answer brings the others in.
			for i := range chosen {
				chosen[i].Sure = true
			}
		}
		// As any pod's: one candidate where a miss is unlikely.
		return candidate.ToFanOut(chosen, string(r.pod.UID), c.MaxCandidates, false)
	}
	return chosen
}

// gangGate is what the pod's gang lets it do this round, nil when it is in
// no gang (gangOf). It takes the gang's lock, held until the round's
// election is written, so that the members decide one at a time on each
// other's elections.
func (c *Controller) gangGate(ctx context.Context, r *round) *GangGate {
	g := r.gang
	if g == nil {
		return nil
	}
	if !g.sized {
		c.noteCandidates(r)
		return &GangGate{Why: g.why}
	}
	if gate := c.allowedAlready(r); gate != nil {
		return gate
	}
	spec, pod := g.spec, r.pod
	g.unlock = sync.OnceFunc(c.locks.lock("gang:" + spec.Key(pod.Namespace)))
	r.hold(g.unlock)
	// Under the gang's lock, as the other members' rounds read it.
	c.noteCandidates(r)
	// Listed once the gang's other rounds are done, each read as the
	// cache holds it then (electionOf).
	g.members = c.gangMembers(pod, spec)

	self := gangMember(pod.Name, r.election, "", r.observed)
	members := []gang.Member{self}
	for _, m := range g.members {
		members = append(members, g.chosen(c.observeMember(m, r.targets)))
	}
	slices.SortFunc(members, func(a, b gang.Member) int { return strings.Compare(a.Name, b.Name) })
	key := spec.Key(pod.Namespace)
	g.keep = c.memory.keptTarget(key, c.now())
	v := gang.DecideKeeping(spec, members, g.keep)
	if v.Complete && v.Target != "" {
		// The next member's round may decide before this round's
		// election is written: it keeps to this target.
		c.memory.noteGangTarget(key, v.Target, c.now())
	}
	g.verdict, g.why = v, v.Missing
	if !v.Complete && g.choice != nil && !g.choice.Fits {
		if spec.Mode == gang.AnyClusters {
			g.why = fmt.Sprintf("%s; the targets together publish room for fewer than %d of its members", v.Missing, spec.MinMember)
		} else {
			g.why = fmt.Sprintf("%s; no target publishes room for %d of its members", v.Missing, spec.MinMember)
		}
	}
	gate := &GangGate{Target: self.Placed, Allow: v.MayBind(self), Why: g.why}
	if gate.Target == "" {
		gate.Target = v.Assign[self.Name]
		// Its election may complete the gang's places: then its
		// allowance follows it in the same round. Every other election
		// counted is written (this process's own writes included), and
		// its own is written before its allowance.
		gate.Allow = gate.Target != "" && allowsOnceElected(spec, members, self.Name, gate.Target, g.keep)
	}
	if gate.Allow && !c.sameAgain(r, members) {
		// The caches moved while the gang was counted: what it counted
		// may never have held at one moment. Counted again soon.
		gate.Allow = false
	}
	c.takeTurn(r, members, gate)
	return gate
}

// allowedAlready is the gate of a member whose elected candidate carries
// its election's allowance, on the reservation it was elected on or bound:
// its gang let it bind when the allowance was written, and an allowance is
// never taken back (its target may bind on it at any moment), so nothing
// the other members do now changes what the round may do: bind once the
// candidate is bound. Such a member's rounds (the echo of its allowance,
// its candidate's binding) skip the gang's look, which reads every member
// twice (gangs of 64: a quarter of the agent's CPU went there). Its gang
// leaves this source's queue, as takeTurn does for a gang that allows its
// members. nil for any other member, and for a reservation ended or made
// anew: its gang decides again.
func (c *Controller) allowedAlready(r *round) *GangGate {
	e := r.election
	if !e.Elected() {
		return nil
	}
	o, ok := find(r.observed, e.Target)
	if !ok || !o.Exists || (o.State.Phase != protocol.PhaseReserved && o.State.Phase != protocol.PhaseBound) || !allowedBy(string(r.pod.UID), o, e) {
		return nil
	}
	c.noteCandidates(r)
	c.leaveQueue(r.gang.spec.Key(r.pod.Namespace), true)
	gangsWaiting.Set(float64(c.gangs().Len()))
	return &GangGate{Target: e.Target, Allow: true}
}

// leaveQueue takes gang key out of this source's queue of gangs; placed
// says it leaves because it allows its members (not only because one of
// them is bound), and its time in the queue is observed then.
func (c *Controller) leaveQueue(key string, placed bool) {
	if o, queued := c.gangs().Done(key); queued && placed {
		gangPlacedSeconds.Observe(c.now().Sub(o.Created).Seconds())
	}
}

// noteCandidates records where the round found or made the member's
// candidates (every target of its placements: those it held, and those
// it was sent to, a failed creation included, as the target may have made
// it all the same), for its gang's other members' rounds to read it there
// alone (observeMember): a round reads each of the gang's members, and
// reading each in every target cost a gang of n members over K targets
// n×K reads a round.
func (c *Controller) noteCandidates(r *round) {
	where := make([]string, 0, len(r.placements))
	for _, p := range r.placements {
		where = append(where, p.Target.Name)
	}
	c.memory.noteCandidates(r.pod.UID, where, c.now())
}

// sameAgain reads the gang's members again (the round's pod's candidates,
// then the others) and reports whether each reads as it did when counted
// (members, sorted by name). The members are read one after another from
// caches that change meanwhile, so a count may add a reservation already
// let go to one made since on the same node; read twice with no change,
// every member held what it was counted with at the moment the second
// reading began, so the gang's places held all at once.
func (c *Controller) sameAgain(r *round, members []gang.Member) bool {
	for _, o := range r.observed {
		if !o.Exists {
			continue
		}
		t, ok := c.Targets.Get(o.Target)
		if !ok {
			return false
		}
		cand, ok := candidate.Of(t, r.pod, c.SourceCluster)
		if !ok {
			return false
		}
		now := observe(candidate.Placement{Target: t, Candidate: cand})
		if now.State.Phase != o.State.Phase || now.State.Nonce != o.State.Nonce {
			return false
		}
	}
	for _, m := range r.gang.members {
		again := r.gang.chosen(c.observeMember(m, r.targets))
		i := slices.IndexFunc(members, func(x gang.Member) bool { return x.Name == again.Name })
		if i < 0 || !sameMember(members[i], again) {
			return false
		}
	}
	return true
}

// sameMember reports whether two readings of a member agree.
func sameMember(a, b gang.Member) bool {
	return a.Name == b.Name && a.Placed == b.Placed && a.Bound == b.Bound && a.Elected == b.Elected && slices.Equal(a.Reserved, b.Reserved)
}

// chosen is m with the reservations its gang's choice leaves out dropped:
// they are being let go (denied), and a gang never counts on them.
func (g *gangRound) chosen(m gang.Member) gang.Member {
	if g.choice == nil || m.Placed != "" {
		return m
	}
	m.Reserved = slices.DeleteFunc(m.Reserved, func(t string) bool { return !g.choice.Has(t) })
	return m
}

// allowsOnceElected reports whether member name, elected in target, makes
// the gang's verdict let it bind.
func allowsOnceElected(spec gang.Spec, members []gang.Member, name, target, keep string) bool {
	after := slices.Clone(members)
	for i, m := range after {
		if m.Name == name {
			after[i] = gang.Member{Name: name, Placed: target}
			return gang.DecideKeeping(spec, after, keep).MayBind(after[i])
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
		c.leaveQueue(key, v.Allow)
		return
	}
	if v.Complete {
		// Complete, it elects its members: it keeps its turn.
		c.gangs().Complete(key, c.now())
		return
	}
	look := gang.Look{Order: gangOrder(r.pod, r.gang.members), Held: v.Held, Fits: true}
	if ch := r.gang.choice; ch != nil {
		// None of its members is bound (it left the queue then): it
		// still takes its whole size of the room its targets publish,
		// which counts bound pods only.
		look.Fits, look.Share = ch.Fits, ch.Share(r.gang.spec.MinMember)
	}
	mine, head, again := c.gangs().Turn(key, look, c.now())
	r.gang.again = min(again, gangLookAgain)
	if mine {
		return
	}
	r.gang.waits = true
	r.gang.backsOff = c.gangs().BacksOff(key, c.now())
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
		c.gangQueue = &gang.Queue{HeadFor: gangHeadFor, MaxHeadFor: gangMaxHeadFor, NoFitHeadFor: gangNoFitHeadFor, RideFor: gangRideFor, Backoff: gangBackoff, MaxBackoff: gangMaxBackoff, Jitter: rand.Float64,
			Yielded: func(key string, y gang.Yield) {
				gangYields.Inc()
				klog.V(2).InfoS("Gang gives up its turn", "gang", key, "held", y.Held, "mostHeld", y.Most, "tooLittleRoom", y.NoFit, "backsOffFor", y.For.Round(time.Second), "attempt", y.Attempt)
				// Its members let go of their nodes now, not at their
				// next look (up to gangLookAgain away).
				c.wakeMembers(key)
			},
			Live: c.gangWaits,
		}
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
// gang goes first, every candidate, after placement.denyAfter like any
// denial: gangs that all fit complete side by side meanwhile, and only
// where they contend does one wait. While this one backs off (it gave up
// its turn), every candidate at once.
func gangDenies(r *round) *gangDenial {
	if r.gang == nil {
		return nil
	}
	if r.gang.waits {
		// A gang that gave up its turn lets its nodes go at once: the
		// gang that goes first may need them.
		return &gangDenial{want: func(string) bool { return true }, now: r.gang.backsOff}
	}
	// Its gang's choice leaves a target out: the member's candidate there
	// would hold a node the gang does not count on.
	left := func(t string) bool { return r.gang.choice != nil && !r.gang.choice.Has(t) }
	if keep := r.gang.verdict.Keep[r.pod.Name]; keep != "" {
		return &gangDenial{want: func(t string) bool { return t != keep || left(t) }, now: true}
	}
	if to := r.gang.verdict.Assign[r.pod.Name]; to != "" {
		// Complete, it is about to be elected there: what its gang
		// denied elsewhere stays denied, as the election would deny it
		// after placement.denyAfter anyway.
		return &gangDenial{want: func(t string) bool { return t != to }}
	}
	if r.gang.choice != nil {
		return &gangDenial{want: left, now: true}
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
		if o.State.Phase == protocol.PhaseReserved && o.Excluded == "" && !o.DeniedHere && o.Err == nil {
			m.Reserved = append(m.Reserved, o.Target)
		}
	}
	if m.Placed != "" {
		m.Reserved = nil
	}
	return m
}

// gangCounts reports whether a member counts in its gang: not when it is
// deleted or has ended. A Job's failed pod keeps its node name; the pod
// that replaces it takes its place in the gang. A member that succeeded
// held its place and did its work: the pods of a second run of the same
// pod group are a gang of their own, placed all or nothing, not members
// of a gang the finished pods would seem to hold places of.
func gangCounts(p *corev1.Pod) bool {
	return p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded
}

// observeMember reads another member of a gang from the caches (and the
// elections this process wrote that they do not show yet): its election,
// and its candidates in the targets.
func (c *Controller) observeMember(pod *corev1.Pod, targets []*target.Target) gang.Member {
	// An election this process wrote that the cache does not show yet
	// counts at once for the member it woke.
	pod, raw, _ := c.electionOf(pod)
	e, _ := protocol.ParseElection(raw)
	if pod.Spec.NodeName != "" {
		if t, ok := c.Targets.OfPod(pod); ok {
			// Placed there: its candidates count for nothing more
			// (gangMember), and are not read.
			return gangMember(pod.Name, e, t.Name, nil)
		}
	}
	// Where its own last round saw its candidates, and where it stands
	// elected: only its own rounds make its candidates, so one made since
	// is one its target has not reserved yet, or its round is about to
	// record; a member whose rounds ran in another process is read in
	// every target. Reading it short of a candidate only counts its gang
	// short of a place for a while, never a place it does not hold.
	where, known := c.memory.candidateTargets(pod.UID)
	n := len(targets)
	if known {
		n = min(n, len(where)+1)
	}
	observed := make([]Observed, 0, n)
	for _, t := range targets {
		if known && !slices.Contains(where, t.Name) && !(e.Elected() && e.Target == t.Name) {
			continue
		}
		cand, ok := memberCandidate(t, pod, c.SourceCluster)
		if !ok {
			continue
		}
		o := observe(candidate.Placement{Target: t, Candidate: cand})
		o.DeniedHere = c.memory.deniedHere(pod.UID, o)
		observed = append(observed, o)
	}
	return gangMember(pod.Name, e, "", observed)
}

// memberCandidate reads a gang member's candidate in a target's cache
// (candidate.Of); a variable, so that a test can count the reads.
var memberCandidate = candidate.Of

// wakeGang looks at the gang's other members again after the round's
// election, when that may change what they may do: the gang's first
// election (the others may be elected now) and the one whose allowance it
// carries (the others may be allowed now). Waking them at every election
// would cost a gang of n members n² rounds of n observations each; an
// elected member waiting for its allowance looks again every gangRecheck
// anyway.
//
// A round that allows its member without an election (its election was
// written beside others', and this round found the gang elected whole)
// wakes the others too, once per gang per gangRecheck (wakeForAllowance):
// their own rounds, each written beside the others, may all have missed
// the last election, and would otherwise look again only after
// gangElectedRecheck. A gang of four whose last election was written
// aside bound three members 100 ms after the first.
func (c *Controller) wakeGang(r *round, d Decision) {
	if r.gang == nil {
		return
	}
	allowedAside := d.Elect == nil && d.Allow != nil
	if allowedAside && !c.memory.wakeForAllowance(r.gang.spec.Key(r.pod.Namespace), c.now()) {
		return
	}
	if !allowedAside && (!d.Elects() || (r.gang.verdict.Placed > 0 && d.Allow == nil)) {
		return
	}
	c.lookAgainAt(r.gang.members)
}

// wakeMembers sends the members of gang key in the cache to the queue.
func (c *Controller) wakeMembers(key string) {
	members, _ := c.countingMembers(key)
	c.lookAgainAt(members)
}

// lookAgainAt sends pods to the queue (lookAgain).
func (c *Controller) lookAgainAt(pods []*corev1.Pod) {
	names := make([]types.NamespacedName, 0, len(pods))
	for _, p := range pods {
		names = append(names, types.NamespacedName{Namespace: p.Namespace, Name: p.Name})
	}
	c.lookAgain(names)
}

// gangReportAfter is how long a member may wait for its gang unreported
// while the gang comes closer: gangs that find room complete within a few
// seconds of their last member, and a status write and an Event for each
// of their members would cost the source's API server more than they
// tell (a gang of 64 made by a busy API server takes longer than that to
// make, and its members' reservations, ten targets of a small control
// plane each, longer than that to come in).
const gangReportAfter = 5 * time.Second

// reportGang says why a member waits for its gang, once per message, once
// its gang has had no new member, and held no more places than it ever
// did, for gangReportAfter.
func (c *Controller) reportGang(ctx context.Context, r *round) {
	if r.gang == nil || r.gang.verdict.Complete || r.election.Elected() {
		return
	}
	newest := r.pod.CreationTimestamp.Time
	for _, m := range r.gang.members {
		if m.CreationTimestamp.After(newest) {
			newest = m.CreationTimestamp.Time
		}
	}
	if closer := c.memory.gangCloser(r.gang.spec.Key(r.pod.Namespace), r.gang.verdict.Held, c.now()); closer.After(newest) {
		newest = closer
	}
	if left := gangReportAfter - c.now().Sub(newest); left > 0 {
		r.gang.again = soonest(r.gang.again, left)
		return
	}
	c.reportUnscheduled(ctx, r.pod, ReasonWaitingForGang, "Elect", "waiting for its gang: "+r.gang.why)
}

// gangSizeTTL is how long a gang's size, as its owner gives it, is
// remembered: the gang's members look at it in every round.
const gangSizeTTL = 10 * time.Second

// gangSize reads the size of gang spec from what declares it (gang.SizeOf:
// its PodGroup, Workload, Job or JobSet), remembered for gangSizeTTL; the
// error says why there is none.
func (c *Controller) gangSize(ctx context.Context, namespace string, spec gang.Spec) (int, error) {
	key := spec.Key(namespace)
	if s, ok := c.memory.gangSizeOf(key, c.now()); ok {
		return s.n, s.err
	}
	r := c.Reader
	if r == nil {
		r = c.Client
	}
	n, err := gang.SizeOf(ctx, r, namespace, spec)
	c.memory.noteGangSize(key, gangSize{n: n, err: err, at: c.now()})
	return n, err
}
