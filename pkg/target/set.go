package target

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// Set is the source agent's targets, by name.
type Set struct {
	byName map[string]*Target
	names  []string
}

// NewSet builds a set from targets with distinct names.
func NewSet(targets ...*Target) *Set {
	s := &Set{byName: map[string]*Target{}}
	for _, t := range targets {
		s.byName[t.Name] = t
		s.names = append(s.names, t.Name)
	}
	sort.Strings(s.names)
	return s
}

// All returns the targets sorted by name.
func (s *Set) All() []*Target {
	out := make([]*Target, 0, len(s.names))
	for _, n := range s.names {
		out = append(out, s.byName[n])
	}
	return out
}

// Get returns a target by name.
func (s *Set) Get(name string) (*Target, bool) {
	t, ok := s.byName[name]
	return t, ok
}

// ByVirtualNode returns the target a virtual node stands for.
func (s *Set) ByVirtualNode(node string) (*Target, bool) {
	for _, t := range s.byName {
		if protocol.VirtualNodeName("", t.Name) == node {
			return t, true
		}
	}
	return nil, false
}

// Delegates adapts a target to what its virtual node needs: the delegate of a
// source pod is its candidate in that target.
type Delegates struct {
	Target        *Target
	SourceCluster string
}

func (d Delegates) name(source *corev1.Pod) string {
	return protocol.CandidateName(d.SourceCluster, source.Namespace, source.Name, string(source.UID))
}

// HasSynced reports whether the target's cache has been listed; the virtual
// node waits for it, since "no delegate" from an empty cache would be a lie.
func (d Delegates) HasSynced() bool { return d.Target.HasSynced() }

// Get returns the delegate of a source pod, or nil when there is none.
func (d Delegates) Get(source *corev1.Pod) (*corev1.Pod, error) {
	if !d.Target.HasSynced() {
		return nil, fmt.Errorf("target %s: candidates not listed yet: %v", d.Target.Name, d.Target.Err())
	}
	pod, ok := d.Target.Candidate(source.Namespace, d.name(source))
	if !ok {
		return nil, nil
	}
	return pod, nil
}

// Delete deletes the delegate of a source pod.
func (d Delegates) Delete(ctx context.Context, source *corev1.Pod) error {
	return d.Target.Delete(ctx, source.Namespace, d.name(source), "")
}

// OnChange calls f with every changed delegate.
func (d Delegates) OnChange(f func(delegate *corev1.Pod)) { d.Target.OnCandidate(f) }
