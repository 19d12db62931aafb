package candidate

import (
	"crypto/sha256"
	"encoding/binary"
	"math"
	"sort"

	corev1 "k8s.io/api/core/v1"

	"github.com/flotilla-dev/flotilla/pkg/target"
)

// Eligible returns the targets that get a candidate of the source pod. With
// limit <= 0 that is every target. Otherwise the pod keeps the targets that
// hold its candidates, the first targets of its order join them until it
// has limit, and the set widens by limit for as long as every target in it has
// failed the pod: its candidate is unschedulable there, or the target is
// unreachable. The set is computed from what the targets hold and report,
// so it survives agent restarts without any state of its own.
//
// The order is a weighted rendezvous hash of the pod's UID: the weights are
// the targets' prospects (see Prospect; nil: all alike), so each pod draws
// its targets at random in proportion to them, pods spread over the
// targets, and the promising ones get more. A pod's choice holds once its
// candidates are there, however the weights change after.
//
// Targets that do not serve the pod's namespace (a namespaced Target of
// another namespace) are never eligible.
func Eligible(source *corev1.Pod, sourceCluster string, targets []*target.Target, limit int, prospect func(*target.Target) Prospect) []*target.Target {
	targets = serving(targets, source.Namespace)
	if limit <= 0 || limit >= len(targets) {
		return targets
	}
	var chosen, rest []*target.Target
	for _, t := range targets {
		if t.Holds(t.NamespaceFor(source.Namespace), CandidateNameOf(source, sourceCluster, t.Name), source.UID) {
			chosen = append(chosen, t)
		} else {
			rest = append(rest, t)
		}
	}
	if len(chosen) >= limit && !AllFailed(chosen, source, sourceCluster) {
		// The pod's draw was made: no need to weigh the others.
		return chosen
	}
	rest = rendezvous(string(source.UID), rest, prospect)
	take := max(limit-len(chosen), 0)
	for len(rest) > 0 {
		n := min(take, len(rest))
		chosen, rest = append(chosen, rest[:n]...), rest[n:]
		if !AllFailed(chosen, source, sourceCluster) {
			break
		}
		take = limit
	}
	return chosen
}

// ToFanOut is where the source pod's candidates go now: while one of its
// candidates stands elected (elected), only the targets that hold one
// already, for that candidate is reserved or bound, and a cache that has
// not yet seen the pod bound and its other candidates deleted must not
// draw the pod again; otherwise Eligible.
func ToFanOut(source *corev1.Pod, sourceCluster string, targets []*target.Target, limit int, prospect func(*target.Target) Prospect, elected bool) []*target.Target {
	if elected {
		return Holding(source, sourceCluster, targets)
	}
	return Eligible(source, sourceCluster, targets, limit, prospect)
}

// Holding are the targets that hold a candidate of the source pod (or
// that this agent has just created one in).
func Holding(source *corev1.Pod, sourceCluster string, targets []*target.Target) []*target.Target {
	var out []*target.Target
	for _, t := range targets {
		if t.Holds(t.NamespaceFor(source.Namespace), CandidateNameOf(source, sourceCluster, t.Name), source.UID) {
			out = append(out, t)
		}
	}
	return out
}

// AllFailed reports whether every target is unreachable or has said it
// cannot schedule its candidate of the source pod.
func AllFailed(targets []*target.Target, source *corev1.Pod, sourceCluster string) bool {
	for _, t := range targets {
		if t.Err() != nil {
			continue
		}
		c, ok := t.Candidate(t.NamespaceFor(source.Namespace), CandidateNameOf(source, sourceCluster, t.Name))
		if !ok || target.Unschedulable(c) == "" {
			return false
		}
	}
	return true
}

// Invited splits the targets that serve the source pod's namespace by
// whether their invitation covers the namespace its candidate would go to;
// a target that is not invited there is skipped, never asked. A namespaced
// Target of another namespace is in neither: the pod is none of its
// business, so it gets no candidate through it and hears nothing of it.
func Invited(source *corev1.Pod, targets []*target.Target) (invited, not []*target.Target) {
	for _, t := range targets {
		if !t.Serves(source.Namespace) {
			continue
		}
		if t.Covers(t.NamespaceFor(source.Namespace)) {
			invited = append(invited, t)
		} else {
			not = append(not, t)
		}
	}
	return invited, not
}

// serving filters the targets that take pods of a source namespace.
func serving(targets []*target.Target, sourceNamespace string) []*target.Target {
	out := targets[:0:0]
	for _, t := range targets {
		if t.Serves(sourceNamespace) {
			out = append(out, t)
		}
	}
	return out
}

// rendezvous orders targets by weighted rendezvous hashing of key: each
// target draws u in (0, 1) from a hash of the key and its name, and the
// order is by ln(u) ÷ weight, highest first. That orders the targets as a
// draw without replacement in proportion to their weights would, and is
// the plain rendezvous order by u when the weights are equal.
func rendezvous(key string, targets []*target.Target, prospect func(*target.Target) Prospect) []*target.Target {
	weights := make([]float64, len(targets))
	for i, t := range targets {
		weights[i] = 1
		if prospect != nil {
			weights[i] = prospect(t).Weight()
		}
	}
	type scored struct {
		t     *target.Target
		score float64
	}
	s := make([]scored, len(targets))
	for i, t := range targets {
		// A cryptographic hash: FNV's high bits barely depend on the last
		// bytes, and target names often differ only there ("t1", "t2").
		sum := sha256.Sum256([]byte(key + "\x00" + t.Name))
		// 53 bits, as many as a float64 holds exactly; +1 keeps u above 0.
		u := (float64(binary.BigEndian.Uint64(sum[:8])>>11) + 1) / (1 << 53)
		s[i] = scored{t, math.Log(u) / weights[i]}
	}
	sort.Slice(s, func(i, j int) bool {
		if s[i].score != s[j].score {
			return s[i].score > s[j].score
		}
		return s[i].t.Name < s[j].t.Name
	})
	out := make([]*target.Target, len(s))
	for i := range s {
		out[i] = s[i].t
	}
	return out
}
