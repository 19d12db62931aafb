package reservation

import (
	"slices"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// Denials says which candidates to deny and whose denial to lift. A
// candidate that cannot be elected now is denied, so that it holds no node
// in its target: while another target's candidate is elected, every other
// candidate; while none is, a candidate the placement policy excludes. A
// denial is lifted as soon as that no longer holds (the election was
// withdrawn, the policy lets the target in again), so the candidate may
// reserve again. Bound candidates, and candidates in targets that cannot be
// seen, are left alone. Both lists are sorted.
func Denials(sourceUID string, current protocol.Election, observed []Observed) (deny, lift []string) {
	for _, o := range observed {
		if !o.Exists || o.Err != nil || o.State.Phase == protocol.PhaseBound {
			continue
		}
		want := o.Excluded != "" && !current.Elected() || current.Elected() && o.Target != current.Target
		switch has := deniedBy(sourceUID, o.Denied); {
		case want && !has:
			deny = append(deny, o.Target)
		case !want && has:
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
