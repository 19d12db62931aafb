package vnode

import (
	"context"
	"maps"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// State is what a virtual node says about its target.
type State struct {
	// Ready: the target's API answers the agent. Reason and Message say
	// why not; Since is when Ready last changed.
	Ready           bool
	Reason, Message string
	Since           time.Time
	// Capacity is the node's capacity and allocatable: what the target
	// holds for this source. Nil: DefaultCapacity, until the target
	// publishes a summary.
	Capacity corev1.ResourceList
	// Free is what the target has free of it, shown in the FreeAnnotation.
	Free corev1.ResourceList
	// Labels are labels of the target's nodes, e.g. their common region and
	// zone; Config.Labels and the labels every virtual node has win.
	Labels map[string]string
}

func (a State) equal(b State) bool {
	return a.Ready == b.Ready && a.Reason == b.Reason && a.Message == b.Message && a.Since.Equal(b.Since) &&
		equality.Semantic.DeepEqual(a.Capacity, b.Capacity) && equality.Semantic.DeepEqual(a.Free, b.Free) &&
		maps.Equal(a.Labels, b.Labels)
}

// Status holds a virtual node's State while the agent learns about its
// target; the running node follows each change with one write of the Node
// (changes made meanwhile coalesce), never one per pod.
type Status struct {
	mu      sync.Mutex
	state   State
	changed chan struct{}
	// readyChanged is closed and replaced when Ready flips, so the pods of
	// the node are looked at again.
	readyChanged chan struct{}
}

// NewStatus returns a Status that starts Ready with the default capacity.
func NewStatus() *Status {
	return &Status{
		state:        State{Ready: true, Since: time.Now()},
		changed:      make(chan struct{}, 1),
		readyChanged: make(chan struct{}),
	}
}

// Get returns the current State.
func (s *Status) Get() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state
}

// SetReady records whether the target answers, and why not.
func (s *Status) SetReady(ready bool, reason, message string) {
	s.update(func(st *State) {
		if st.Ready != ready {
			st.Since = time.Now()
		}
		st.Ready, st.Reason, st.Message = ready, reason, message
	})
}

// SetResources records the target's capacity, free resources and labels.
func (s *Status) SetResources(capacity, free corev1.ResourceList, labels map[string]string) {
	s.update(func(st *State) {
		st.Capacity, st.Free, st.Labels = capacity.DeepCopy(), free.DeepCopy(), maps.Clone(labels)
	})
}

func (s *Status) update(f func(*State)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	before := s.state
	f(&s.state)
	if before.equal(s.state) {
		return
	}
	if before.Ready != s.state.Ready {
		close(s.readyChanged)
		s.readyChanged = make(chan struct{})
	}
	select {
	case s.changed <- struct{}{}:
	default: // a change is pending already
	}
}

// readyFlips returns a channel closed at the next change of Ready.
func (s *Status) readyFlips() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.readyChanged
}

// provider is virtual-kubelet's NodeProvider of a virtual node: it hands the
// node controller a new Node whenever the Status changes.
type provider struct {
	status *Status
	node   func(State) *corev1.Node
}

func (p provider) Ping(ctx context.Context) error { return ctx.Err() }

func (p provider) NotifyNodeStatus(ctx context.Context, cb func(*corev1.Node)) {
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-p.status.changed:
				cb(p.node(p.status.Get()))
			}
		}
	}()
}
