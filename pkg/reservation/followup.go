package reservation

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/flotilla-dev/flotilla/pkg/candidate"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/target"
)

// soonest is the earlier of two waits, where 0 is none.
func soonest(a, b time.Duration) time.Duration {
	if a == 0 || (b != 0 && b < a) {
		return b
	}
	return a
}

// applyDenials denies the candidates that cannot be elected now and lifts
// the denials of those that may be again (see Denials). Lifting is written
// at once: a pod may wait for it. Denying waits until the election has
// stood for DenyAfter with the same candidates to deny, so that the short
// waits of a burst (an election bound a moment later) cost no write; it
// returns how long until then. A gang member not elected denies what its
// gang lets go (gangDenies), some of it at once. DenyAfter 0 turns every
// denial off.
func (c *Controller) applyDenials(ctx context.Context, pod *corev1.Pod, election protocol.Election, gang *gangDenial, observed []Observed) time.Duration {
	want := func(target string) bool { return election.Elected() && target != election.Target }
	after, byGang := c.DenyAfter, !election.Elected() && gang != nil
	if byGang {
		want = gang.want
		if gang.now {
			after = 0
		}
	}
	deny, lift := denialsFor(string(pod.UID), want, observed)
	if c.DenyAfter <= 0 {
		deny = nil
	}
	write := func(target string, value *string) {
		t, ok := c.Targets.Get(target)
		if !ok {
			return
		}
		name := candidate.CandidateNameOf(pod, c.SourceCluster, t.Name)
		if err := t.AnnotateAgain(ctx, t.NamespaceFor(pod.Namespace), name, map[string]*string{protocol.DeniedAnnotation: value}); err != nil {
			logr.FromContextOrDiscard(ctx).Info("Writing a denial failed; will retry", "target", target, "deny", value != nil, "error", err.Error())
		}
	}
	for _, target := range lift {
		write(target, nil)
	}
	if len(deny) == 0 {
		c.memory.stop(pod.UID, denyClock)
		return 0
	}
	since := c.memory.since(pod.UID, denyClock, election.Encode()+" "+strings.Join(deny, ","), c.now())
	if wait := after - c.now().Sub(since); wait > 0 {
		return wait
	}
	value := protocol.Denial{SourceUID: string(pod.UID), Generation: election.Generation}.Encode()
	for _, target := range deny {
		write(target, &value)
		if o, ok := find(observed, target); ok && o.State.Phase == protocol.PhaseReserved {
			c.memory.noteDenied(pod.UID, target, o.State.Nonce, c.now())
		}
	}
	if byGang {
		gangReleased.Add(float64(len(deny)))
	}
	logr.FromContextOrDiscard(ctx).V(2).Info("Denied candidates that cannot be elected now", "targets", deny, "election", election.Encode())
	return 0
}

// revokeIfStalled revokes the elected candidate once the pod has waited
// ElectionTimeout on it, counted from when this process first saw the
// election: a target that answers but never binds (its scheduler gone, or
// a reservation no scheduler holds) would hold the pod for ever. The
// candidate is deleted only if it has not bound nor changed since the
// cache saw it (Target.Revoke); its absence then releases the election.
// It returns how long until the timeout, 0 when there is nothing to wait
// for.
//
// A pre-election (protocol.AnyReservation) is revoked sooner: as soon as
// its candidate reports no node fits it, or once it is overdue
// (candidate.Prospect.Overdue: its target answered nothing for as long,
// as when a lone candidate's second would join it, and confirmed as
// confirmOverdue confirms it); the pod's next
// election is an ordinary one, its candidates reserving before any is
// elected.
func (c *Controller) revokeIfStalled(ctx context.Context, pod *corev1.Pod, election protocol.Election, placements []candidate.Placement) time.Duration {
	pre := election.Nonce == protocol.AnyReservation
	if c.ElectionTimeout <= 0 && !pre {
		return 0
	}
	i := slices.IndexFunc(placements, func(p candidate.Placement) bool { return p.Target.Name == election.Target })
	if pre && (i < 0 || placements[i].Candidate == nil) {
		// Its target's cache does not show the candidate (not synced
		// yet, or it was just created): no event of it may come soon.
		return retryUnhealthy
	}
	if i < 0 {
		return 0
	}
	p := placements[i]
	if p.Candidate == nil || p.Candidate.DeletionTimestamp != nil || p.Candidate.Spec.NodeName != "" {
		return 0
	}
	since := c.memory.since(pod.UID, electionClock, election.Encode(), c.now())
	timeout, why := c.ElectionTimeout, fmt.Sprintf("did not bind the candidate elected %s ago", c.ElectionTimeout)
	if pre {
		// Counted from the candidate's creation, as a lone candidate's
		// overdue answer is (candidate.Weighed): a restart forgets
		// nothing of it.
		if created := p.Candidate.CreationTimestamp.Time; !created.IsZero() {
			since = created
		}
		heard := candidate.Heard(p.Target.Outcomes())
		bar := heard.OverdueAfter()
		switch unschedulable, waited := target.Unschedulable(p.Candidate), c.now().Sub(since); {
		case unschedulable != "":
			timeout, why = 0, "found no node for the candidate elected before it answered ("+unschedulable+")"
		case heard.Overdue(waited):
			// Once confirmed, as the fan-out acts on an overdue candidate:
			// after a stall of this process, its cache may not show the
			// answer yet.
			if wait := c.confirmOverdue(pod.UID, preElectionClock, []candidate.View{{Name: election.Target, Overdue: true}}); wait > 0 {
				return wait
			}
			timeout, why = 0, fmt.Sprintf("answered neither the candidate elected before it answered nor any other within %s", bar)
		default:
			c.memory.stop(pod.UID, preElectionClock)
			// Look again when it may be overdue (its target may have gone
			// quiet by then), or at the election timeout.
			if next := waited + max(bar-min(waited, heard.Quiet), time.Second); timeout <= 0 || next < timeout {
				timeout = next
			}
		}
	}
	if wait := timeout - c.now().Sub(since); wait > 0 {
		return wait
	}
	revoked, err := p.Target.Revoke(ctx, p.Candidate)
	if err != nil {
		logr.FromContextOrDiscard(ctx).Info("Revoking a stalled election failed; will retry", "target", election.Target, "error", err.Error())
		return retryUnhealthy
	}
	if revoked {
		c.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, ReasonElectionRevoked, "Elect",
			"Target %s %s (election %d); deleted it before it could bind, to elect another target",
			election.Target, why, election.Generation)
	}
	// Its deletion, or the change that kept it, brings the pod back.
	return 0
}

