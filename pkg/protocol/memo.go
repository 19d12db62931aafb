package protocol

import "sync"

// memo remembers values by key, up to max of them: all are forgotten when
// one more comes. What it remembers is shared by every caller.
type memo[K comparable, V any] struct {
	mu  sync.RWMutex
	max int
	m   map[K]V
}

func newMemo[K comparable, V any](max int) *memo[K, V] {
	return &memo[K, V]{max: max, m: map[K]V{}}
}

// get is the value remembered for key.
func (m *memo[K, V]) get(key K) (V, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	v, ok := m.m[key]
	return v, ok
}

// put remembers v for key.
func (m *memo[K, V]) put(key K, v V) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.m) >= m.max {
		clear(m.m)
	}
	m.m[key] = v
}

// len is how many values are remembered.
func (m *memo[K, V]) len() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.m)
}
