package reservation

import (
	"slices"
	"time"

	"github.com/flotilla-dev/flotilla/pkg/placement"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// Input is everything one decision about a source pod rests on, as plain
// values: the election on the pod, what each target reports about its
// candidate, and, under a placement policy, what the policy weighs them
// with. The controller observes it; Decide is a function of it alone.
type Input struct {
	SourceUID string
	Election  protocol.Election
	// Observed is one entry per target that holds (or should hold) a
	// candidate of the pod. An entry whose Excluded is already set (a
	// target the policy does not send the pod to now) is never elected.
	Observed []Observed
	// Policy is nil when no placement policy governs the pod.
	Policy *Judgement
	// Now is the decision's clock, for the policy's scoring window.
	Now time.Time
	// Gang is nil when the pod is in no gang.
	Gang *GangGate
}

// GangGate is what a pod's gang lets it do now (pkg/gang decides it over
// every member).
type GangGate struct {
	// Target is where the pod may stand elected: its reservation there
	// may be elected, and no other. "" for nowhere: the gang does not hold
	// enough places yet.
	Target string
	// Allow is whether the pod, elected, may be allowed to bind: enough
	// members stand elected on reservations they hold.
	Allow bool
	// Why is why the gang holds the pod back, when it does.
	Why string
}

// Judgement is what a placement policy weighs a pod's reservations with.
type Judgement struct {
	// Constraints of the spread, in the order of the domains' values; none
	// when the policy does not spread.
	Constraints []placement.Constraint
	// Weight multiplies the spread score.
	Weight int64
	// Known are the domains the selected targets offer, so an empty one
	// counts in the skew.
	Known []placement.Domain
	// Placed has one domain per sibling of the pod's workload that is
	// bound or elected, including the elections this agent wrote that its
	// cache does not show yet.
	Placed []placement.Domain
	// Preference is, per target, the weights of the policy's preferred
	// affinity terms it matches.
	Preference map[string]int64
	// Window, when set, lets a first election wait for more reservations.
	Window *Window
}

// Window is a policy's scoring window as of one decision: it stays open
// until Candidates reservations may be elected or Timeout has passed since
// FirstReserved.
type Window struct {
	Candidates    int
	Timeout       time.Duration
	FirstReserved time.Time
}

// Decide is the next step for one source pod. Every election it makes
// (the first, a re-election after the elected reservation ended, the
// elected target's new reservation) is of a reservation the policy judged
// against in.Policy's counts: there is no path that elects around the
// judgement. Decision.Observed are the observations as judged.
func Decide(in Input) Decision {
	observed := gate(in.Gang, judge(in.Policy, in.Observed))
	if in.Policy != nil && in.Policy.Window != nil && !in.Election.Elected() && !anyBound(observed) {
		if wait, open := windowOpen(*in.Policy.Window, in.Now, observed); open {
			return Decision{Observed: observed, Wait: wait}
		}
	}
	d := step(in.SourceUID, in.Election, observed)
	d.Observed = observed
	if in.Gang != nil && !in.Gang.Allow {
		// Elected, but its gang is not: the reservation is held, and
		// nothing binds until enough members are elected.
		d.Allow = nil
	}
	return d
}

// gate excludes, for a gang member, every reservation but the one its
// gang lets it stand elected on.
func gate(g *GangGate, observed []Observed) []Observed {
	if g == nil {
		return observed
	}
	for i, o := range observed {
		if o.Target != g.Target && o.Excluded == "" {
			why := g.Why
			if why == "" {
				why = "its gang goes to target " + g.Target
			}
			observed[i].Excluded = "gang: " + why
		}
	}
	return observed
}

// Elects reports whether the decision elects a reservation (rather than
// keeping, withdrawing or binding): the decisions a workload's siblings
// must take one at a time.
func (d Decision) Elects() bool { return d.Elect != nil && d.Elect.Elected() }

// judge returns the observations with the policy's verdict on each
// reservation that may be elected: the bonus of its spread score and
// preferences, or why it may not be elected. A reservation counts in the
// domain of the node its target reserved (Observed.Domain); one whose
// domain is not known is excluded by a DoNotSchedule constraint, as
// kube-scheduler filters out a node without the constraint's key; under
// ScheduleAnyway alone it may be elected, and scores as such a node does:
// lowest.
func judge(j *Judgement, observed []Observed) []Observed {
	out := slices.Clone(observed)
	if j == nil {
		return out
	}
	var options []placement.Option
	index := map[string]int{}
	for i, o := range out {
		if !o.Exists || o.State.Phase != protocol.PhaseReserved || o.Excluded != "" {
			continue
		}
		pref := j.Preference[o.Target]
		if len(j.Constraints) == 0 {
			out[i].Bonus = pref
			continue
		}
		if o.Domain == nil && filters(j.Constraints) {
			out[i].Excluded = "its domain is not known (its target did not report the node's labels, and its candidate was not pinned to one domain)"
			continue
		}
		index[o.Target] = i
		options = append(options, placement.Option{Cluster: o.Target, Domain: o.Domain, Score: o.State.Score + pref})
	}
	for _, v := range placement.Evaluate(j.Constraints, j.Weight, j.Known, j.Placed, options) {
		i := index[v.Cluster]
		out[i].Excluded = v.Excluded
		out[i].Bonus = v.Total - out[i].State.Score
	}
	return out
}

// filters reports whether a constraint is DoNotSchedule: one that filters
// rather than only scores.
func filters(constraints []placement.Constraint) bool {
	return slices.ContainsFunc(constraints, func(c placement.Constraint) bool { return c.WhenUnsatisfiable == placement.DoNotSchedule })
}

// windowOpen reports whether the scoring window still waits for more
// reservations, and how long at most.
func windowOpen(w Window, now time.Time, observed []Observed) (time.Duration, bool) {
	reserved := 0
	for _, o := range observed {
		if o.Exists && o.State.Phase == protocol.PhaseReserved && o.Excluded == "" {
			reserved++
		}
	}
	if reserved == 0 || w.FirstReserved.IsZero() {
		return 0, false
	}
	left := w.Timeout - now.Sub(w.FirstReserved)
	if reserved >= w.Candidates || left <= 0 {
		return 0, false
	}
	return left, true
}

// decide is the decision Reconcile applies: Decide. Only a test build with
// a planted-bug tag replaces it (planted_*.go), so that the chaos and
// scenario tests can show their checkers catch a broken election; no
// production binary holds those files.
var decide = Decide
