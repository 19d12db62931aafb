package reservation

import (
	"slices"
	"testing"
)

// TestEveryRetryIsNamedAndWakes: a round that asks to be looked at again
// for any one reason is woken after retryUnhealthy, and the log names that
// reason alone; a round with none is not woken.
func TestEveryRetryIsNamedAndWakes(t *testing.T) {
	if got := (&round{}).after(0).RequeueAfter; got != 0 {
		t.Errorf("a round with no reason to retry wakes after %v", got)
	}
	seen := map[string]bool{}
	for reason := retryCleanUp; reason <= retryNarrowedAlone; reason <<= 1 {
		r := &round{}
		r.retry(reason)
		if got := r.after(0).RequeueAfter; got != retryUnhealthy {
			t.Errorf("reason %b: wakes after %v, want %v", reason, got, retryUnhealthy)
		}
		names := r.retries.names()
		if len(names) != 1 || seen[names[0]] {
			t.Errorf("reason %b is named %v, want one name of its own", reason, names)
			continue
		}
		seen[names[0]] = true
	}
	r := &round{}
	r.retry(retryTargetFailed)
	r.retry(retryCleanUp)
	if got, want := r.retries.names(), []string{"CleanUpFailed", "TargetFailed"}; !slices.Equal(got, want) {
		t.Errorf("names %v, want %v", got, want)
	}
}
