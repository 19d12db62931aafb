package reservation

import (
	"maps"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/candidate"
	"github.com/flotilla-dev/flotilla/pkg/target"
)

// TargetReads counts, per target name, the reads of what a target's cache
// holds of a pod (Views) and of its ClusterSummary (Summaries).
type TargetReads struct {
	mu               sync.Mutex
	views, summaries map[string]int
}

// CountTargetReads counts the reads of every target until the test ends.
func CountTargetReads(t *testing.T) *TargetReads {
	r := &TargetReads{views: map[string]int{}, summaries: map[string]int{}}
	prevSight, prevSummary := sight, readSummary
	t.Cleanup(func() { sight, readSummary = prevSight, prevSummary })
	sight = func(source *corev1.Pod, sourceCluster string, targets []*target.Target) []candidate.Sighting {
		r.mu.Lock()
		for _, tg := range targets {
			r.views[tg.Name]++
		}
		r.mu.Unlock()
		return prevSight(source, sourceCluster, targets)
	}
	readSummary = func(tg *target.Target) *v1alpha1.ClusterSummaryStatus {
		r.mu.Lock()
		r.summaries[tg.Name]++
		r.mu.Unlock()
		return prevSummary(tg)
	}
	return r
}

// Take returns the counts since the last Take, and starts them again.
func (r *TargetReads) Take() (views, summaries map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	views, summaries = maps.Clone(r.views), maps.Clone(r.summaries)
	clear(r.views)
	clear(r.summaries)
	return views, summaries
}

// SendChanges has c send the pods it wants looked at again to changes, as
// its controller's queue receives them.
func (c *Controller) SendChanges(changes chan<- event.TypedGenericEvent[*corev1.Pod]) {
	c.changes = changes
}

// PublishFree has every target publish free as the free room of its
// ClusterSummary until the test ends, and no other field.
func PublishFree(t *testing.T, free corev1.ResourceList) {
	prev := readSummary
	t.Cleanup(func() { readSummary = prev })
	readSummary = func(*target.Target) *v1alpha1.ClusterSummaryStatus {
		return &v1alpha1.ClusterSummaryStatus{Free: free}
	}
}

// GangRecheck and GangElectedRecheck are how soon an elected member
// waiting for its gang looks again: the poller, and the others.
const (
	GangRecheck        = gangRecheck
	GangElectedRecheck = gangElectedRecheck
)

// CountMemberReads counts the reads of a gang member's candidate in a
// target's cache made while a round looks at its gang, until the test
// ends.
func CountMemberReads(t *testing.T) *atomic.Int64 {
	n := &atomic.Int64{}
	prev := memberCandidate
	t.Cleanup(func() { memberCandidate = prev })
	memberCandidate = func(tg *target.Target, source *corev1.Pod, sourceCluster string) (*corev1.Pod, bool) {
		n.Add(1)
		return prev(tg, source, sourceCluster)
	}
	return n
}

// Restart gives h a controller of the same configuration that remembers
// nothing, as after the agent restarted: its exported fields (what
// cmd/agent sets) are copied, its unexported ones (what it learns as it
// runs) start empty. Copied by reflection, so that a field added later is
// not silently left out of the restarted controller.
func (c *Controller) Restart() *Controller {
	old := reflect.ValueOf(c).Elem()
	restarted := reflect.New(old.Type())
	for i := range old.NumField() {
		if old.Type().Field(i).IsExported() {
			restarted.Elem().Field(i).Set(old.Field(i))
		}
	}
	return restarted.Interface().(*Controller)
}
