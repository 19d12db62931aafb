package core

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

const (
	// DefaultPermitTimeoutSeconds is how long a reserved candidate waits for
	// the source's allowance when the profile does not say.
	DefaultPermitTimeoutSeconds = 60
	// MaxPermitTimeoutSeconds is the scheduling framework's own ceiling on a
	// Permit wait (15 minutes); a longer value would be cut silently.
	MaxPermitTimeoutSeconds = 900
	// DefaultShareTimeoutSeconds bounds how long a gang's share holds its
	// members' reservations from its first one's when the profile does
	// not say (see share).
	DefaultShareTimeoutSeconds = 300
)

// Args are the plugin's arguments in a KubeSchedulerConfiguration profile:
//
//	pluginConfig:
//	- name: FlotillaCandidate
//	  args:
//	    permitTimeoutSeconds: 30
//	    shareTimeoutSeconds: 300
//	    topologyKeys: [topology.kubernetes.io/region, topology.kubernetes.io/zone]
type Args struct {
	// PermitTimeoutSeconds bounds how long a reserved candidate holds its
	// node while it waits for the source's allowance; default 60, at most 900.
	PermitTimeoutSeconds *int64 `json:"permitTimeoutSeconds,omitempty"`
	// ShareTimeoutSeconds bounds how long a gang's share (the candidates
	// of one source gang here) holds its members' reservations from its
	// first member's while members keep joining; each member still waits
	// no longer than PermitTimeoutSeconds after the last one joined.
	// Default 300, at most 900; 0: no shares, every candidate waits on its
	// own.
	ShareTimeoutSeconds *int64 `json:"shareTimeoutSeconds,omitempty"`
	// TopologyKeys are the node labels whose values a Reserved or Bound
	// report carries (protocol.State.Topology): the keys this cluster's
	// agent reports its capacity by, protocol.DefaultTopologyKeys when
	// unset. Label keys, at most protocol.MaxTopologyEntries, each once.
	TopologyKeys []string `json:"topologyKeys,omitempty"`
}

// Topology returns the validated topology keys, defaulted when unset.
func (a Args) Topology() ([]string, error) {
	if a.TopologyKeys == nil {
		return slices.Clone(protocol.DefaultTopologyKeys), nil
	}
	if err := protocol.ValidateTopologyKeys(a.TopologyKeys); err != nil {
		return nil, fmt.Errorf("topologyKeys: %w", err)
	}
	return slices.Clone(a.TopologyKeys), nil
}

// PermitTimeout returns the validated Permit timeout, defaulted when unset.
func (a Args) PermitTimeout() (time.Duration, error) {
	if a.PermitTimeoutSeconds == nil {
		return DefaultPermitTimeoutSeconds * time.Second, nil
	}
	s := *a.PermitTimeoutSeconds
	if s <= 0 || s > MaxPermitTimeoutSeconds {
		return 0, fmt.Errorf("permitTimeoutSeconds is %d: it must be greater than 0 and at most %d", s, MaxPermitTimeoutSeconds)
	}
	return time.Duration(s) * time.Second, nil
}

// ShareTimeout returns the validated share bound, defaulted when unset;
// 0 turns shares off.
func (a Args) ShareTimeout() (time.Duration, error) {
	if a.ShareTimeoutSeconds == nil {
		return DefaultShareTimeoutSeconds * time.Second, nil
	}
	s := *a.ShareTimeoutSeconds
	if s < 0 || s > MaxPermitTimeoutSeconds {
		return 0, fmt.Errorf("shareTimeoutSeconds is %d: it must be from 0 (no shares) to %d", s, MaxPermitTimeoutSeconds)
	}
	return time.Duration(s) * time.Second, nil
}

// DecodeArgs decodes the plugin's args from a profile strictly: a misspelt
// or duplicated field is an error naming it, not a silent default. obj is
// what the scheduling framework hands a plugin (a *runtime.Unknown holding
// JSON or YAML), or nil when the profile gives no args.
func DecodeArgs(obj runtime.Object) (Args, error) {
	var args Args
	if obj == nil {
		return args, nil
	}
	u, ok := obj.(*runtime.Unknown)
	if !ok {
		return args, fmt.Errorf("want args of type runtime.Unknown, got %T", obj)
	}
	raw := u.Raw
	if len(raw) == 0 {
		return args, nil
	}
	switch u.ContentType {
	case runtime.ContentTypeJSON, "":
	case runtime.ContentTypeYAML:
		var err error
		if raw, err = yaml.YAMLToJSON(raw); err != nil {
			return args, fmt.Errorf("args are not valid YAML: %w", err)
		}
	default:
		return args, fmt.Errorf("args of content type %q: want JSON or YAML", u.ContentType)
	}
	strict, err := sigsjson.UnmarshalStrict(raw, &args)
	if err != nil {
		return args, fmt.Errorf("args: %w", err)
	}
	if err := errors.Join(strict...); err != nil {
		return args, fmt.Errorf("args: %w", err)
	}
	return args, nil
}
