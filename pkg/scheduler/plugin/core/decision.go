package core

import (
	"fmt"
	"time"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// Verdict is what to do with a reservation waiting in Permit.
type Verdict int

const (
	// Wait keeps the reservation until the source answers or Permit times out.
	Wait Verdict = iota
	// Allow lets the candidate bind to its reserved node.
	Allow
	// Reject ends the reservation; the candidate goes back to the queue.
	Reject
)

func (v Verdict) String() string {
	switch v {
	case Allow:
		return "Allow"
	case Reject:
		return "Reject"
	default:
		return "Wait"
	}
}

// Decision is a Verdict and, for Reject, the reason in words.
type Decision struct {
	Verdict Verdict
	Reason  string
	// Timeout is how long Permit waits, for Wait (Manager.Permit).
	Timeout time.Duration
}

// IsCandidate reports whether a pod's labels mark it as a Flotilla candidate.
func IsCandidate(labels map[string]string) bool {
	return labels[protocol.CandidateLabel] == "true"
}

// Denied reports why the source denies the candidate, if it does: a
// well-formed denial naming the source pod the candidate stands for. While
// it holds, the candidate gets no reservation (PreFilter) and the one it
// holds is rejected.
func Denied(labels, annotations map[string]string) (reason string, denied bool) {
	raw, ok := annotations[protocol.DeniedAnnotation]
	if !ok {
		return "", false
	}
	d, err := protocol.ParseDenial(raw)
	if err != nil || d.SourceUID != labels[protocol.SourceUIDLabel] {
		return "", false
	}
	return fmt.Sprintf(protocol.DeniedMessage+" (election %d): another target's candidate is elected; it is let in again if that election ends without binding", d.Generation), true
}

// allowanceOf returns the candidate's allowance when it parses and names
// the source pod the candidate stands for.
func allowanceOf(labels, annotations map[string]string) (protocol.Allowance, bool) {
	raw, ok := annotations[protocol.AllowedAnnotation]
	if !ok {
		return protocol.Allowance{}, false
	}
	allowance, err := protocol.ParseAllowance(raw)
	if err != nil || allowance.SourceUID == "" || allowance.SourceUID != labels[protocol.SourceUIDLabel] {
		return protocol.Allowance{}, false
	}
	return allowance, true
}

// PreAllowed reports whether the candidate carries its source's
// pre-allowance (protocol.AnyReservation) and no denial: any reservation
// of it may bind at once, and none is reported Reserved.
func PreAllowed(labels, annotations map[string]string) bool {
	if _, denied := Denied(labels, annotations); denied {
		return false
	}
	a, ok := allowanceOf(labels, annotations)
	return ok && a.PreAllows()
}

// Decide applies the protocol's rule to the reservation named by nonce and
// the candidate's current labels and annotations. A denial rejects (see
// Denied). An allowance allows only if it parses, names the source pod the
// candidate stands for and either this very nonce or every reservation of
// the candidate (a pre-allowance, protocol.AnyReservation); anything else (no
// allowance, a malformed one, one for an earlier reservation or another
// source pod) waits, because the annotations are a peer's writes and must
// never make the target bind on its own.
func Decide(nonce string, labels, annotations map[string]string) Decision {
	if nonce == "" {
		return Decision{Verdict: Wait}
	}
	if reason, denied := Denied(labels, annotations); denied {
		return Decision{Verdict: Reject, Reason: reason}
	}
	allowance, ok := allowanceOf(labels, annotations)
	if !ok || (allowance.Nonce != nonce && !allowance.PreAllows()) {
		return Decision{Verdict: Wait}
	}
	return Decision{Verdict: Allow}
}