// repinAfter is how long a candidate must have stood pinned to a domain
// the spread closed before it is deleted to be sent again, pinned where
// the spread now allows: in a burst the verdicts flip with every sibling
// elected, and a candidate deleted on every flip costs far more than one
// that waits a moment.
const repinAfter = 3 * time.Second

// repin deletes the stale candidates (plan.stalePins) once they have stood
// stale for repinAfter, so that the next reconcile sends them again,
// pinned to a domain still open; it returns how long until then.
func (c *Controller) repin(ctx context.Context, pod *corev1.Pod, stale []candidate.Placement) time.Duration {
	if len(stale) == 0 {
		c.memory.stop(pod.UID, repinClock)
		return 0
	}
	names := make([]string, len(stale))
	for i, p := range stale {
		names[i] = p.Target.Name + "=" + strings.Join(candidate.PinnedDomain(p.Candidate), "/")
	}
	since := c.memory.since(pod.UID, repinClock, strings.Join(names, ","), c.now())
	if wait := repinAfter - c.now().Sub(since); wait > 0 {
		return wait
	}
	for _, p := range stale {
		if _, err := p.Target.Revoke(ctx, p.Candidate); err != nil {
			logr.FromContextOrDiscard(ctx).Info("Deleting a candidate pinned to a closed domain failed; will retry", "target", p.Target.Name, "error", err.Error())
			return retryUnhealthy
		}
	}
	logr.FromContextOrDiscard(ctx).V(2).Info("Deleted candidates pinned to domains the spread closed, to pin them again", "candidates", names)
	// Their deletion brings the pod back.
	return 0
}

// overdueConfirm is how long this process must have seen a pod's
// candidates in the same targets overdue before it acts on it
// (candidate.OverdueConfirm).
const overdueConfirm = candidate.OverdueConfirm

// confirmOverdue clears the views' Overdue marks until the same targets
// have stood overdue for overdueConfirm as this process saw them (on
// clock: overdueClock for the fan-out window, fallbackClock for a policy's
// fallback groups, preElectionClock for revoking a pre-election), counted from the end of the last stall of this process
// if that came later (stallWatch), and returns how long until then (0:
// confirmed, or none overdue).
func (c *Controller) confirmOverdue(uid types.UID, clock steadyClock, views []candidate.View) time.Duration {
	var overdue []string
	for _, v := range views {
		if v.Overdue {
			overdue = append(overdue, v.Name)
		}
	}
	if len(overdue) == 0 {
		c.memory.stop(uid, clock)
		return 0
	}
	since := c.memory.since(uid, clock, strings.Join(overdue, ","), c.now())
	if stall := c.stalls.endedAt(c.now()); stall.After(since) {
		// Seen overdue before a stall: what it saw then may have changed
		// unread since.
		since = stall
	}
	wait := overdueConfirm - c.now().Sub(since)
	if wait <= 0 {
		return 0
	}
	for i := range views {
		views[i].Overdue = false
	}
	return wait
}
