package reservation

import (
	"slices"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// Denials says which candidates to deny and whose denial to lift. While
// another target's candidate is elected, every other candidate is denied,
// so that it holds no node in its target; the denial is lifted as soon as
// the election is withdrawn or moves to its target, so the candidate may
// reserve again. Bound candidates, and candidates in targets that cannot be
// seen, are left alone. Both lists are sorted.
//
// A candidate the placement policy excludes while nothing is elected is not
// denied: under a spread the verdicts flip with every sibling elected, and
// denying and lifting them cost the K=6 spread benchmark 0.31 of its
// throughput without a policy (against 0.81-0.85 without denials).
func Denials(sourceUID string, current protocol.Election, observed []Observed) (deny, lift []string) {
	return denialsFor(sourceUID, func(target string) bool { return current.Elected() && target != current.Target }, observed)
}

// denialsFor is Denials with the candidates to deny named by want: those
// of other targets than the elected one, or, for a member of a gang that
// is not complete, those its gang denies (gangDenies). Both lists are
// sorted.
func denialsFor(sourceUID string, want func(target string) bool, observed []Observed) (deny, lift []string) {
	for _, o := range observed {
		if !o.Exists || o.Err != nil || o.State.Phase == protocol.PhaseBound {
			continue
		}
		switch has := deniedBy(sourceUID, o.Denied); {
		case want(o.Target) && !has:
			deny = append(deny, o.Target)
		case !want(o.Target) && has:
			lift = append(lift, o.Target)
		}
	}
	slices.Sort(deny)
	slices.Sort(lift)
	return deny, lift
}

// deniedBy reports whether raw is a denial of this source pod, the only
// kind the plugin obeys.
func deniedBy(sourceUID, raw string) bool {
	d, err := protocol.ParseDenial(raw)
	return err == nil && d.SourceUID == sourceUID
}
