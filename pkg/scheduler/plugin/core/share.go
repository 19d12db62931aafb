package core

import (
	"fmt"
	"slices"
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
// the Permit timeout of its last new member's reservation (or within
// ShareTimeout of its first, however many keep joining), every member
// still waiting is rejected at once. A member the source allows or
// denies leaves the share, and so does one whose reservation ends.
//
// The source's word decides nothing here but which candidates gather
// together: how long a share holds its nodes is this cluster's setting.
type share struct {
	key shareKey
	// first and last are when the first and the last new member of this
	// gathering reserved (see joined), or the last allowance came.
	first, last time.Time
	// members are the reservations of the share not settled yet.
	members map[types.UID]struct{}
	// joined are the candidates that ever reserved in this gathering: one
	// that reserves again (its source denied it and lifted the denial, or
	// its reservation ended) brings the share no closer to complete, so
	// it does not put the deadline off. Otherwise members going and coming
	// back would hold the others' nodes until the share's bound.
	joined map[types.UID]struct{}
	// expired is set once the share was let go: its members not yet in
	// Permit are rejected there, and a member that reserves again starts
	// a new share.
	expired bool
	// allowed is set once the source allowed a member: such a member may
	// be binding, so the share is never let go for another's sake.
	allowed bool
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
	return fmt.Sprintf("its gang's share in this cluster was not allowed within %s of its last new member's reservation (at most %s from its first): every member waiting was let go together", permitTimeout, bound)
}

// joinShare adds r, pod's new reservation, to pod's share, if it is in
// one and shares are on. Called with m.mu held.
func (m *Manager) joinShare(pod *v1.Pod, r *Reservation, now time.Time) {
	rec := m.recordOf(pod, now)
	if rec == nil {
		return
	}
	s := rec.gathering
	if s == nil || s.expired {
		s = &share{key: rec.key, first: now, members: map[types.UID]struct{}{}, joined: map[types.UID]struct{}{}}
		rec.gathering = s
	}
	if _, again := s.joined[pod.UID]; !again {
		s.last = now
		s.joined[pod.UID] = struct{}{}
	}
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
		s.allowed = true
	}
	if rec := m.shares[s.key]; len(s.members) == 0 && rec != nil && rec.gathering == s {
		rec.gathering = nil
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
	for _, rec := range m.shares {
		s := rec.gathering
		if s == nil || now.Before(s.deadline(m.opts.PermitTimeout, m.opts.ShareTimeout)) {
			continue
		}
		rejected += m.letGo(rec, letGoExpired, reason)
	}
	return rejected
}

// How a share was let go, which its members' reservations report.
const (
	letGoExpired = iota
	letGoYielded
)

// letGo lets rec's gathering go as one: each member waiting in Permit is
// rejected with reason, and a member between Reserve and Permit is
// rejected there; a member that reserves again starts a new share. The
// share stops waiting for room: what it held is let go. It returns how
// many members it rejected. Called with m.mu held.
func (m *Manager) letGo(rec *shareRecord, how int, reason string) int {
	s := rec.gathering
	s.expired = true
	rec.gathering = nil
	rec.room = nil
	rejected := 0
	for uid := range s.members {
		r := m.reserved[uid]
		if r == nil || r.Settled {
			continue
		}
		r.ShareExpired = how == letGoExpired
		r.ShareYielded = how == letGoYielded
		waiting := m.scheduler.GetWaitingPod(uid)
		if waiting == nil {
			// Between Reserve and Permit: Permit rejects it.
			continue
		}
		r.Settled, r.Reason = true, reason
		waiting.Reject(m.opts.PluginName, reason)
		rejected++
	}
	return rejected
}

// ShareState is a share as the scheduler's /debug/state shows it: the
// reservations it holds now, if any, and its place in this cluster's
// order of shares.
type ShareState struct {
	Share   string    `json:"share"`
	Members int       `json:"members"`
	First   time.Time `json:"first,omitzero"`
	Last    time.Time `json:"last,omitzero"`
	// Deadline is when it is let go unless allowed before.
	Deadline time.Time `json:"deadline,omitzero"`
	// Priority and Seen order it against the shares of other sources:
	// the higher priority first, then the one this scheduler saw first.
	Priority int32     `json:"priority"`
	Seen     time.Time `json:"seen"`
	// WaitingForRoom is set while a member failed to find a node: younger
	// shares of other sources are let go and held back meanwhile.
	WaitingForRoom *RoomWait `json:"waitingForRoom,omitempty"`
	// HeldBack counts its members refused at PreFilter because an older
	// share of another source waits for room.
	HeldBack int `json:"heldBack,omitempty"`
}

// RoomWait is a share's wait for room, as /debug/state shows it.
type RoomWait struct {
	// Failed counts the members that failed to find a node and have not
	// reserved since.
	Failed int `json:"failed"`
	// LastFailure is when the last of them failed; the wait ends a Permit
	// timeout after it at the latest.
	LastFailure time.Time `json:"lastFailure"`
}

// PermitTimeout is how long a candidate waits in Permit on its own.
func (m *Manager) PermitTimeout() time.Duration { return m.opts.PermitTimeout }

// ShareTimeout bounds how long a share holds its members; 0: no shares.
func (m *Manager) ShareTimeout() time.Duration { return m.opts.ShareTimeout }

// Shares lists the shares that hold reservations, wait for room or have
// members held back, oldest first (the order in which they go).
func (m *Manager) Shares() []ShareState {
	m.mu.Lock()
	defer m.mu.Unlock()
	recs := make([]*shareRecord, 0, len(m.shares))
	for _, rec := range m.shares {
		if rec.gathering != nil || rec.room != nil || len(rec.heldBack) > 0 {
			recs = append(recs, rec)
		}
	}
	slices.SortFunc(recs, func(a, b *shareRecord) int {
		if a.olderThan(b) {
			return -1
		}
		return 1
	})
	out := make([]ShareState, 0, len(recs))
	for _, rec := range recs {
		st := ShareState{Share: rec.key.String(), Priority: rec.priority, Seen: rec.seen, HeldBack: len(rec.heldBack)}
		if s := rec.gathering; s != nil {
			st.Members, st.First, st.Last, st.Deadline = len(s.members), s.first, s.last, s.deadline(m.opts.PermitTimeout, m.opts.ShareTimeout)
		}
		if w := rec.room; w != nil {
			st.WaitingForRoom = &RoomWait{Failed: len(w.failed), LastFailure: w.last}
		}
		out = append(out, st)
	}
	return out
}
