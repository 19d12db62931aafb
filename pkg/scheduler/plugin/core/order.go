package core

import (
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// The order of the shares of different sources' gangs in this cluster.
//
// Two sources' gangs that meet in one cluster can each reserve part of
// its room and wait for each other until their shares are let go, then
// meet again. This scheduler orders their shares by what it observes
// itself, never by a source's word (a source could claim any age): the
// higher priority of its members as this cluster admitted them, then the
// share this scheduler saw first (the first PreFilter of any of its
// members), then the share's name so that the order is total.
//
// When a member of share X finds no node, X waits for room: every share
// of another source younger than X is let go as one, unless the source
// allowed one of its members (that one may be binding, and all or nothing
// must hold), and the members of younger shares are refused at PreFilter
// until X stops waiting. X stops waiting once each member that failed has
// reserved or is gone, when its own share is let go, or a Permit timeout
// after its last failure: a share too big for this cluster holds the
// others back one Permit timeout at a time, not for ever.
//
// Shares of one source are not ordered here: the source takes its own
// gangs in turns, and it may let a younger gang that fits go before an
// older one that does not; this cluster must not undo that.

// shareRecord is all this scheduler knows of one share key: its place in
// the order, the reservations it holds now (gathering), its wait for room
// and the members it holds back. The sweep forgets it once none of its
// members was seen for forgetShareAfter.
type shareRecord struct {
	key shareKey
	// seen is when this scheduler first saw a member of the share; present
	// when it last did.
	seen, present time.Time
	// priority is the highest spec.priority of its members seen here.
	priority int32
	// gathering holds the share's reservations now; nil when none.
	gathering *share
	// room is its wait for room; nil when it does not wait.
	room *roomWait
	// heldBack are its members refused at PreFilter because an older share
	// waits for room, to activate once none does.
	heldBack map[types.UID]*v1.Pod
}

// roomWait is a share's wait for room: the members that failed to find a
// node and have not reserved since, and when the last failed.
type roomWait struct {
	failed map[types.UID]PodRef
	last   time.Time
}

// forgetShareAfter is how long a share's place in the order is kept once
// no member of it is seen: long enough for a gang whose candidates were
// let go to come back with its age.
const forgetShareAfter = 2 * time.Minute

// olderThan reports whether a goes before b.
func (a *shareRecord) olderThan(b *shareRecord) bool {
	if a.priority != b.priority {
		return a.priority > b.priority
	}
	if !a.seen.Equal(b.seen) {
		return a.seen.Before(b.seen)
	}
	return a.key.String() < b.key.String()
}

// ordered reports whether a and b are ordered against each other: shares
// of different sources.
func (a *shareRecord) ordered(b *shareRecord) bool {
	return a != b && a.key.Cluster != b.key.Cluster
}

// priorityOf is the pod's priority as this cluster admitted it.
func priorityOf(pod *v1.Pod) int32 {
	if pod.Spec.Priority == nil {
		return 0
	}
	return *pod.Spec.Priority
}

// recordOf returns the record of pod's share, made now if new, and notes
// the member; nil when pod is in no share or shares are off. Called with
// m.mu held.
func (m *Manager) recordOf(pod *v1.Pod, now time.Time) *shareRecord {
	if m.opts.ShareTimeout <= 0 {
		return nil
	}
	key, ok := shareKeyOf(pod)
	if !ok {
		return nil
	}
	rec := m.shares[key]
	if rec == nil {
		rec = &shareRecord{key: key, seen: now, priority: priorityOf(pod)}
		m.shares[key] = rec
	}
	rec.present = now
	rec.priority = max(rec.priority, priorityOf(pod))
	return rec
}

// olderWaiting returns a share of another source, older than rec, that
// waits for room; nil when none does. Called with m.mu held.
func (m *Manager) olderWaiting(rec *shareRecord) *shareRecord {
	for _, other := range m.shares {
		if other.room != nil && rec.ordered(other) && other.olderThan(rec) {
			return other
		}
	}
	return nil
}

// ReasonOlderShareWaits is why a member of a younger share is refused at
// PreFilter. It names no other share: that is another source's business.
const ReasonOlderShareWaits = "an older gang's share waits for room in this cluster: this gang's members wait until it is placed or stops waiting"

// HoldBack returns why pod, a member of a share, may not be scheduled now
// ("" when it may): an older share of another source waits for room. A
// pod held back is activated once no older share waits. The plugin's
// PreFilter asks it of every candidate past its denial and quota, so that
// a share is seen from its first such attempt.
func (m *Manager) HoldBack(logger klog.Logger, pod *v1.Pod) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	rec := m.recordOf(pod, m.opts.Now())
	if rec == nil {
		return ""
	}
	older := m.olderWaiting(rec)
	if older == nil {
		delete(rec.heldBack, pod.UID)
		return ""
	}
	if rec.heldBack == nil {
		rec.heldBack = map[types.UID]*v1.Pod{}
	}
	rec.heldBack[pod.UID] = pod
	logger.V(3).Info("Holding back a member of a younger share", "pod", klog.KObj(pod), "share", rec.key.String(), "olderShare", older.key.String())
	return ReasonOlderShareWaits
}

// shareYieldedReason says why a younger share's member was let go.
const shareYieldedReason = "its gang's share in this cluster yielded to an older gang's share that waits for room here: every member waiting was let go together"

