package core

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"
)

// Reservation is one scheduling attempt of a candidate that reached Reserve:
// the node it holds and the nonce that names it in the protocol.
type Reservation struct {
	Nonce string
	Node  string
	// Topology is the node's values of the topology keys, reported with
	// Reserved and again with Bound.
	Topology map[string]string
	// Pod is the candidate and Cluster its source cluster, for the
	// scheduler's /debug/state.
	Pod     PodRef
	Cluster string
	// ReservedAt is when Reserve made it: from then on it holds its node.
	ReservedAt time.Time
	// WaitingSince is when Permit started to wait; zero before.
	WaitingSince time.Time
	// Settled is set once the reservation was allowed or rejected on the
	// source's word, so nobody settles it twice.
	Settled bool
	// Reason says why the reservation was rejected, when Flotilla rejected it.
	Reason string
	// BoundReported is set when the binding itself carried the Bound state,
	// so PostBind has nothing left to write.
	BoundReported bool
	// ShareExpired is set when its gang's share was let go before it was
	// allowed (see share).
	ShareExpired bool
	// ShareYielded is set when its gang's share was let go for an older
	// share of another source that waits for room (see NoRoom).
	ShareYielded bool
	// share is the gang share it holds its node with, nil for none.
	share *share
}

// TopologyOf returns a node's values of the topology keys, from its
// labels: the domain a reservation on it reports. A key the node has no
// label of has no entry; nil when it has none of them.
func TopologyOf(nodeLabels map[string]string, keys []string) map[string]string {
	var out map[string]string
	for _, k := range keys {
		v, ok := nodeLabels[k]
		if !ok {
			continue
		}
		if out == nil {
			out = make(map[string]string, len(keys))
		}
		out[k] = v
	}
	return out
}

// NewNonce returns 16 random hex characters.
func NewNonce() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("reading random bytes for a nonce: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// Kinds of ended reservations: the bounded reason of the
// flotilla_candidates_unreserved_total metric.
const (
	// UnreservedRejected: Flotilla rejected it on the source's word (a
	// denial, the candidate deleted) and recorded why.
	UnreservedRejected = "rejected"
	// UnreservedPermitTimeout: Permit waited the whole timeout without an
	// allowance.
	UnreservedPermitTimeout = "permit-timeout"
	// UnreservedBindFailed: it waited in Permit and ended before its
	// timeout without Flotilla rejecting it: binding failed, or the
	// scheduler abandoned it.
	UnreservedBindFailed = "bind-failed"
	// UnreservedCycleFailed: it ended before Permit waited (a later plugin
	// of the scheduling cycle failed).
	UnreservedCycleFailed = "cycle-failed"
	// UnreservedShareExpired: its gang's share was let go as one, not
	// allowed in time (see share).
	UnreservedShareExpired = "share-expired"
	// UnreservedShareYielded: its gang's share was let go as one for an
	// older share of another source that waits for room (see NoRoom).
	UnreservedShareYielded = "share-yielded"
)

// UnreserveKind classifies why a reservation ended without binding: the
// reason Flotilla recorded when it rejected it, else a timeout if Permit
// waited at least timeout, else a failure later in the binding cycle, or
// in the scheduling cycle if Permit never waited.
func UnreserveKind(r Reservation, timeout time.Duration, now time.Time) string {
	switch {
	case r.ShareExpired:
		return UnreservedShareExpired
	case r.ShareYielded:
		return UnreservedShareYielded
	case r.Reason != "":
		return UnreservedRejected
	case !r.WaitingSince.IsZero() && now.Sub(r.WaitingSince) >= timeout:
		return UnreservedPermitTimeout
	case !r.WaitingSince.IsZero():
		return UnreservedBindFailed
	default:
		return UnreservedCycleFailed
	}
}

// UnreserveReason says in words why a reservation ended without binding
// (see UnreserveKind).
func UnreserveReason(r Reservation, timeout time.Duration, now time.Time) string {
	switch UnreserveKind(r, timeout, now) {
	case UnreservedRejected, UnreservedShareExpired, UnreservedShareYielded:
		if r.Reason == "" {
			return "its gang's share was let go before it was allowed"
		}
		return r.Reason
	case UnreservedPermitTimeout:
		return fmt.Sprintf("permit timed out after %s without an allowance from the source", timeout)
	case UnreservedBindFailed:
		return "binding failed or the reservation was abandoned"
	default:
		return "scheduling cycle failed after reserve"
	}
}
