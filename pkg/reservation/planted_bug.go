//go:build flotilla_planted_bug

package reservation

import "github.com/flotilla-dev/flotilla/pkg/protocol"

// A bug planted on purpose, compiled only with -tags flotilla_planted_bug
// (test/chaos builds such an agent into a folder of its own): besides what
// Decide asks for, every Reserved candidate that holds no allowance for its
// reservation is allowed, without an election. Several candidates of one
// pod then bind, and the chaos checker must say so.
func init() { decide = allowEveryReserved }

func allowEveryReserved(in Input) Decision {
	d := Decide(in)
	if d.Elect != nil || d.Allow != nil || d.Bound != "" {
		return d
	}
	for _, o := range in.Observed {
		if o.Exists && o.State.Phase == protocol.PhaseReserved && o.State.Nonce != "" && !plantedAllowed(in.SourceUID, o) {
			d.Allow = &Allowance{Target: o.Target, Allowance: protocol.Allowance{SourceUID: in.SourceUID, Generation: in.Election.Generation, Nonce: o.State.Nonce}}
			return d
		}
	}
	return d
}

// plantedAllowed reports whether o holds an allowance of this pod for the
// reservation it reports; its own, so that the planted file depends on
// nothing but Decide and the types.
func plantedAllowed(sourceUID string, o Observed) bool {
	a, err := protocol.ParseAllowance(o.Allowed)
	return err == nil && a.SourceUID == sourceUID && a.Nonce == o.State.Nonce
}