// NoRoom is told that pod found no node. A member of a share makes its
// share wait for room, and every younger share of another source that
// holds reservations, none of them allowed, is let go as one. It returns
// how many waiting members it rejected.
func (m *Manager) NoRoom(logger klog.Logger, pod *v1.Pod) int {
	now := m.opts.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	rec := m.recordOf(pod, now)
	if rec == nil {
		return 0
	}
	if rec.room == nil {
		rec.room = &roomWait{failed: map[types.UID]PodRef{}}
	}
	rec.room.failed[pod.UID] = refOf(pod)
	rec.room.last = now
	rejected := 0
	for _, other := range m.shares {
		if !rec.ordered(other) || !rec.olderThan(other) || other.gathering == nil || m.anyAllowed(other.gathering) {
			continue
		}
		n := m.letGo(other, letGoYielded, shareYieldedReason)
		rejected += n
		logger.V(2).Info("Let a younger share go for an older one that waits for room", "share", other.key.String(), "olderShare", rec.key.String(), "member", klog.KObj(pod), "rejected", n)
	}
	return rejected
}

// anyAllowed reports whether the source allowed a member of s: one that
// left it allowed, or one whose allowance is in the scheduler's cache and
// not settled yet. Called with m.mu held.
func (m *Manager) anyAllowed(s *share) bool {
	if s.allowed {
		return true
	}
	if m.pods == nil {
		return false
	}
	for uid := range s.members {
		r := m.reserved[uid]
		if r == nil {
			continue
		}
		pod, err := m.pods.Pods(r.Pod.Namespace).Get(r.Pod.Name)
		if err == nil && pod.UID == uid && Decide(r.Nonce, pod.Labels, pod.Annotations).Verdict == Allow {
			return true
		}
	}
	return false
}

// reservedMember is told that pod reserved: it no longer waits for room.
// Called with m.mu held.
func (m *Manager) reservedMember(pod *v1.Pod) {
	key, ok := shareKeyOf(pod)
	if !ok {
		return
	}
	if rec := m.shares[key]; rec != nil && rec.room != nil {
		delete(rec.room.failed, pod.UID)
		if len(rec.room.failed) == 0 {
			rec.room = nil
		}
	}
}

// releaseHeldBack returns the members held back that no older share holds
// back any more, and forgets them. Called with m.mu held.
func (m *Manager) releaseHeldBack() []*v1.Pod {
	var out []*v1.Pod
	for _, rec := range m.shares {
		if len(rec.heldBack) == 0 || m.olderWaiting(rec) != nil {
			continue
		}
		for _, pod := range rec.heldBack {
			out = append(out, pod)
		}
		rec.heldBack = nil
	}
	return out
}

// activate hands the pods to the scheduler's queue, if any.
func (m *Manager) activate(pods []*v1.Pod) {
	if len(pods) > 0 && m.opts.Activate != nil {
		m.opts.Activate(pods)
	}
}

// sweepOrder ends the waits for room that are over (each failed member
// reserved or gone, or none failed for a Permit timeout), activates the
// members no longer held back and forgets the shares no member of which
// was seen for forgetShareAfter. Run once a second, after expireShares.
func (m *Manager) sweepOrder(logger klog.Logger, now time.Time) {
	m.mu.Lock()
	for key, rec := range m.shares {
		if w := rec.room; w != nil {
			for uid, ref := range w.failed {
				if m.gone(uid, ref) {
					delete(w.failed, uid)
				}
			}
			if len(w.failed) == 0 || !now.Before(w.last.Add(m.opts.PermitTimeout)) {
				logger.V(2).Info("Share stopped waiting for room", "share", key.String(), "failed", len(w.failed), "lastFailure", w.last)
				rec.room = nil
			}
		}
		if rec.gathering != nil || rec.room != nil || len(rec.heldBack) > 0 || now.Sub(rec.present) < forgetShareAfter {
			continue
		}
		if m.anyMember(key) {
			rec.present = now
			continue
		}
		delete(m.shares, key)
	}
	release := m.releaseHeldBack()
	m.mu.Unlock()
	m.activate(release)
}

// gone reports whether a member that failed to find a node will not
// look for one again: it was deleted, bound, or its source denied it.
func (m *Manager) gone(uid types.UID, ref PodRef) bool {
	if m.pods == nil {
		return false
	}
	pod, err := m.pods.Pods(ref.Namespace).Get(ref.Name)
	if apierrors.IsNotFound(err) {
		return true
	}
	if err != nil {
		return false
	}
	if _, denied := Denied(pod.Labels, pod.Annotations); denied {
		return true
	}
	return pod.UID != uid || pod.DeletionTimestamp != nil || pod.Spec.NodeName != ""
}

// anyMember reports whether the scheduler's cache holds a candidate of
// the share key. Without a cache, none is known.
func (m *Manager) anyMember(key shareKey) bool {
	if m.pods == nil {
		return false
	}
	selector := labels.SelectorFromSet(labels.Set{protocol.CandidateLabel: "true", protocol.SourceClusterLabel: key.Cluster})
	pods, err := m.pods.Pods(key.Namespace).List(selector)
	if err != nil {
		return true
	}
	for _, pod := range pods {
		if k, ok := shareKeyOf(pod); ok && k == key {
			return true
		}
	}
	return false
}
