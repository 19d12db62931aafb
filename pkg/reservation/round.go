package reservation

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/flotilla-dev/flotilla/pkg/candidate"
	"github.com/flotilla-dev/flotilla/pkg/gang"
	"github.com/flotilla-dev/flotilla/pkg/objects"
	"github.com/flotilla-dev/flotilla/pkg/placement"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/target"
)

// round is one reconcile of a source pod that waits for a place: what it
// observed, and what it owes its workload's siblings.
type round struct {
	pod      *corev1.Pod
	election protocol.Election
	// targets serve the pod's namespace; uninvited are those of them whose
	// invitation does not cover it.
	targets   []*target.Target
	uninvited []*target.Target
	pl        plan
	// placed are the domains of the pod's siblings as counted at fan-out.
	placed     []placement.Domain
	placements []candidate.Placement
	observed   []Observed
	// prep copies the objects the pod references into its targets and
	// ties the copies to its candidates; nil when it references none.
	prep candidate.Preparer
	// missing is an object the pod references that the source lacks.
	missing *objects.MissingError
	// retries are why the round asks to be looked at again after
	// retryUnhealthy: something failed, or may change without an event.
	retries retryReasons
	count   siblingCount
	// unlock releases the workload's lock, held (locked) from the count
	// under it until the election is written.
	unlock func()
	locked bool
	// gang is set for a member of a gang.
	gang *gangRound
	// gangWaits: the pod stands elected and its gang does not let it bind
	// yet: it looks again soon (gangRecheck), sooner (gangElectedRecheck)
	// when it is the member that polls its gang (gangPolls) while its
	// election was written beside others (gangElectedAside) or its gang
	// holds every place it needs (its elections are being written).
	gangWaits bool
	// gangElectedAside: its election was written without its gang's
	// lock, so a round that counted the gang's elections may have missed
	// it, and it may be the last the gang needed.
	gangElectedAside bool
	// gangPolls: it is the member of its gang that looks again within
	// gangElectedRecheck (memory.pollGang), its gang's elections being
	// written.
	gangPolls bool
	// lone is when to look again at a pod whose candidate waits alone for
	// its target's answer (candidate.ToFanOut): once overdue, a second
	// joins it (or, pre-elected, it is revoked); or whose candidates
	// missed or wait (candidate.WidensWhenOverdue): once the waiting ones
	// are overdue, the window widens; or whose policy's earlier fallback
	// groups missed or wait (plan.look). Zero: it does not.
	lone time.Duration
	// preElected: this round elected the pod's lone target before its
	// candidate existed, and created the candidate pre-allowed
	// (preElect).
	preElected bool
}

// place takes one round for a pod that waits for a place:
//   - observe: fan out to the targets the plan selects and look at what
//     each reports about its candidate (fanOut, look);
//   - decide: Decide on those observations, judged by the policy against
//     a count of the siblings made under the workload's lock whenever the
//     decision elects (elect);
//   - apply: the election before the allowance, then the binding, the
//     reports, and when to look again (apply).
func (c *Controller) place(ctx context.Context, r *round) (reconcile.Result, error) {
	r.unlock = func() {}
	defer func() { r.unlock() }()
	defer r.count.end(false)
	if err := c.fanOut(ctx, r); errors.Is(err, errStalePod) {
		// The newer version of the pod brings it back.
		return reconcile.Result{}, nil
	} else if err != nil {
		return reconcile.Result{}, err
	}
	c.look(ctx, r)
	d, err := c.elect(ctx, r)
	if err != nil {
		return reconcile.Result{}, err
	}
	return c.apply(ctx, r, d)
}

