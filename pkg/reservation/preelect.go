package reservation

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/flotilla-dev/flotilla/pkg/candidate"
	"github.com/flotilla-dev/flotilla/pkg/placementpolicy"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/target"
)

// errStalePod ends a round whose copy of the source pod is older than the
// one stored: its next version brings the pod back.
var errStalePod = errors.New("the source pod changed since this round read it")

// preElect elects the pod's target before its candidate exists, when the
// fan-out sends the pod one candidate, to a target sure of it
// (candidate.SureOf), and nothing but the protocol judges the election:
// the pod is in no gang, no placement policy judges its reservation
// (judgesTheReservation: no count of domains needs the reservation's node
// first, no window waits to compare reservations), and it was never elected
// before (generation 0; a pre-election that missed leaves a later one). It
// writes the election, nonce protocol.AnyReservation, durably on the pod
// (optimistic concurrency, as any election) before the candidate is
// created; the candidate then carries the pre-allowance (preAllowing) and
// its target binds it on its first reservation, with no report to wait
// for and no allowance to write. A pre-election that misses (its
// candidate unschedulable, or unanswered when overdue) is revoked by
// deleting the candidate (revokeIfStalled), never by a write the
// candidate could outrun.
func (c *Controller) preElect(ctx context.Context, r *round, eligible []*target.Target, prospects func(*target.Target) candidate.Prospect) error {
	if len(eligible) != 1 || prospects == nil || r.election.Elected() || r.election.Generation != 0 ||
		r.gang != nil || judgesTheReservation(r.pl.policy) || r.missing != nil {
		return nil
	}
	t := eligible[0]
	if !prospects(t).Sure {
		return nil
	}
	if _, held := candidate.Of(t, r.pod, c.SourceCluster); held {
		return nil
	}
	if _, written := c.memory.electionWritten(r.pod.UID); written {
		// Its last election is not in the cache yet.
		return nil
	}
	e := protocol.Election{Generation: r.election.Generation + 1, Target: t.Name, Nonce: protocol.AnyReservation}
	if err := c.writeElection(ctx, r.pod, e, nil); err != nil {
		if apierrors.IsConflict(err) {
			return fmt.Errorf("%w: %w", errStalePod, err)
		}
		return err
	}
	r.election, r.preElected = e, true
	logr.FromContextOrDiscard(ctx).V(2).Info("Pre-elected", "target", t.Name, "election", e.Generation)
	return nil
}

// preAllowing adds to shape the pre-allowance of election e, a
// pre-election, on the candidate of e's target.
func preAllowing(shape candidate.Shaper, e protocol.Election, sourceUID string) candidate.Shaper {
	allowance := protocol.Allowance{SourceUID: sourceUID, Generation: e.Generation, Nonce: protocol.AnyReservation}.Encode()
	return func(t *target.Target, cand *corev1.Pod) {
		if shape != nil {
			shape(t, cand)
		}
		if t.Name != e.Target {
			return
		}
		if cand.Annotations == nil {
			cand.Annotations = map[string]string{}
		}
		cand.Annotations[protocol.AllowedAnnotation] = allowance
	}
}

// judgesTheReservation reports whether policy's election judges a
// reservation by more than its target: a spread counts the domain of the
// reserved node, and a scoring window waits for reservations to compare.
// A pre-election knows neither. A policy that only selects and weighs
// targets decided where the pod goes when the fan-out chose its target,
// and a capacity-type split is in the pod's spec (the webhook's).
func judgesTheReservation(policy *placementpolicy.Compiled) bool {
	return policy != nil && (policy.Spreads() || policy.Window != nil)
}
