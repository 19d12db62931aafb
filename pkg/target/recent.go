package target

import (
	"sync"
	"time"
)

// recentTTL is how long a write is remembered. It only needs to outlast the
// delay between a write and the informer event that shows it.
const recentTTL = 30 * time.Second

// recent remembers writes this process made and that its cache may not show
// yet, like the expectations of kube-controller-manager's controllers: a
// reconcile that runs on a stale cache then skips the write instead of
// repeating it. Forgetting (a restart, the TTL) only costs a repeated,
// idempotent write.
type recent struct {
	mu   sync.Mutex
	seen map[string]time.Time
	now  func() time.Time
}

func newRecent() *recent { return &recent{seen: map[string]time.Time{}, now: time.Now} }

// has reports whether key was recorded within the TTL.
func (r *recent) has(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	at, ok := r.seen[key]
	return ok && r.now().Sub(at) < recentTTL
}

// add records key, and drops expired keys now and then.
func (r *recent) add(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	r.seen[key] = now
	if len(r.seen)%1024 == 0 {
		for k, at := range r.seen {
			if now.Sub(at) >= recentTTL {
				delete(r.seen, k)
			}
		}
	}
}

// forget drops key, when the cache has caught up or the write must be redone.
func (r *recent) forget(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.seen, key)
}
