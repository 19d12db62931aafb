package core

import (
	"fmt"
	"time"
)

const (
	// DefaultPermitTimeoutSeconds is how long a reserved candidate waits for
	// the source's allowance when the profile does not say.
	DefaultPermitTimeoutSeconds = 60
	// MaxPermitTimeoutSeconds is the scheduling framework's own ceiling on a
	// Permit wait (15 minutes); a longer value would be cut silently.
	MaxPermitTimeoutSeconds = 900
)

// Args are the plugin's arguments in a KubeSchedulerConfiguration profile:
//
//	pluginConfig:
//	- name: FlotillaCandidate
//	  args:
//	    permitTimeoutSeconds: 30
type Args struct {
	// PermitTimeoutSeconds bounds how long a reserved candidate holds its
	// node while it waits for the source's allowance; default 60, at most 900.
	PermitTimeoutSeconds *int64 `json:"permitTimeoutSeconds,omitempty"`
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
