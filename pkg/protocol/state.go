package protocol

import (
	"encoding/json"
	"sync"
	"sync/atomic"
)

// ParseState decodes a candidate's StateAnnotation. The returned State's
// Topology may be shared with other callers: do not change it.
//
// The same report is read many times: each round of a gang's member looks
// at every other member's candidates, and decoding their reports was a
// quarter of the agent's CPU placing gangs of 64 (docs/benchmarks.md). So
// reports decoded are remembered by their text, up to maxParsedStates of
// them (all are forgotten when more come); one that does not decode is not
// remembered.
func ParseState(raw string) (State, error) {
	if v, ok := parsedStates.Load(raw); ok {
		return v.(State), nil
	}
	var s State
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		return State{}, err
	}
	if parsedCount.Add(1) > maxParsedStates {
		parsedStates.Clear()
		parsedCount.Store(1)
	}
	parsedStates.Store(raw, s)
	return s, nil
}

// maxParsedStates bounds ParseState's memory: a report is a few hundred
// bytes, so about a megabyte; a gang of 64 over three targets reads 192.
const maxParsedStates = 2048

var (
	parsedStates sync.Map // report text -> State
	parsedCount  atomic.Int64
)