// fanOut plans where the pod may go, says why it may go nowhere when that
// is so, and sends a candidate to each target the plan selects. r.placements
// then holds every target's candidate, those the plan leaves out included:
// a bound one must be adopted, and the others are never elected.
func (c *Controller) fanOut(ctx context.Context, r *round) error {
	pod := r.pod
	// Each target's cache is read once, here: every decision below judges
	// this picture of it (plan.seen).
	seen := seeTargets(pod, c.SourceCluster, r.targets)
	in, out := candidate.Invited(seen.views(r.targets, nil))
	invited, uninvited := candidate.Pick(r.targets, in), candidate.Pick(r.targets, out)
	r.uninvited = uninvited
	c.gangOf(ctx, r)
	pl, problem, err := c.planFor(ctx, pod, invited, seen)
	if err != nil {
		return err
	}
	r.pl = pl
	if pl.look > 0 {
		r.lone = soonest(r.lone, pl.look)
	}
	if problem != "" {
		c.reportProblem(pod, problem)
	}
	prep, missing := c.objectsOf(ctx, pod)
	r.prep = prep
	r.missing = missing
	c.reportWhyWaiting(ctx, r, len(invited))
	if err := c.cleanUpOthers(ctx, pod, r.targets); err != nil {
		logr.FromContextOrDiscard(ctx).Info("Deleting candidates of an earlier pod of the same name failed; will retry", "error", err.Error())
		r.retry(retryCleanUp)
	}
	if r.pl.policy.Spreads() {
		if key := workloadOf(pod); key != "" {
			r.count.begin(&c.waiters, pod.Namespace+"/"+key, client.ObjectKeyFromObject(pod))
		}
		// Counted without the workload's lock: only which targets get a
		// candidate depends on it; the election counts again under it.
		if r.placed, err = c.siblingDomains(ctx, pod, &r.pl); err != nil {
			return err
		}
		r.pl.full = c.memory.fullFor(pod.UID, c.now())
		c.prepareFanOut(&r.pl, r.placed)
	}
	if len(r.pl.excluded) > 0 && len(r.pl.selected) == 0 && len(invited) > 0 {
		// Spread may allow a target again once siblings move: look again.
		// Unschedulable, as kube-scheduler says of a pod its filters
		// leave no node for; the Event says it was the policy (or the
		// targets' summaries, or a target held back).
		if why := r.pl.exclusions(); c.setUnschedulable(ctx, pod, unschedulableMessage(why, nil, len(r.targets))) {
			c.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, ReasonPolicyUnsatisfiable, "Fan out", "%s", why)
		}
		r.retry(retryNoTargetAllowed)
	}
	prospects := c.prospects(&r.pl)
	c.chooseForGang(r, prospects)
	byGang := r.gang != nil && r.gang.choice != nil && !r.election.Elected()
	if r.election.Elected() || (byGang && r.gang.spec.Mode != gang.AnyClusters) {
		// A pod that stands elected is not drawn again, and a oneCluster
		// gang's member goes to every target of its gang's choice.
		prospects = nil
	}
	views := r.pl.seen.views(r.pl.selected, prospects)
	if wait := c.confirmOverdue(pod.UID, overdueClock, views); wait > 0 {
		r.lone = soonest(r.lone, wait)
	}
	var eligible []*target.Target
	if byGang {
		// Its gang chose its targets for all its members.
		eligible = candidate.Pick(r.pl.selected, c.gangFanOut(r, views))
	} else {
		window := candidate.ToFanOut(views, string(pod.UID), c.MaxCandidates, r.election.Elected())
		eligible = candidate.Pick(r.pl.selected, window)
		if len(eligible) > 1 && len(eligible) < len(r.pl.selected) && prospects != nil && !r.election.Elected() && candidate.WidensWhenOverdue(window) {
			// Nothing else wakes a pod whose candidates missed or wait
			// in targets that never answer (a scheduler down), while
			// there is a target to widen to.
			for _, t := range eligible {
				r.lone = soonest(r.lone, prospects(t).OverdueAfter())
			}
		}
	}
	if len(eligible) == 1 && prospects != nil && !r.election.Elected() {
		// Nothing else wakes a pod whose lone candidate's target never
		// answers.
		r.lone = soonest(r.lone, prospects(eligible[0]).OverdueAfter())
	}
	shape := r.shaper()
	if err := c.preElect(ctx, r, eligible, c.sureOf(&r.pl, prospects)); err != nil {
		return err
	}
	if r.preElected {
		shape = preAllowing(shape, r.election, string(pod.UID))
	}
	r.placements = candidate.FanOut(ctx, pod, c.SourceCluster, eligible, prep, shape)
	c.reportFanOut(pod, r.placements, &r.pl)
	r.placements = append(r.placements, c.leftOut(pod, invited, eligible, &r.pl)...)
	if r.gang != nil && r.gang.choice != nil {
		r.pl.leaveOutForGang(r.placements, r.election, r.gang.choice)
	}
	return nil
}

