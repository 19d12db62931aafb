// Package reservation owns the election of one candidate per source pod: it
// reads what each target reports about its candidate and the durable election
// record on the source pod, and decides what to write next. The controller
// observes (Input), Decide decides, a pure function that includes the
// placement policy's judgement of every reservation it may elect, and the
// controller applies the Decision in the source cluster, writing the
// election durably (optimistic concurrency) before any allowance leaves.
package reservation

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/flotilla-dev/flotilla/pkg/placement"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// Observed is what the source knows of the candidate in one target.
type Observed struct {
	Target string
	// Exists is false when the target has no candidate (yet).
	Exists bool
	// State is what the target scheduler reported; zero when nothing yet.
	State protocol.State
	// Allowed is the candidate's current allowance annotation.
	Allowed string
	// Denied is the candidate's current denial annotation (see Denials).
	Denied string
	// Unschedulable is the target scheduler's reason when it found no node.
	Unschedulable string
	// Err is set when the target could not be reached or refused the candidate.
	Err error
	// Live is true when this was read from the target's API server rather
	// than from the source's cache of it.
	Live bool
	// live is the candidate as that read found it (nil when not Live, or
	// none): the round that binds the pod ties the copies of its objects
	// to it when the cache does not hold it (adoptBound).
	live *corev1.Pod
	// Bonus is added to the reservation's score by the placement policy
	// (spread and preferences).
	Bonus int64
	// Excluded, when set, is why the placement policy does not let this
	// reservation be elected (a DoNotSchedule spread it would break).
	Excluded string
	// DeniedHere is set on a reservation this process denied (its nonce),
	// though the denial may have been lifted since: its target may have
	// let it go, so it is never elected nor counted as a gang's place.
	DeniedHere bool
	// Domain is the spread domain the reservation counts in: the values,
	// in the policy's key order, of the node its target reserved ("" for a
	// key the node lacks); nil when not known.
	Domain placement.Domain
}

// Decision is the next step for one source pod. At most one of Elect and
// Bound is set. When Elect is set, the caller must write it durably on the
// source pod and only then write Allow on the elected candidate.
type Decision struct {
	// Elect is the new election record to write on the source pod.
	Elect *protocol.Election
	// Allow is the allowance to write on the candidate of Allow's target.
	Allow *Allowance
	// Bound names the target whose elected candidate is bound: bind the
	// source pod to its virtual node and delete the other candidates.
	Bound string
	// Violations lists candidates bound without the election (never expected).
	Violations []string
	// Observed are the observations the decision was made on, as the
	// placement policy judged them (Bonus, Excluded).
	Observed []Observed
	// Wait, when set, is how long the policy's scoring window waits for
	// more reservations before the first election; nothing else is set.
	Wait time.Duration
}

// Allowance addresses an allowance to one target's candidate.
type Allowance struct {
	Target string
	protocol.Allowance
}

// step computes the next step of the protocol from the election on the
// source pod and what the targets report, as the policy judged it (Decide
// is the only caller outside tests). It is idempotent: called again with
// the result applied, it asks for nothing new.
func step(sourceUID string, current protocol.Election, observed []Observed) Decision {
	var d Decision
	// The current election's candidate, bound on its allowance, won. No
	// other bound candidate can have been allowed: the source allows only
	// after recording the election durably, and moves an election only once
	// the elected reservation can no longer bind (so a candidate bound on an
	// earlier election's allowance cannot be). Any other bound candidate (a
	// target that bound on its own, with or without a forged allowance) is
	// reported as a violation and deleted, never adopted. The caller makes
	// sure current is not older than the allowances it sees (a stale cache
	// of the source pod; see Controller.freshElection).
	for _, o := range observed {
		if !o.Exists || o.State.Phase != protocol.PhaseBound {
			continue
		}
		if current.Elected() && o.Target == current.Target && allowedBy(sourceUID, o, current) {
			d.Bound = o.Target
			continue
		}
		d.Violations = append(d.Violations, o.Target)
	}
	if d.Bound != "" {
		return d
	}
	if current.Elected() {
		elected, ok := find(observed, current.Target)
		switch {
		case ok && elected.Exists && elected.State.Phase == protocol.PhaseReserved && elected.State.Nonce != current.Nonce && protocol.ValidNonce(elected.State.Nonce):
			// The elected target reserved again (its Permit timed out and the
			// pod went back to its queue): re-elect the same target for the
			// new reservation, which may be on another node, so only if the
			// policy lets it; the old allowance can no longer match.
			if elected.Excluded == "" {
				return elect(d, sourceUID, current.Generation+1, current.Target, elected.State.Nonce)
			}
			if next, found := best(sourceUID, observed, current.Target); found {
				return elect(d, sourceUID, current.Generation+1, next.Target, next.State.Nonce)
			}
			return withdraw(d, current.Generation+1)
		case ok && elected.Exists && elected.State.Phase == protocol.PhaseReserved:
			want := protocol.Allowance{SourceUID: sourceUID, Generation: current.Generation, Nonce: current.Nonce}
			if elected.Allowed != want.Encode() {
				d.Allow = &Allowance{Target: current.Target, Allowance: want}
			}
			return d
		case ok && released(elected, current):
			// The elected reservation is gone (unreserved, its candidate
			// deleted or revoked or replaced by a new one): the election is
			// free again.
			next, found := best(sourceUID, observed, current.Target)
			if !found {
				return withdraw(d, current.Generation+1)
			}
			return elect(d, sourceUID, current.Generation+1, next.Target, next.State.Nonce)
		default:
			// Not reported yet, or the target is unreachable: a candidate we
			// cannot see may still bind on its allowance, so keep the election.
			return d
		}
	}
	next, found := best(sourceUID, observed, "")
	if !found {
		return d
	}
	return elect(d, sourceUID, current.Generation+1, next.Target, next.State.Nonce)
}

