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
}

// NewNonce returns 16 random hex characters.
func NewNonce() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("reading random bytes for a nonce: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// UnreserveReason says why a reservation ended without binding: the reason
// Flotilla recorded when it rejected it, else a timeout if Permit waited at
// least timeout, else a failure later in the binding cycle.
func UnreserveReason(r Reservation, timeout time.Duration, now time.Time) string {
	switch {
	case r.Reason != "":
		return r.Reason
	case !r.WaitingSince.IsZero() && now.Sub(r.WaitingSince) >= timeout:
		return fmt.Sprintf("permit timed out after %s without an allowance from the source", timeout)
	case !r.WaitingSince.IsZero():
		return "binding failed or the reservation was abandoned"
	default:
		return "scheduling cycle failed after reserve"
	}
}