// reportWhyWaiting says why the pod waits before any target is asked,
// when the reason is already known: an object it needs is missing, no
// target it may go to invites its namespace, or no target serves it.
func (c *Controller) reportWhyWaiting(ctx context.Context, r *round, invited int) {
	pod := r.pod
	switch {
	case r.missing != nil:
		// The object's appearance brings the pod back.
		c.reportUnscheduled(ctx, pod, ReasonObjectMissing, "Fan out", r.missing.Error()+"; no target gets a candidate until it exists")
	case len(r.uninvited) > 0 && invited == 0:
		// No target may take the pod here: that is why it waits. When
		// some target may, the pod waits for it, and the skipped ones
		// are named only if none of those can run it either.
		c.reportUninvited(ctx, pod, r.uninvited, len(r.targets))
	case len(r.targets) == 0:
		// No silent wait: say so, as kube-scheduler says of a cluster
		// without a node. A target added later looks at the pod again.
		why := unschedulableMessage("no target of this cluster takes pods of namespace "+pod.Namespace, nil, 0)
		if c.setUnschedulable(ctx, pod, why) {
			c.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, "NoTargetAvailable", "Elect", "%s", why)
		}
	}
}

// look turns each placement into what the election looks at, and makes
// sure of the election the decision starts from: a bound candidate
// allowed by a later election than the cached one is checked against the
// API server, and an elected candidate that the cache says is gone is
// read live before its election is released.
func (c *Controller) look(ctx context.Context, r *round) {
	r.observed = make([]Observed, 0, len(r.placements))
	for _, p := range r.placements {
		o := observe(p)
		if why, ok := r.pl.leftOut[p.Target.Name]; ok {
			o.Excluded = why
		}
		o.DeniedHere = c.memory.deniedHere(r.pod.UID, o)
		if o.Err != nil && r.missing == nil {
			r.retry(retryTargetFailed)
		}
		var refused *objects.RefusedError
		if errors.As(p.Err, &refused) {
			c.Recorder.Eventf(r.pod, nil, corev1.EventTypeWarning, ReasonObjectConflict, "Fan out", "%v", refused)
		}
		if o.Exists && o.Unschedulable != "" && o.State.Phase != protocol.PhaseReserved && r.pl.policy.Spreads() {
			if pinned := candidate.PinnedDomain(p.Candidate); pinned != nil {
				c.memory.noteFull(r.pod.UID, p.Target.Name, placement.Domain(pinned).Key(), c.now())
			}
		}
		if p.AdoptErr != nil {
			logr.FromContextOrDiscard(ctx).Info("Tying copies to their candidate failed; will retry", "target", p.Target.Name, "error", p.AdoptErr.Error())
			r.retry(retryAdopt)
		}
		r.observed = append(r.observed, o)
	}
	if newerAllowance(string(r.pod.UID), r.election, r.observed) {
		r.election = c.freshElection(ctx, r.pod, r.election)
	}
	if r.election.Elected() && !r.preElected {
		// (A pre-election's candidate was created just now: no read of
		// its target's API server need say it is there.)
		r.observed = c.confirmRelease(ctx, r.pod, r.election, r.observed)
		if !slices.ContainsFunc(r.observed, func(o Observed) bool { return o.Target == r.election.Target }) {
			// Its target is not configured, but its object is there
			// (draining, or not started yet): look again.
			r.retry(retryElectedUnconfigured)
		}
	}
}

// elect decides. Under a spread, siblings elect one at a time, each on a
// count that includes the others' elections (this agent's unacknowledged
// writes too): a first election is decided under the workload's lock from
// the start, so that a burst of siblings waits its turn rather than
// deciding on a count that is stale by then, and any other decision that
// elects (the elected reservation ended, or its target reserved anew) is
// decided again under the lock.
func (c *Controller) elect(ctx context.Context, r *round) (Decision, error) {
	in := Input{SourceUID: string(r.pod.UID), Election: r.election, Observed: r.observed, Now: c.now()}
	in.Policy = c.judgement(r.pod, &r.pl, r.placed, r.observed)
	// The gang's lock first, then the workload's: no round holds the
	// workload's and waits for a gang's.
	in.Gang = c.gangGate(ctx, r)
	serialized := in.Policy != nil && r.pl.policy.Spreads() && workloadOf(r.pod) != ""
	if serialized && !r.election.Elected() && anyReserved(r.observed) {
		if err := c.countLocked(ctx, r, in.Policy); err != nil {
			return Decision{}, err
		}
	}
	d := decide(in)
	if d.Elects() && serialized && !r.locked {
		if err := c.countLocked(ctx, r, in.Policy); err != nil {
			return Decision{}, err
		}
		d = decide(in)
	}
	r.observed = d.Observed
	if in.Gang != nil && !in.Gang.Allow && (d.Elects() || (d.Elect == nil && r.election.Elected())) {
		r.gangWaits = true
	}
	return d, nil
}

