// Package debugstate owns a process's /debug/state endpoint: components
// register named providers of what they know (targets, elections in flight,
// waiting candidates, quotas) and one handler renders them all as JSON, so
// an operator can read a component's mind without a debugger or its logs.
//
// A provider is called on each request and must only read what its
// component already holds in memory or in a cache: no API calls, no locks
// held for long. Lists are bounded (Bounded) and sorted by their providers,
// so the answer is small and two answers compare line by line.
package debugstate

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
)

// Path is where the handler is served.
const Path = "/debug/state"

// DefaultLimit bounds every list a provider returns.
const DefaultLimit = 1000

// Provider returns what a component wants shown, ready for encoding/json.
// An error it returns is shown as {"error": "..."} under its name.
type Provider func() any

// Registry holds the providers of one process, by name. It is an
// http.Handler: a GET answers one JSON object whose keys are the
// providers' names, in sorted order; ?name=a,b answers only those.
type Registry struct {
	mu        sync.RWMutex
	providers map[string]Provider
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{providers: map[string]Provider{}}
}

// Register adds a provider under name, in place of one of that name.
func (r *Registry) Register(name string, p Provider) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.providers[name] = p
}

// Names are the registered names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.providers))
	for n := range r.providers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Snapshot calls the providers named (every one when names is empty) and
// returns their answers by name. A provider that fails or panics answers
// {"error": "..."}: one broken component never hides the others.
func (r *Registry) Snapshot(names ...string) map[string]any {
	if len(names) == 0 {
		names = r.Names()
	}
	out := make(map[string]any, len(names))
	for _, name := range names {
		r.mu.RLock()
		p, ok := r.providers[name]
		r.mu.RUnlock()
		if !ok {
			out[name] = Error{Error: "no such state; known: " + strings.Join(r.Names(), ", ")}
			continue
		}
		out[name] = call(p)
	}
	return out
}

// Error is what a failed provider answers.
type Error struct {
	Error string `json:"error"`
}

func call(p Provider) (v any) {
	defer func() {
		if e := recover(); e != nil {
			v = Error{Error: fmt.Sprintf("provider panicked: %v", e)}
		}
	}()
	v = p()
	if err, ok := v.(error); ok {
		return Error{Error: err.Error()}
	}
	return v
}

// ServeHTTP answers GET (and HEAD) with the snapshot as indented JSON.
func (r *Registry) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	var names []string
	for _, v := range req.URL.Query()["name"] {
		for _, n := range strings.Split(v, ",") {
			if n = strings.TrimSpace(n); n != "" {
				names = append(names, n)
			}
		}
	}
	body, err := json.MarshalIndent(r.Snapshot(names...), "", "  ")
	if err != nil {
		http.Error(w, "encoding the state: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(append(body, '\n'))
}

// List is a bounded list: at most a limit of Items, with Total the length
// of the whole and Omitted how many were left out (the last ones).
type List[T any] struct {
	Total   int `json:"total"`
	Omitted int `json:"omitted,omitempty"`
	Items   []T `json:"items"`
}

// Bounded keeps the first limit items (DefaultLimit when limit <= 0);
// sort them first. It never answers a nil Items, so JSON shows [].
func Bounded[T any](items []T, limit int) List[T] {
	if limit <= 0 {
		limit = DefaultLimit
	}
	l := List[T]{Total: len(items), Items: items}
	if len(items) > limit {
		l.Items, l.Omitted = items[:limit], len(items)-limit
	}
	if l.Items == nil {
		l.Items = []T{}
	}
	return l
}
