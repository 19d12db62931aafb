package target

import (
	"testing"
	"time"
)

func TestRecent(t *testing.T) {
	now := time.Unix(1000, 0)
	r := newRecent()
	r.now = func() time.Time { return now }
	if r.has("a") {
		t.Fatal("empty set has a key")
	}
	r.add("a")
	if !r.has("a") {
		t.Fatal("a key just added is missing")
	}
	now = now.Add(recentTTL)
	if r.has("a") {
		t.Fatal("a key is kept past its TTL")
	}
	r.add("b")
	r.forget("b")
	if r.has("b") {
		t.Fatal("a forgotten key is kept")
	}
}
