package candidate

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/flotilla-dev/flotilla/pkg/draw"
	"github.com/flotilla-dev/flotilla/pkg/target"
)

// View is what the fan-out decisions know of one target for one source
// pod: what the target holds of the pod and what it answered, as plain
// values. ViewsOf reads them from live targets; the decisions (Eligible,
// ToFanOut, Holding, AllFailed, Invited) are functions of views alone.
type View struct {
	// Name is the target's name: the rendezvous order hashes it, ties are
	// broken by it, and Pick finds the target by it.
	Name string
	// Serves is whether the target takes pods of the pod's namespace: a
	// namespaced Target takes only its own namespace's.
	Serves bool
	// Covers is whether the target's invitation covers the namespace the
	// pod's candidate would go to there (after its namespace mapping);
	// true for a target that was not invited, whose namespaces are open.
	Covers bool
	// Holds is whether the target holds a candidate of the pod (of its
	// UID, not being deleted) or this agent has just created one there.
	Holds bool
	// Failed is whether the target has failed the pod: it is unreachable,
	// or its candidate of the pod says it is unschedulable.
	Failed bool
	// Weight is the target's share of the pod's first candidates against
	// the others' (Prospect.Weight); zero or less weighs as 1, so views
	// without weights are all alike.
	Weight float64
	// Sure is whether a miss there is unlikely (Prospect.Sure): a pod that
	// draws it first gets that one candidate alone (ToFanOut).
	Sure bool
	// Overdue is whether the pod's candidate there has waited for an answer
	// (a reservation, or no node) longer than OverdueAfterFor the
	// target's answer time.
	Overdue bool
	// Waiting is whether the pod's candidate there waits for an answer:
	// it holds no reservation, is not bound, and the target has not
	// failed the pod.
	Waiting bool
}

// ViewsOf reads the targets' views for the source pod, in the targets'
// order; prospect weighs them (nil: all alike). It is the only part of the
// fan-out decisions that reads a live target.
func ViewsOf(source *corev1.Pod, sourceCluster string, targets []*target.Target, prospect func(*target.Target) Prospect) []View {
	return Weighed(Sight(source, sourceCluster, targets), prospect)
}

// Sighting is what one target's cache says of a source pod: its view as no
// prospect weighs it, and what a prospect's weighing needs of its
// candidate there. A caller that weighs the same targets more than once
// (a subset, or with prospects) reads them once with Sight and weighs the
// sightings with Weighed.
type Sighting struct {
	Target *target.Target
	View   View
	// waitingSince is when the pod's candidate there was created, while it
	// waits for an answer (it holds no reservation, is not bound, and the
	// target has not failed the pod); zero otherwise.
	waitingSince time.Time
}

// Sight reads the targets' caches for the source pod, in the targets'
// order.
func Sight(source *corev1.Pod, sourceCluster string, targets []*target.Target) []Sighting {
	out := make([]Sighting, len(targets))
	for i, t := range targets {
		ns, name := t.NamespaceFor(source.Namespace), CandidateNameOf(source, sourceCluster, t.Name)
		s := Sighting{Target: t, View: View{
			Name:   t.Name,
			Serves: t.Serves(source.Namespace),
			Covers: t.Covers(ns),
			Holds:  t.Holds(ns, name, source.UID),
			Failed: t.Err() != nil,
			Weight: 1,
		}}
		if !s.View.Failed {
			c, ok := t.Candidate(ns, name)
			s.View.Failed = ok && target.Unschedulable(c) != ""
			if ok && !s.View.Failed && !c.CreationTimestamp.IsZero() && !target.ReservedOrBound(c) {
				s.waitingSince, s.View.Waiting = c.CreationTimestamp.Time, true
			}
		}
		out[i] = s
	}
	return out
}

// Weighed are the views of the sightings, in their order, weighed by
// prospect (nil: all alike): a target's weight and whether a miss there is
// unlikely, and whether the pod's candidate there has waited longer than
// its answer time.
func Weighed(sightings []Sighting, prospect func(*target.Target) Prospect) []View {
	views := make([]View, len(sightings))
	for i, s := range sightings {
		v := s.View
		if prospect != nil {
			p := prospect(s.Target)
			v.Weight, v.Sure = p.Weight(), p.Sure
			if !s.waitingSince.IsZero() {
				v.Overdue = p.Overdue(time.Since(s.waitingSince))
			}
		}
		views[i] = v
	}
	return views
}

// Pick is the targets the views name, in the views' order.
func Pick(targets []*target.Target, views []View) []*target.Target {
	byName := make(map[string]*target.Target, len(targets))
	for _, t := range targets {
		if _, ok := byName[t.Name]; !ok {
			byName[t.Name] = t
		}
	}
	var out []*target.Target
	for _, v := range views {
		if t, ok := byName[v.Name]; ok {
			out = append(out, t)
		}
	}
	return out
}

