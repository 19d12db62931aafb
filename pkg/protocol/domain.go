package protocol

import (
	"encoding/json"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/util/validation"
)

// DefaultTopologyKeys are the node labels whose values describe a node's
// domain when nothing else is configured: region, zone and capacity type.
// A target's agent reports its free capacity per value of these keys (its
// ClusterSummary), and its scheduler reports a reservation's node's values
// of them (State.Topology); the chart gives both the same keys.
var DefaultTopologyKeys = []string{"topology.kubernetes.io/region", "topology.kubernetes.io/zone", DefaultCapacityNodeLabel}

// MaxTopologyEntries bounds the topology a reservation reports and a
// source pod's domain: a scheduler reports at most this many keys, and
// the source reads no more.
const MaxTopologyEntries = 16

// Domain returns the topology the state reports as the source uses it:
// the entries whose key is a valid label key and whose value a valid label
// value, the first MaxTopologyEntries of them by key; anything else a
// target wrote is dropped. It returns nil when nothing is left.
func (s State) Domain() map[string]string {
	return validDomain(s.Topology)
}

// validDomain keeps the valid entries of m, at most MaxTopologyEntries of
// them, the first by key.
func validDomain(m map[string]string) map[string]string {
	keys := make([]string, 0, min(len(m), MaxTopologyEntries))
	for k, v := range m {
		if ValidTopologyKey(k) && len(validation.IsValidLabelValue(v)) == 0 {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	slices.Sort(keys)
	keys = keys[:min(len(keys), MaxTopologyEntries)]
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		out[k] = m[k]
	}
	return out
}

// ValidTopologyKey reports whether k can be a topology key: a valid label
// key (an optional DNS subdomain prefix and '/', then a name of at most 63
// characters).
func ValidTopologyKey(k string) bool {
	return len(validation.IsQualifiedName(k)) == 0
}

// ValidateTopologyKeys checks a configured list of topology keys (the
// scheduler's topologyKeys, the agent's topologyKeys): label keys, each
// once, at most MaxTopologyEntries of them.
func ValidateTopologyKeys(keys []string) error {
	if len(keys) > MaxTopologyEntries {
		return fmt.Errorf("%d topology keys: at most %d", len(keys), MaxTopologyEntries)
	}
	seen := make(map[string]bool, len(keys))
	for _, k := range keys {
		if !ValidTopologyKey(k) {
			return fmt.Errorf("topology key %q is not a label key", k)
		}
		if seen[k] {
			return fmt.Errorf("topology key %q is listed twice", k)
		}
		seen[k] = true
	}
	return nil
}

// EncodeDomain renders a domain as the value of ElectedDomainAnnotation: a JSON
// object, its keys sorted ("{}" for an empty domain).
func EncodeDomain(d map[string]string) string {
	if len(d) == 0 {
		return "{}"
	}
	// encoding/json writes a map's keys sorted, and a map of strings
	// always encodes.
	b, _ := json.Marshal(d)
	return string(b)
}

// ParseDomain reads the value of ElectedDomainAnnotation; an empty value is an
// empty domain. A value that is not a JSON object of strings, or holds an
// entry Domain would drop or more than MaxTopologyEntries, is an error.
func ParseDomain(v string) (map[string]string, error) {
	if v == "" {
		return nil, nil
	}
	var d map[string]string
	if err := json.Unmarshal([]byte(v), &d); err != nil {
		return nil, fmt.Errorf("domain %q: want a JSON object of label keys and values: %w", v, err)
	}
	if d == nil {
		return nil, fmt.Errorf("domain %q: want a JSON object of label keys and values", v)
	}
	if len(d) > MaxTopologyEntries {
		return nil, fmt.Errorf("domain %q: %d entries, at most %d", v, len(d), MaxTopologyEntries)
	}
	for k, val := range d {
		if !ValidTopologyKey(k) {
			return nil, fmt.Errorf("domain %q: %q is no label key", v, k)
		}
		if errs := validation.IsValidLabelValue(val); len(errs) > 0 {
			return nil, fmt.Errorf("domain %q: value %q of %s is no label value", v, val, k)
		}
	}
	if len(d) == 0 {
		return nil, nil
	}
	return d, nil
}
