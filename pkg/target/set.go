package target

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// Set is the source agent's targets, by name. Targets are added and removed
// while the agent runs; readers get a snapshot.
type Set struct {
	mu       sync.RWMutex
	byName   map[string]*Target
	handlers []SetChangeHandler
	added    []func(*Target)
	// draining are the targets being deleted (Drain): out of the set, but
	// their virtual nodes still run pods.
	draining map[string]*Target
	// drained are the targets being deleted whose candidates that run no
	// pod are deleted (MarkDrained).
	drained map[string]bool
}

// NewSet builds a set from targets with distinct names.
func NewSet(targets ...*Target) *Set {
	s := &Set{byName: map[string]*Target{}}
	for _, t := range targets {
		s.byName[t.Name] = t
	}
	return s
}

// All returns the targets sorted by name.
func (s *Set) All() []*Target {
	s.mu.RLock()
	out := make([]*Target, 0, len(s.byName))
	for _, t := range s.byName {
		out = append(out, t)
	}
	s.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Serving returns the targets, sorted by name, that take pods of a source
// namespace: every ClusterTarget and the namespace's own Targets. A
// namespaced Target of another namespace never acts for, or speaks of, a
// pod of this one.
func (s *Set) Serving(sourceNamespace string) []*Target {
	all := s.All()
	out := all[:0]
	for _, t := range all {
		if t.Serves(sourceNamespace) {
			out = append(out, t)
		}
	}
	return out
}

// Get returns a target by name.
func (s *Set) Get(name string) (*Target, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	t, ok := s.byName[name]
	return t, ok
}

// OfPod returns the target a source pod bound to a virtual node runs in
// (Target.Runs), a target being drained too: the pods bound to its node run
// there until they end, and count where they run. The target is the one
// the pod's election names, not one found by the node's name: a node of
// the old namespaced form could be two targets' (see
// protocol.LegacyVirtualNodeName). A pod without an election is its
// node's target's.
func (s *Set) OfPod(pod *corev1.Pod) (*Target, bool) {
	if pod.Spec.NodeName == "" {
		return nil, false
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if name := ElectedTo(pod); name != "" {
		t := s.byName[name]
		if t == nil {
			t = s.draining[name]
		}
		if t != nil && t.Runs(pod) {
			return t, true
		}
		return nil, false
	}
	var found *Target
	for _, m := range []map[string]*Target{s.byName, s.draining} {
		for _, t := range m {
			// Virtual node names are one-to-one and owned; the least
			// name wins all the same, never the map's order.
			if t.Runs(pod) && (found == nil || t.Name < found.Name) {
				found = t
			}
		}
	}
	return found, found != nil
}

// Add puts a target in the set, in place of one of the same name, and gives
// it every candidate handler of the set. Call it before the target starts,
// so no event is missed; the OnAdd functions run after.
func (s *Set) Add(t *Target) {
	s.mu.Lock()
	s.byName[t.Name] = t
	delete(s.draining, t.Name)
	delete(s.drained, t.Name)
	handlers := slices.Clone(s.handlers)
	added := slices.Clone(s.added)
	s.mu.Unlock()
	for _, f := range handlers {
		t.OnCandidateChange(f.of(t))
	}
	for _, f := range added {
		f(t)
	}
}

// Reopened runs the OnAdd functions for a target of the set that takes new
// pods again (its virtual node uncordoned): the pods that wait may go there.
func (s *Set) Reopened(t *Target) {
	s.mu.RLock()
	added := slices.Clone(s.added)
	in := s.byName[t.Name] == t
	s.mu.RUnlock()
	if !in {
		return
	}
	for _, f := range added {
		f(t)
	}
}

// Remove takes a target out of the set if it is still the one given,
// draining or not.
func (s *Set) Remove(t *Target) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byName[t.Name] == t {
		delete(s.byName, t.Name)
	}
	if s.draining[t.Name] == t {
		delete(s.draining, t.Name)
	}
}

// Drain takes a deleted target out of the set, if it is still the one
// given: no pod gets a candidate there any more, while OfPod still
// finds it for the pods that run there.
func (s *Set) Drain(t *Target) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byName[t.Name] != t {
		return
	}
	delete(s.byName, t.Name)
	if s.draining == nil {
		s.draining = map[string]*Target{}
	}
	s.draining[t.Name] = t
}