// Eligible returns the targets that get a candidate of the pod of UID uid.
// With limit <= 0 that is every target. Otherwise the pod keeps the targets
// that hold its candidates, the first targets of its order join them until
// it has limit, and the set widens by limit for as long as every target in
// it has failed the pod (its candidate is unschedulable there, or the
// target is unreachable) or holds its candidate Overdue (the target
// answers nothing: its scheduler may be down). The set is computed from
// what the targets hold and report, so it survives agent restarts without
// any state of its own.
//
// The order is a weighted rendezvous hash of the pod's UID: the weights are
// the targets' prospects (View.Weight), so each pod draws its targets at
// random in proportion to them, pods spread over the targets, and the
// promising ones get more. A pod's choice holds once its candidates are
// there, however the weights change after.
//
// Targets that do not serve the pod's namespace (a namespaced Target of
// another namespace) are never eligible.
func Eligible(views []View, uid string, limit int) []View {
	views = serving(views)
	if limit <= 0 || limit >= len(views) {
		return views
	}
	var chosen, rest []View
	for _, v := range views {
		if v.Holds {
			chosen = append(chosen, v)
		} else {
			rest = append(rest, v)
		}
	}
	if len(chosen) >= limit && !stalled(chosen) {
		// The pod's draw was made: no need to weigh the others.
		return chosen
	}
	rest = rendezvous(uid, rest)
	take := max(limit-len(chosen), 0)
	for len(rest) > 0 {
		n := min(take, len(rest))
		chosen, rest = append(chosen, rest[:n]...), rest[n:]
		if !stalled(chosen) {
			break
		}
		take = limit
	}
	return chosen
}

// ToFanOut is where the pod's candidates go now: while one of its
// candidates stands elected (elected), only the targets that hold one
// already, for that candidate is reserved or bound, and a cache that has
// not yet seen the pod bound and its other candidates deleted must not
// draw the pod again. Otherwise Eligible, but for one candidate where one
// is likely enough: a pod with none whose first target in its order is
// Sure (and reachable) gets that one alone, and a pod holding fewer than
// limit keeps them while none has failed or is Overdue; then the others of
// Eligible join.
func ToFanOut(views []View, uid string, limit int, elected bool) []View {
	if elected {
		return Holding(views)
	}
	if limit > 1 {
		served := serving(views)
		held := Holding(served)
		switch {
		case len(held) == 0 && len(served) > 1:
			if order := rendezvous(uid, served); order[0].Sure && !order[0].Failed && order[0].Covers {
				return order[:1]
			}
		case len(held) > 0 && len(held) < limit && !AllFailed(held) && !anyOverdue(held):
			return held
		}
	}
	return Eligible(views, uid, limit)
}

// stalled reports whether no view can still place the pod soon: every
// target has failed it (AllFailed), or holds its candidate Overdue (true of
// no view). A target whose scheduler stopped (its API server still
// answering, so its candidate is neither refused nor unschedulable) must
// not hold a pod whose other candidates missed: past the overdue bar the
// window widens as it does for a miss.
func stalled(views []View) bool {
	for _, v := range views {
		if !v.Failed && !v.Overdue {
			return false
		}
	}
	return true
}

// WidensWhenOverdue reports whether the views (a pod's window, as ToFanOut
// returned it) would widen once the candidates that wait there are
// Overdue: none is stalled yet, and every one has failed the pod, is
// overdue, or waits for an answer. Nothing but time makes a silent target
// overdue, so the caller looks at the pod again by then.
func WidensWhenOverdue(views []View) bool {
	if stalled(views) {
		return false
	}
	for _, v := range views {
		if !v.Failed && !v.Overdue && !v.Waiting {
			return false
		}
	}
	return true
}

// anyOverdue reports whether some view is Overdue.
func anyOverdue(views []View) bool {
	for _, v := range views {
		if v.Overdue {
			return true
		}
	}
	return false
}

// Holding are the targets that hold a candidate of the pod (or that this
// agent has just created one in).
func Holding(views []View) []View {
	var out []View
	for _, v := range views {
		if v.Holds {
			out = append(out, v)
		}
	}
	return out
}

// AllFailed reports whether every target is unreachable or has said it
// cannot schedule its candidate of the pod (true of no target).
func AllFailed(views []View) bool {
	for _, v := range views {
		if !v.Failed {
			return false
		}
	}
	return true
}

// Invited splits the targets that serve the pod's namespace by whether
// their invitation covers the namespace its candidate would go to; a
// target that is not invited there is skipped, never asked. A namespaced
// Target of another namespace is in neither: the pod is none of its
// business, so it gets no candidate through it and hears nothing of it.
func Invited(views []View) (invited, not []View) {
	for _, v := range views {
		if !v.Serves {
			continue
		}
		if v.Covers {
			invited = append(invited, v)
		} else {
			not = append(not, v)
		}
	}
	return invited, not
}

// serving filters the targets that take pods of the pod's namespace.
func serving(views []View) []View {
	out := views[:0:0]
	for _, v := range views {
		if v.Serves {
			out = append(out, v)
		}
	}
	return out
}

// rendezvous orders targets by weighted rendezvous hashing of key, in
// proportion to their weights (draw.Order).
func rendezvous(key string, views []View) []View {
	return draw.Order(key, views, func(v View) string { return v.Name }, func(v View) float64 { return v.Weight })
}
