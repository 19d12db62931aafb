package core

import (
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// A share is the candidates of one source gang in this cluster (the
// candidates of one source cluster and namespace with the same
// protocol.ShareAnnotation): their reservations are held together. A
// member that waits in Permit does not time out on its own while the
// share gathers; the share does, as one: when it was not allowed within
// the Permit timeout of its last member's reservation (or within
// ShareTimeout of its first, however many keep joining), every member
// still waiting is rejected at once. A member the source allows or
// denies leaves the share, and so does one whose reservation ends.
//
// The source's word decides nothing here but which candidates gather
// together: how long a share holds its nodes is this cluster's setting.
type share struct {
	key shareKey
	// first and last are when the first and the last member of this
	// gathering reserved, or the last allowance came.
	first, last time.Time
	// members are the reservations of the share not settled yet.
	members map[types.UID]struct{}
	// expired is set once the share was let go: its members not yet in
	// Permit are rejected there, and a member that reserves again starts
	// a new share.
	expired bool
}

// shareKey names a share among a profile's candidates.
type shareKey struct {
	Cluster, Namespace, Share string
}

func (k shareKey) String() string { return k.Cluster + "/" + k.Namespace + "/" + k.Share }

// shareKeyOf is the share the candidate belongs to; ok is false for a
// candidate of no share (none named, or a malformed value).
func shareKeyOf(pod *v1.Pod) (shareKey, bool) {
	s := pod.Annotations[protocol.ShareAnnotation]
	if !protocol.ValidShare(s) {
		return shareKey{}, false
	}
	return shareKey{Cluster: pod.Labels[protocol.SourceClusterLabel], Namespace: pod.Namespace, Share: s}, true
}

// deadline is when the share is let go unless allowed before.
func (s *share) deadline(permitTimeout, bound time.Duration) time.Time {
	last := s.last.Add(permitTimeout)
	if limit := s.first.Add(bound); limit.Before(last) {
		return limit
	}
	return last
}

// shareExpiredReason says why a share's member was let go.
func shareExpiredReason(permitTimeout, bound time.Duration) string {
	return fmt.Sprintf("its gang's share in this cluster was not allowed within %s of its last member's reservation (at most %s from its first): every member waiting was let go together", permitTimeout, bound)
}

// joinShare adds r, pod's new reservation, to pod's share, if it is in
// one and shares are on. Called with m.mu held.
func (m *Manager) joinShare(pod *v1.Pod, r *Reservation, now time.Time) {
	if m.opts.ShareTimeout <= 0 {
		return
	}
	key, ok := shareKeyOf(pod)
	if !ok {
		return
	}
	s := m.shares[key]
	if s == nil || s.expired {
		s = &share{key: key, first: now, members: map[types.UID]struct{}{}}
		m.shares[key] = s
	}
	s.last = now
	s.members[pod.UID] = struct{}{}
	r.share = s
}

// leaveShare takes r out of its share; allowed records the allowance as
// the share's progress. Called with m.mu held.
func (m *Manager) leaveShare(uid types.UID, r *Reservation, allowed bool, now time.Time) {
	s := r.share
	if s == nil {
		return
	}
	r.share = nil
	delete(s.members, uid)
	if allowed {
		s.last = now
	}
	if len(s.members) == 0 && m.shares[s.key] == s {
		delete(m.shares, s.key)
	}
}

// expireShares lets go of every share past its deadline: each of its
// members waiting in Permit is rejected. It returns how many members it
// rejected.
func (m *Manager) expireShares(now time.Time) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	reason := shareExpiredReason(m.opts.PermitTimeout, m.opts.ShareTimeout)
	rejected := 0
	for key, s := range m.shares {
		if now.Before(s.deadline(m.opts.PermitTimeout, m.opts.ShareTimeout)) {
			continue
		}
		s.expired = true
		delete(m.shares, key)
		for uid := range s.members {
			r := m.reserved[uid]
			if r == nil || r.Settled {
				continue
			}
			r.ShareExpired = true
			waiting := m.scheduler.GetWaitingPod(uid)
			if waiting == nil {
				// Between Reserve and Permit: Permit rejects it.
				continue
			}
			r.Settled, r.Reason = true, reason
			waiting.Reject(m.opts.PluginName, reason)
			rejected++
		}
	}
	return rejected
}

// ShareState is a share as the scheduler's /debug/state shows it.
type ShareState struct {
	Share   string    `json:"share"`
	Members int       `json:"members"`
	First   time.Time `json:"first"`
	Last    time.Time `json:"last"`
	// Deadline is when it is let go unless allowed before.
	Deadline time.Time `json:"deadline"`
}

// PermitTimeout is how long a candidate waits in Permit on its own.
func (m *Manager) PermitTimeout() time.Duration { return m.opts.PermitTimeout }

// ShareTimeout bounds how long a share holds its members; 0: no shares.
func (m *Manager) ShareTimeout() time.Duration { return m.opts.ShareTimeout }

// Shares lists the shares held now, by name.
func (m *Manager) Shares() []ShareState {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]ShareState, 0, len(m.shares))
	for key, s := range m.shares {
		out = append(out, ShareState{Share: key.String(), Members: len(s.members), First: s.first, Last: s.last, Deadline: s.deadline(m.opts.PermitTimeout, m.opts.ShareTimeout)})
	}
	slices.SortFunc(out, func(a, b ShareState) int { return strings.Compare(a.Share, b.Share) })
	return out
}