// hold adds a lock's release to the round's: every lock the round holds
// is released together, the last taken first, when its election is
// written or the round ends.
func (r *round) hold(unlock func()) {
	prev := r.unlock
	if prev == nil {
		prev = func() {}
	}
	r.unlock = func() { unlock(); prev() }
}

// countLocked takes the workload's lock, held until the election is
// written (r.unlock), and counts the pod's siblings again into j.
func (c *Controller) countLocked(ctx context.Context, r *round, j *Judgement) error {
	r.hold(c.locks.lock(r.pod.Namespace + "/" + workloadOf(r.pod)))
	r.locked = true
	placed, err := c.siblingDomains(ctx, r.pod, &r.pl)
	if err != nil {
		return err
	}
	j.Placed = placed
	return nil
}

// apply carries out d: the election, durably, before the allowance (the
// workload's siblings may count it from then on); the binding of a pod
// whose elected candidate bound; why no target runs the pod; and the
// follow-ups that wait (revoking a stalled election, denials, repins).
func (c *Controller) apply(ctx context.Context, r *round, d Decision) (reconcile.Result, error) {
	log := logr.FromContextOrDiscard(ctx)
	pod, election := r.pod, r.election
	if d.Wait > 0 {
		r.count.end(r.pl.narrowedBySpread())
		return reconcile.Result{RequeueAfter: d.Wait}, nil
	}
	r.endCount()
	for _, v := range d.Violations {
		log.Error(errors.New("candidate bound without election"), "Protocol violation", "target", v, "election", election.Encode())
		c.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, "ProtocolViolation", "Elect", "Target %s bound a candidate it was not allowed to bind; it will be deleted", v)
	}
	switch {
	case d.Elect == nil:
		// No election to write that another round must see first: the
		// allowance goes out without the locks (a gang's members are
		// allowed side by side, not one after another).
		r.unlock()
		r.unlock = func() {}
	case d.Allow == nil && r.gang != nil && r.gang.unlock != nil:
		// A member's election that allows nothing is written without
		// its gang's lock: the gang's members are elected side by side.
		// No allowance counts it before it is written (electionOf reads
		// only the elections written), so the gang stays all or
		// nothing; the member whose round finds the gang's elections
		// written allows it: this one looks again at once
		// (gangElectedRecheck), in case it was the last.
		r.gang.unlock()
		r.gangElectedAside = true
	}
	err := applyElection(ctx, c, pod, d, func() {
		r.unlock()
		r.unlock = func() {}
		c.wakeSiblings(pod)
		c.wakeGang(r, d)
	})
	if apierrors.IsConflict(err) && d.Elect != nil {
		// The decision was made on a stale copy of the pod (often our own
		// previous write not yet in the cache). The newer version
		// triggers another reconcile; nothing was allowed.
		log.V(4).Info("Election lost a race with a newer pod version", "election", d.Elect.Encode())
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	if d.Elect == nil && d.Allow != nil {
		c.wakeGang(r, d)
	}
	switch {
	case d.Elects():
		// No Event: one write per pod less in the source; the Scheduled
		// event names the winner.
		log.V(2).Info("Elected", "target", d.Elect.Target, "node", nodeOf(r.observed, d.Elect.Target), "election", d.Elect.Generation)
	case d.Elect != nil:
		c.Recorder.Eventf(pod, nil, corev1.EventTypeNormal, "ElectionWithdrawn", "Elect", "The elected candidate in target %s was unreserved; election %d is open again", election.Target, d.Elect.Generation)
	}
	if d.Bound != "" {
		c.adoptBound(ctx, r, d.Bound)
		return c.bind(ctx, pod, d.Bound, nodeOf(r.observed, d.Bound), election.Generation, candidatesIn(r.observed), r.targets)
	}
	if d.Elect == nil && d.Allow == nil && r.missing == nil && !election.Elected() {
		if r.gang != nil && !r.gang.verdict.Complete {
			// Its gang is what it waits for, whatever its own
			// candidates say.
			c.reportGang(ctx, r)
		} else {
			c.reportNoTarget(ctx, r)
		}
	}
	if r.gangWaits && (r.gangElectedAside || r.gang.verdict.Complete) {
		// Its gang's elections are being written: one member looks
		// again soon.
		r.gangPolls = c.memory.pollGang(r.gang.spec.Key(pod.Namespace), c.now(), gangElectedRecheck)
	}
	res := r.after(c.followUp(ctx, r, d))
	log.V(4).Info("Round done", "requeueAfter", res.RequeueAfter, "retry", r.retries.names())
	return res, nil
}

