package reservation

import (
	"maps"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// rememberFullFor is how long a domain where a pod's candidate found no
// node is pinned to no more for that pod: nodes free up, and the domain
// may be the spread's best again.
const rememberFullFor = 2 * time.Minute

// fullMemo is, for one pod, when its candidate found no node in each
// domain of each target.
type fullMemo struct {
	mu sync.Mutex
	at map[string]map[string]time.Time
}

// noteFull records that the pod's candidate in target, pinned to the
// domain of that key, found no node.
func (c *Controller) noteFull(uid types.UID, target, domain string) {
	v, _ := c.fullDomains.LoadOrStore(uid, &fullMemo{at: map[string]map[string]time.Time{}})
	m := v.(*fullMemo)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.at[target] == nil {
		m.at[target] = map[string]time.Time{}
	}
	m.at[target][domain] = c.now()
}

// fullFor is, per target, the keys of the domains where the pod's
// candidate found no node within rememberFullFor.
func (c *Controller) fullFor(uid types.UID) map[string]map[string]bool {
	v, ok := c.fullDomains.Load(uid)
	if !ok {
		return nil
	}
	m := v.(*fullMemo)
	m.mu.Lock()
	defer m.mu.Unlock()
	now := c.now()
	out := map[string]map[string]bool{}
	for target, domains := range m.at {
		for key, at := range domains {
			if now.Sub(at) > rememberFullFor {
				continue
			}
			if out[target] == nil {
				out[target] = map[string]bool{}
			}
			out[target][key] = true
		}
	}
	return out
}

// stale reports whether every record is older than rememberFullFor.
func (m *fullMemo) stale(now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, domains := range m.at {
		for at := range maps.Values(domains) {
			if now.Sub(at) <= rememberFullFor {
				return false
			}
		}
	}
	return true
}
