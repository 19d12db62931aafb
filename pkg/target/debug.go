package target

import (
	"time"

	"github.com/flotilla-dev/flotilla/pkg/debugstate"
)

// State is what /debug/state shows of one target.
type State struct {
	Name        string `json:"name"`
	Namespace   string `json:"namespace,omitempty"`
	Self        bool   `json:"self,omitempty"`
	VirtualNode string `json:"virtualNode"`
	// Reachable, Authorized, Reason and Message are the last look's
	// Health, taken at LastProbe; all zero before the first.
	Reachable  bool       `json:"reachable"`
	Authorized bool       `json:"authorized"`
	Reason     string     `json:"reason,omitempty"`
	Message    string     `json:"message,omitempty"`
	LastProbe  *time.Time `json:"lastProbe,omitempty"`
	// LastError is the last call's error, which makes calls wait for a
	// probe when the target did not answer at all.
	LastError string `json:"lastError,omitempty"`
	// Synced: the candidate cache has listed the target once.
	Synced bool `json:"synced"`
	// Candidates is how many candidates the cache holds.
	Candidates int `json:"candidates"`
	// Namespaces are the namespaces the invitation covers; absent when
	// every one is open.
	Namespaces []string `json:"namespaces,omitempty"`
	// Outcomes is how the target answered this agent's candidates, which
	// weighs it when a pod's first targets are chosen.
	Outcomes Outcomes `json:"outcomes"`
}

// StateOf is what /debug/state shows of t.
func StateOf(t *Target) State {
	s := State{
		Name: t.Name, Namespace: t.Namespace, Self: t.Self, VirtualNode: t.NodeName,
		Synced: t.HasSynced(), Candidates: t.CandidateCount(), Namespaces: t.Namespaces(),
		Outcomes: t.Outcomes(),
	}
	if h, at, ok := t.LastHealth(); ok {
		s.Reachable, s.Authorized, s.Reason, s.Message, s.LastProbe = h.Reachable, h.Authorized, h.Reason, h.Message, &at
	}
	if err := t.Err(); err != nil {
		s.LastError = err.Error()
	}
	return s
}

// DebugState is the provider of the "targets" of /debug/state: the
// targets of the set by name, at most limit of them (debugstate's default
// when limit <= 0).
func (s *Set) DebugState(limit int) debugstate.Provider {
	if limit <= 0 {
		limit = debugstate.DefaultLimit
	}
	return func() any {
		all := s.All()
		shown := all[:min(len(all), limit)]
		out := make([]State, len(shown))
		for i, t := range shown {
			out[i] = StateOf(t)
		}
		return debugstate.List[State]{Total: len(all), Omitted: len(all) - len(shown), Items: out}
	}
}
