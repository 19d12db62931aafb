package reservation

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// spreadWaiters remembers, per workload, the unplaced pods whose targets
// the spread narrowed (a target excluded, its candidate deleted). A
// sibling elected, withdrawn or deleted changes the counts they were
// narrowed by, so each such change sends them to the queue again: nothing
// else would, once their candidates in the excluded targets are gone.
//
// A pod begins before it counts its siblings and ends with wait or done.
// A change between the two would otherwise be missed: wait reports it, and
// the pod looks again at once.
type spreadWaiters struct {
	mu    sync.Mutex
	byKey map[string]*waiting
}

type waiting struct {
	// changes counts the changes of the siblings since the entry was made.
	changes uint64
	// counting is how many reconciles began and did not end yet: the entry
	// lives while they do, so their stamps stay comparable.
	counting int
	pods     map[types.NamespacedName]struct{}
}

// begin marks that a pod of workload key counts its siblings, and returns
// the stamp to pass to wait or done.
func (s *spreadWaiters) begin(key string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byKey == nil {
		s.byKey = map[string]*waiting{}
	}
	w := s.byKey[key]
	if w == nil {
		w = &waiting{}
		s.byKey[key] = w
	}
	w.counting++
	return w.changes
}

// wait ends a count that narrowed pod: it is sent to the queue at the next
// change of its siblings. It reports whether they changed since begin, in
// which case the pod should look again now.
func (s *spreadWaiters) wait(key string, pod types.NamespacedName, seen uint64) (changed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.byKey[key]
	if w == nil {
		return true
	}
	w.counting--
	if w.pods == nil {
		w.pods = map[types.NamespacedName]struct{}{}
	}
	w.pods[pod] = struct{}{}
	return w.changes != seen
}

// done ends a count (counted: begin was called) that did not narrow pod,
// or forgets a pod that is placed or gone (counted false).
func (s *spreadWaiters) done(key string, pod types.NamespacedName, counted bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.byKey[key]
	if w == nil {
		return
	}
	if counted {
		w.counting--
	}
	delete(w.pods, pod)
	s.prune(key, w)
}

// changed records a change of the siblings of key and returns the pods
// waiting on them, which it forgets (each registers again if it is still
// narrowed).
func (s *spreadWaiters) changed(key string) []types.NamespacedName {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.byKey[key]
	if w == nil {
		// Nobody counts or waits: nothing to tell.
		return nil
	}
	w.changes++
	out := make([]types.NamespacedName, 0, len(w.pods))
	for p := range w.pods {
		out = append(out, p)
	}
	w.pods = nil
	s.prune(key, w)
	return out
}

func (s *spreadWaiters) prune(key string, w *waiting) {
	if w.counting <= 0 && len(w.pods) == 0 {
		delete(s.byKey, key)
	}
}
