package protocol

import (
	"encoding/json"
	"fmt"
)

const (
	// PlacementPolicyAnnotation on a pod names the PlacementPolicy of its
	// namespace that governs it, whatever the policies' selectors say.
	PlacementPolicyAnnotation = Prefix + "placement-policy"
	// DomainAnnotation on a candidate is the topology domain the source
	// counted it in, JSON: the values of the policy's spread keys in order.
	// The candidate's node affinity pins it there when its target spans
	// several domains.
	DomainAnnotation = Prefix + "domain"
)

// ParsePinnedDomain reads the value of DomainAnnotation: the values of the
// policy's spread keys, in order. An empty value is no pin (nil); a value
// that is not a JSON array of strings is an error.
func ParsePinnedDomain(v string) ([]string, error) {
	if v == "" {
		return nil, nil
	}
	var values []string
	if err := json.Unmarshal([]byte(v), &values); err != nil {
		return nil, fmt.Errorf("pinned domain %q: want a JSON array of label values: %w", v, err)
	}
	return values, nil
}