// reportNoTarget says, once per message, why no target runs the pod when
// every target answered and none reserved it.
func (c *Controller) reportNoTarget(ctx context.Context, r *round) {
	reasons := Reasons(r.observed)
	if reasons == "" {
		return
	}
	if why := unschedulableMessage(reasons, uninvitedReasons(r.pod, r.uninvited), len(r.targets)); c.setUnschedulable(ctx, r.pod, why) {
		c.Recorder.Eventf(r.pod, nil, corev1.EventTypeWarning, "NoTargetAvailable", "Elect", "No target can run this pod: %s", reasons)
	}
}

// followUp does what waits on the election as d leaves it: revoking it
// once it stalled, denying the candidates that cannot be elected, deleting
// candidates pinned to domains the spread closed. It returns how long
// until one of them is due (0: none).
func (c *Controller) followUp(ctx context.Context, r *round, d Decision) time.Duration {
	var wake time.Duration
	if d.Elect == nil && r.election.Elected() {
		wake = c.revokeIfStalled(ctx, r.pod, r.election, r.placements)
	}
	now := r.election
	if d.Elect != nil {
		now = *d.Elect
	}
	wake = soonest(wake, c.applyDenials(ctx, r.pod, now, gangDenies(r), r.observed))
	if r.pl.policy.Spreads() {
		wake = soonest(wake, c.repin(ctx, r.pod, r.pl.stalePins(r.placements, now.Target)))
	}
	return wake
}

// endCount ends the round's count of the siblings: a pod the spread
// narrowed (a target excluded, or every reservation it holds) waits for a
// sibling to move.
func (r *round) endCount() {
	if r.pl.policy != nil && !r.election.Elected() && excludedReservation(r.observed) {
		// Siblings moving may allow it: look again when one does, or
		// after a while for a pod of no workload.
		if !r.count.counting() {
			r.retry(retryNarrowedAlone)
		}
		r.count.end(true)
	}
	r.count.end(r.pl.narrowedBySpread())
}

// after is when to look at the pod again, wake being the soonest a
// follow-up is due (0: on the next change only).
func (r *round) after(wake time.Duration) reconcile.Result {
	if r.count.moved {
		// A sibling moved while this pod counted: count again now.
		return reconcile.Result{RequeueAfter: countAgain}
	}
	if r.retries != 0 {
		wake = soonest(wake, retryUnhealthy)
	}
	if r.gangWaits {
		wake = soonest(wake, gangRecheck)
		if r.gangPolls {
			// Its gang's elections are being written: the round
			// that finds them all written allows it.
			wake = soonest(wake, gangElectedRecheck)
		}
	}
	if r.gang != nil && r.gang.again > 0 {
		wake = soonest(wake, r.gang.again)
	}
	if r.lone > 0 {
		wake = soonest(wake, r.lone)
	}
	if r.count.waiting {
		// A sibling that moves wakes it at once; should none move (every
		// sibling waiting on the others, a candidate gone unnoticed), it
		// is looked at again all the same: no pod waits for ever unseen.
		wake = soonest(wake, narrowedRecheck)
	}
	return reconcile.Result{RequeueAfter: wake}
}

// retryReasons are why a round asks to be looked at again after
// retryUnhealthy, one bit each.
type retryReasons uint8