// released reports whether the elected target's candidate can no longer
// bind on the election, whose reservation is not reported Reserved any more
// (Decide looked at that first): its scheduler reports the elected
// reservation ended (Unreserved, with its nonce), or a live read of the
// target (Live: a cache may lag behind the one that saw the reservation)
// finds no candidate of the pod but one being deleted (a pod without a node
// cannot be bound once it is being deleted), or one that reports nothing
// and carries no allowance of this election (a new candidate, made after
// the elected one went). Never a bound one.
func released(o Observed, current protocol.Election) bool {
	switch {
	case o.State.Phase == protocol.PhaseBound:
		return false
	case o.Exists && o.State.Phase == protocol.PhaseUnreserved && o.State.Nonce == current.Nonce:
		return true
	}
	return o.Live && releasedIfLive(o, current)
}

// releasedIfLive reports whether o would release the election if a live
// read confirms it: no candidate, or one that reports nothing and carries
// no allowance of this election.
func releasedIfLive(o Observed, current protocol.Election) bool {
	if o.State.Phase == protocol.PhaseBound {
		return false
	}
	if !o.Exists {
		return o.Err == nil
	}
	if o.State.Nonce != "" {
		return false
	}
	a, err := protocol.ParseAllowance(o.Allowed)
	return err != nil || a.Generation != current.Generation || a.Nonce != current.Nonce
}

// allowedBy reports whether a candidate carries the allowance of election
// e for the reservation it reports, or e's pre-allowance (a pre-election:
// every reservation of the candidate is allowed; protocol.AnyReservation).
func allowedBy(sourceUID string, o Observed, e protocol.Election) bool {
	a, err := protocol.ParseAllowance(o.Allowed)
	return err == nil && a.SourceUID == sourceUID && a.Generation == e.Generation && a.Nonce == e.Nonce && (a.Nonce == o.State.Nonce || a.PreAllows())
}

// newerAllowance reports whether a bound candidate carries an allowance of
// this source pod for its reservation from a later election than current:
// the record read is older than the one that allowed it (a cache that lags).
func newerAllowance(sourceUID string, current protocol.Election, observed []Observed) bool {
	for _, o := range observed {
		if o.State.Phase != protocol.PhaseBound {
			continue
		}
		a, err := protocol.ParseAllowance(o.Allowed)
		if err == nil && a.SourceUID == sourceUID && (a.Nonce == o.State.Nonce || a.PreAllows()) && a.Generation > current.Generation {
			return true
		}
	}
	return false
}

func elect(d Decision, uid string, generation int64, target, nonce string) Decision {
	d.Elect = &protocol.Election{Generation: generation, Target: target, Nonce: nonce}
	d.Allow = &Allowance{Target: target, Allowance: protocol.Allowance{SourceUID: uid, Generation: generation, Nonce: nonce}}
	return d
}

func withdraw(d Decision, generation int64) Decision {
	d.Elect = &protocol.Election{Generation: generation}
	return d
}

func find(observed []Observed, target string) (Observed, bool) {
	for _, o := range observed {
		if o.Target == target {
			return o, true
		}
	}
	return Observed{}, false
}

// best picks the Reserved candidate to elect: the highest node score plus
// the policy's bonus, then the target name, so that the choice does not
// depend on the order in which the reports arrived within one reconcile. A
// reservation whose nonce the election record cannot carry (a peer's
// malformed write), that the policy excludes, or that carries this pod's
// denial (its scheduler is about to reject it), is never elected.
func best(sourceUID string, observed []Observed, except string) (Observed, bool) {
	var reserved []Observed
	for _, o := range observed {
		if o.Exists && o.Target != except && o.State.Phase == protocol.PhaseReserved && protocol.ValidNonce(o.State.Nonce) && o.Excluded == "" && !o.DeniedHere && !deniedBy(sourceUID, o.Denied) {
			reserved = append(reserved, o)
		}
	}
	if len(reserved) == 0 {
		return Observed{}, false
	}
	rank := func(o Observed) int64 { return o.State.Score + o.Bonus }
	sort.Slice(reserved, func(i, j int) bool {
		if a, b := rank(reserved[i]), rank(reserved[j]); a != b {
			return a > b
		}
		return reserved[i].Target < reserved[j].Target
	})
	return reserved[0], true
}

// Reasons summarises, per target, why no candidate is reserved, for the Event
// on a source pod that no target can run. It is empty while some target has
// not answered yet or holds a reservation.
func Reasons(observed []Observed) string {
	var parts []string
	for _, o := range observed {
		switch {
		case o.Err != nil:
			parts = append(parts, fmt.Sprintf("%s: %v", o.Target, o.Err))
		case o.Exists && o.State.Phase == protocol.PhaseReserved && o.Excluded != "":
			parts = append(parts, fmt.Sprintf("%s: reserved, but the placement policy excludes it: %s", o.Target, o.Excluded))
		case o.Exists && o.State.Phase == protocol.PhaseReserved, o.Exists && o.State.Phase == protocol.PhaseBound:
			return ""
		case o.Exists && o.Unschedulable != "":
			parts = append(parts, fmt.Sprintf("%s: %s", o.Target, o.Unschedulable))
		case o.Exists && o.State.Phase == protocol.PhaseUnreserved && o.State.Reason != "":
			parts = append(parts, fmt.Sprintf("%s: %s", o.Target, o.State.Reason))
		default:
			return ""
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}
