package reservation

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/pkg/candidate"
	"github.com/flotilla-dev/flotilla/pkg/debugstate"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/target"
)

// ElectionInFlight is a source pod whose election names a target and that
// is not bound yet, as /debug/state shows it.
type ElectionInFlight struct {
	// Pod is "<namespace>/<name>".
	Pod string    `json:"pod"`
	UID types.UID `json:"uid"`
	// Election is the record on the pod; Error says why it does not parse.
	Election   string `json:"election"`
	Error      string `json:"error,omitempty"`
	Target     string `json:"target,omitempty"`
	Generation int64  `json:"generation,omitempty"`
	Nonce      string `json:"nonce,omitempty"`
	// Created is the pod's creation; the record does not say when it was
	// written.
	Created time.Time `json:"created"`
	// Candidate is the elected candidate as the agent's cache of its target
	// shows it; absent when the cache does not hold it (or the target is
	// not running).
	Candidate *ElectedCandidate `json:"candidate,omitempty"`
}

// ElectedCandidate is what the source sees of an elected candidate.
type ElectedCandidate struct {
	// Phase, Node, Nonce and Reason are its target's last report.
	Phase  protocol.Phase `json:"phase,omitempty"`
	Node   string         `json:"node,omitempty"`
	Nonce  string         `json:"nonce,omitempty"`
	Reason string         `json:"reason,omitempty"`
	// Allowed: it carries the allowance of this very election.
	Allowed bool `json:"allowed"`
	// BoundTo is its spec.nodeName: bound, the source pod's binding is next.
	BoundTo string `json:"boundTo,omitempty"`
}

// ElectionsInFlight picks, among source pods, those elected and not bound,
// sorted by namespace and name, at most limit of them. candidateOf returns
// the elected candidate of a pod in a target from the source's cache, or nil.
func ElectionsInFlight(pods []*corev1.Pod, candidateOf func(pod *corev1.Pod, target string) *corev1.Pod, limit int) debugstate.List[ElectionInFlight] {
	var out []ElectionInFlight
	for _, pod := range pods {
		raw := pod.Annotations[protocol.ElectionAnnotation]
		if raw == "" || pod.Spec.NodeName != "" || !isSourcePod(pod) {
			continue
		}
		e, err := protocol.ParseElection(raw)
		if err == nil && !e.Elected() {
			continue // withdrawn: nothing in flight
		}
		f := ElectionInFlight{
			Pod: pod.Namespace + "/" + pod.Name, UID: pod.UID, Election: raw, Created: pod.CreationTimestamp.Time,
			Target: e.Target, Generation: e.Generation, Nonce: e.Nonce,
		}
		if err != nil {
			f.Error = err.Error()
		} else if cand := candidateOf(pod, e.Target); cand != nil {
			f.Candidate = electedCandidate(cand, string(pod.UID), e)
		}
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pod < out[j].Pod })
	return debugstate.Bounded(out, limit)
}

func electedCandidate(cand *corev1.Pod, sourceUID string, e protocol.Election) *ElectedCandidate {
	c := &ElectedCandidate{BoundTo: cand.Spec.NodeName}
	var s protocol.State
	if json.Unmarshal([]byte(cand.Annotations[protocol.StateAnnotation]), &s) == nil {
		c.Phase, c.Node, c.Nonce, c.Reason = s.Phase, s.Node, s.Nonce, s.Reason
	}
	if a, err := protocol.ParseAllowance(cand.Annotations[protocol.AllowedAnnotation]); err == nil {
		c.Allowed = a == protocol.Allowance{SourceUID: sourceUID, Generation: e.Generation, Nonce: e.Nonce}
	}
	return c
}

// ElectionsProvider is the provider of the "elections" of /debug/state:
// it reads the source pods from reader (the manager's cache, on every
// replica) and their elected candidates from the targets' caches (on the
// leader, which runs the targets).
func ElectionsProvider(reader client.Reader, targets *target.Set, sourceCluster string, limit int) debugstate.Provider {
	return func() any {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		list := &corev1.PodList{}
		// Read-only, so the cache's objects need no copy.
		if err := reader.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
			return fmt.Errorf("listing source pods from the cache: %w", err)
		}
		pods := make([]*corev1.Pod, len(list.Items))
		for i := range list.Items {
			pods[i] = &list.Items[i]
		}
		return ElectionsInFlight(pods, func(pod *corev1.Pod, name string) *corev1.Pod {
			t, ok := targets.Get(name)
			if !ok {
				return nil
			}
			cand, ok := candidate.Of(t, pod, sourceCluster)
			if !ok {
				return nil
			}
			return cand
		}, limit)
	}
}
