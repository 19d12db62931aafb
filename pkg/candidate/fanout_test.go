package candidate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/flotilla-dev/flotilla/pkg/target"
)

// targets are n targets t1..tn whose API servers do not answer, never
// started: their caches are empty.
func targets(t *testing.T, n int) []*target.Target {
	t.Helper()
	var out []*target.Target
	for i := range n {
		tg, err := target.New(target.Config{Name: fmt.Sprintf("t%d", i+1), REST: &rest.Config{Host: "https://127.0.0.1:1"}, SourceCluster: "src"})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tg)
	}
	return out
}

// preparer records the targets it prepared and refuses those in refuse.
type preparer struct {
	mu       sync.Mutex
	prepared []string
	refuse   map[string]error
}

func (p *preparer) Prepare(_ context.Context, t *target.Target) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.prepared = append(p.prepared, t.Name)
	return p.refuse[t.Name]
}

func (p *preparer) Adopt(context.Context, *target.Target, *corev1.Pod) error { return nil }

func TestFanOutPreparesBeforeTheCandidate(t *testing.T) {
	// The targets' API servers do not answer: a create that is attempted
	// fails with "creating candidate".
	ts := targets(t, 2)
	refused := errors.New("an object is in the way")
	tests := []struct {
		name string
		prep Preparer
		// want is, per target, whether the candidate's create was attempted.
		want map[string]bool
	}{
		{name: "no preparer", want: map[string]bool{"t1": true, "t2": true}},
		{name: "every target prepared", prep: &preparer{}, want: map[string]bool{"t1": true, "t2": true}},
		{name: "a refused target gets no candidate, the others do", prep: &preparer{refuse: map[string]error{"t2": refused}}, want: map[string]bool{"t1": true, "t2": false}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := FanOut(t.Context(), sourcePod(t), "src", ts, tc.prep, nil)
			for _, p := range out {
				attempted := p.Err != nil && strings.Contains(p.Err.Error(), "creating candidate")
				if attempted != tc.want[p.Target.Name] {
					t.Errorf("%s: create attempted %v, want %v (err %v)", p.Target.Name, attempted, tc.want[p.Target.Name], p.Err)
				}
				if !tc.want[p.Target.Name] && !errors.Is(p.Err, refused) {
					t.Errorf("%s: want the preparer's error, got %v", p.Target.Name, p.Err)
				}
				if p.Created {
					t.Errorf("%s: created on an unreachable target", p.Target.Name)
				}
			}
			if pr, ok := tc.prep.(*preparer); ok && len(pr.prepared) != len(ts) {
				t.Errorf("prepared %v, want every target once", pr.prepared)
			}
		})
	}
}
