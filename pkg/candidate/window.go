package candidate

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/target"
)

// Eligible returns the targets that get a candidate of the source pod. With
// max <= 0 that is every target. Otherwise the targets are ordered by
// rendezvous hashing of the pod's UID (so that pods spread evenly and each
// pod's order never changes), the first max get a candidate, and the window
// widens by max for as long as every target in it has failed the pod: its
// candidate is unschedulable there, or the target is unreachable. The window
// is computed from what the targets report, so it survives agent restarts
// without any state of its own.
//
// Targets that do not serve the pod's namespace (a namespaced Target of
// another namespace) are never eligible.
func Eligible(source *corev1.Pod, sourceCluster string, targets []*target.Target, max int) []*target.Target {
	targets = serving(targets, source.Namespace)
	if max <= 0 || max >= len(targets) {
		return targets
	}
	order := rendezvous(string(source.UID), targets)
	name := CandidateNameOf(source, sourceCluster)
	window := max
	for window < len(order) && AllFailed(order[:window], source.Namespace, name) {
		window += max
	}
	return order[:min(window, len(order))]
}

// AllFailed reports whether every target is unreachable or has said it
// cannot schedule the candidate name of a pod of sourceNamespace.
func AllFailed(targets []*target.Target, sourceNamespace, name string) bool {
	for _, t := range targets {
		if t.Err() != nil {
			continue
		}
		c, ok := t.Candidate(t.NamespaceFor(sourceNamespace), name)
		if !ok || Unschedulable(c) == "" {
			return false
		}
	}
	return true
}

// Invited splits the targets by whether their invitation covers the
// namespace the source pod's candidate would go to; a target that is not
// invited there is skipped, never asked.
func Invited(source *corev1.Pod, targets []*target.Target) (invited, not []*target.Target) {
	for _, t := range targets {
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

// Unschedulable is the target scheduler's reason for finding no node for a
// candidate, or "" when it has not said so.
//
// Waiting for the source is not failing: a candidate whose Permit timed
// out (its source was slow, failing over, or elected elsewhere) carries an
// Unschedulable condition until its next failure or binding, though it may
// be reserved again; the condition does not count while the target reports
// a reservation, nor when it is the Permit timeout's own, nor when the
// source's denial turned the candidate away.
func Unschedulable(c *corev1.Pod) string {
	if raw := c.Annotations[protocol.StateAnnotation]; raw != "" {
		var s protocol.State
		if json.Unmarshal([]byte(raw), &s) == nil && (s.Phase == protocol.PhaseReserved || s.Phase == protocol.PhaseBound) {
			return ""
		}
	}
	for _, cond := range c.Status.Conditions {
		if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable &&
			!strings.Contains(cond.Message, permitTimeoutMessage) && !strings.Contains(cond.Message, protocol.DeniedMessage) {
			return cond.Message
		}
	}
	return ""
}

// permitTimeoutMessage is how kube-scheduler's framework words a Permit
// wait that timed out (framework/runtime/waiting_pods_map.go), which then
// becomes the candidate's Unschedulable condition.
const permitTimeoutMessage = "rejected due to timeout after waiting"

func rendezvous(key string, targets []*target.Target) []*target.Target {
	type scored struct {
		t     *target.Target
		score uint64
	}
	s := make([]scored, len(targets))
	for i, t := range targets {
		// A cryptographic hash: FNV's high bits barely depend on the last
		// bytes, and target names often differ only there ("t1", "t2").
		sum := sha256.Sum256([]byte(key + "\x00" + t.Name))
		s[i] = scored{t, binary.BigEndian.Uint64(sum[:8])}
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