const (
	// retryCleanUp: the candidates of an earlier pod of the same name
	// were not all deleted.
	retryCleanUp retryReasons = 1 << iota
	// retryNoTargetAllowed: the policy, the targets' summaries or targets
	// held back leave the pod no target; siblings that move, or summaries
	// that change, may allow one again without an event of the pod.
	retryNoTargetAllowed
	// retryTargetFailed: a target could not be asked about the pod's
	// candidate.
	retryTargetFailed
	// retryAdopt: copies of objects the pod references were not tied to
	// their candidate.
	retryAdopt
	// retryElectedUnconfigured: the target of the pod's election is not
	// configured, but its candidate is there (its target draining, or not
	// started yet).
	retryElectedUnconfigured
	// retryNarrowedAlone: the spread narrowed a pod of no workload, which
	// no sibling that moves wakes.
	retryNarrowedAlone
)

var retryNames = []struct {
	reason retryReasons
	name   string
}{
	{retryCleanUp, "CleanUpFailed"},
	{retryNoTargetAllowed, "NoTargetAllowed"},
	{retryTargetFailed, "TargetFailed"},
	{retryAdopt, "AdoptFailed"},
	{retryElectedUnconfigured, "ElectedTargetNotConfigured"},
	{retryNarrowedAlone, "NarrowedWithoutWorkload"},
}

// retry asks for the pod to be looked at again after retryUnhealthy, for
// reason.
func (r *round) retry(reason retryReasons) { r.retries |= reason }

// names are the names of the reasons, for the log; nil when none.
func (rs retryReasons) names() []string {
	var out []string
	for _, n := range retryNames {
		if rs&n.reason != 0 {
			out = append(out, n.name)
		}
	}
	return out
}

// countAgain is how soon a pod counts its siblings again when one moved
// while it counted: at once, but for the queue to take the change in.
const countAgain = 10 * time.Millisecond

// siblingCount is a pod's part in its workload's spreadWaiters: begun
// before it counts its siblings, ended once it knows whether the spread
// narrowed it.
type siblingCount struct {
	waiters *spreadWaiters
	// key is the workload's; empty when the pod does not count (or has
	// ended its count).
	key  string
	pod  types.NamespacedName
	seen uint64
	// waiting: the count ended narrowed; a sibling that moves wakes it.
	waiting bool
	// moved: a sibling moved while it counted; it should count again now.
	moved bool
}

func (s *siblingCount) begin(w *spreadWaiters, key string, pod types.NamespacedName) {
	s.waiters, s.key, s.pod = w, key, pod
	s.seen = w.begin(key)
}

func (s *siblingCount) counting() bool { return s.key != "" }

// end ends the count, once: narrowed, the pod waits for a sibling to move.
func (s *siblingCount) end(narrowed bool) {
	if s.key == "" {
		return
	}
	key := s.key
	s.key = ""
	if !narrowed {
		s.waiters.done(key, s.pod, true)
		return
	}
	s.waiting = true
	if s.waiters.wait(key, s.pod, s.seen) {
		s.moved = true
	}
}

// adoptBound ties the copies of the objects the pod references to its
// candidate bound in target before the pod is bound, the last round that
// looks at its candidates: no round ties them after. The round's fan-out
// ties them when it finds the candidate in its target's cache; a
// pre-elected candidate may bind before that cache shows it at all (the
// round then sees it bound by reading it live, confirmRelease), and its
// copies kept no owner. The candidate that live read found is tied here;
// the copier remembers what it tied, so this costs nothing when the
// fan-out did.
func (c *Controller) adoptBound(ctx context.Context, r *round, target string) {
	if r.prep == nil {
		return
	}
	for _, p := range r.placements {
		if p.Target.Name != target {
			continue
		}
		cand := p.Candidate
		if cand == nil || cand.UID == "" {
			o, _ := find(r.observed, target)
			if o.live == nil {
				logr.FromContextOrDiscard(ctx).Info("The bound candidate was not read to tie the copies to it", "target", target)
				return
			}
			cand = o.live
		}
		if err := r.prep.Adopt(ctx, p.Target, cand); err != nil {
			logr.FromContextOrDiscard(ctx).Info("Tying copies to the bound candidate failed", "target", target, "error", err.Error())
		}
		return
	}
}