// Draining is the deleted target of that name whose drain has not ended:
// out of the set, while its pods, and a bound candidate whose source pod
// is not bound yet, may still run there.
func (s *Set) Draining(name string) (*Target, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	t, ok := s.draining[name]
	return t, ok
}

// MarkDrained records that the target of that name, deleted, is out of
// the set and its candidates that ran no pod are deleted: an election that
// names it and whose pod is not bound there can never bind, and may be
// released, though the target's object stays while pods still run there.
func (s *Set) MarkDrained(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.byName[name]; ok {
		return
	}
	if s.drained == nil {
		s.drained = map[string]bool{}
	}
	s.drained[name] = true
}

// Drained reports whether the target of that name was marked drained and
// has not been added again since.
func (s *Set) Drained(name string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.drained[name]
}

// SetChangeHandler is told of a change of a candidate in target t, as a
// ChangeHandler is.
type SetChangeHandler func(t *Target, old, cand *corev1.Pod)

// of is f for the changes of t's candidates.
func (f SetChangeHandler) of(t *Target) ChangeHandler {
	return func(old, cand *corev1.Pod) { f(t, old, cand) }
}

// OnCandidateChange registers f for every change of a candidate in every
// target, present and future, with the target and the cached object an
// update replaces (ChangeHandler).
func (s *Set) OnCandidateChange(f SetChangeHandler) {
	s.mu.Lock()
	s.handlers = append(s.handlers, f)
	targets := make([]*Target, 0, len(s.byName))
	for _, t := range s.byName {
		targets = append(targets, t)
	}
	s.mu.Unlock()
	for _, t := range targets {
		t.OnCandidateChange(f.of(t))
	}
}

// OnAdd registers f, called with every target added from now on, and with
// every target that takes new pods again (Reopened).
func (s *Set) OnAdd(f func(*Target)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.added = append(s.added, f)
}

// Delegates adapts a target to what its virtual node needs: the delegate of a
// source pod is its candidate in that target.
type Delegates struct {
	Target        *Target
	SourceCluster string
}

func (d Delegates) name(source *corev1.Pod) string {
	return protocol.CandidateName(d.SourceCluster, d.Target.Name, source.Namespace, source.Name, string(source.UID))
}

func (d Delegates) namespace(source *corev1.Pod) string {
	return d.Target.NamespaceFor(source.Namespace)
}

// HasSynced reports whether the target's cache has been listed; the virtual
// node waits for it, since "no delegate" from an empty cache would be a lie.
func (d Delegates) HasSynced() bool { return d.Target.HasSynced() }

// Get returns the delegate of a source pod, or nil when there is none.
func (d Delegates) Get(source *corev1.Pod) (*corev1.Pod, error) {
	if !d.Target.Serves(source.Namespace) {
		return nil, d.notServed(source)
	}
	if !d.Target.HasSynced() {
		return nil, fmt.Errorf("target %s: candidates not listed yet: %v", d.Target.Name, d.Target.Err())
	}
	ns := d.namespace(source)
	if !d.Target.Covers(ns) {
		// Not "no delegate": the source no longer watches that namespace
		// (the invitation changed), so it cannot tell; the pod keeps its
		// last status rather than being failed.
		return nil, fmt.Errorf("target %s: the invitation no longer covers namespace %s", d.Target.Name, ns)
	}
	pod, ok := d.Target.Candidate(ns, d.name(source))
	if !ok {
		return nil, nil
	}
	return pod, nil
}

// Lost reports whether the target's API server has no delegate of a
// source pod.
func (d Delegates) Lost(ctx context.Context, source *corev1.Pod) (bool, error) {
	if !d.Target.Serves(source.Namespace) {
		return false, d.notServed(source)
	}
	live, err := d.Target.Live(ctx, d.namespace(source), d.name(source))
	return live == nil && err == nil, err
}

// Delete deletes the delegate of a source pod; a pod of a namespace the
// target does not serve has none there.
func (d Delegates) Delete(ctx context.Context, source *corev1.Pod) error {
	if !d.Target.Serves(source.Namespace) {
		return nil
	}
	return d.Target.Delete(ctx, d.namespace(source), d.name(source), "")
}

func (d Delegates) notServed(source *corev1.Pod) error {
	return fmt.Errorf("target %s serves only the pods of namespace %s, not %s/%s", d.Target.Name, d.Target.Namespace, source.Namespace, source.Name)
}

// OnChange calls f with every changed delegate.
func (d Delegates) OnChange(f func(delegate *corev1.Pod)) { d.Target.OnCandidate(f) }
