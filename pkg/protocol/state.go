package protocol

import "encoding/json"

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
	if s, ok := parsedStates.get(raw); ok {
		return s, nil
	}
	var s State
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		return State{}, err
	}
	parsedStates.put(raw, s)
	return s, nil
}

// maxParsedStates bounds ParseState's memory: a report is a few hundred
// bytes, so about a megabyte; a gang of 64 over three targets reads 192.
const maxParsedStates = 2048

// parsedStates are the reports decoded, by their text.
var parsedStates = newMemo[string, State](maxParsedStates)
