package reservation

import (
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
)

// part is one thing memory remembers: how to remember it, whether it is
// still remembered, and how long sweep keeps it.
type part struct {
	name     string
	keptFor  time.Duration
	remember func(m *memory, uid types.UID, now time.Time)
	held     func(m *memory, uid types.UID) bool
}

func memoHas(m *memory, uid types.UID, has func(*podMemo) bool) bool {
	p := m.pods[uid]
	return p != nil && has(p)
}

// parts are every part of a pod's memo, and a gang's size, the gang's key
// made from the pod's UID.
func parts() []part {
	steady := func(name string, clock steadyClock) part {
		return part{name, rememberStateFor,
			func(m *memory, uid types.UID, now time.Time) { m.since(uid, clock, "1/t1/n1", now) },
			func(m *memory, uid types.UID) bool {
				return memoHas(m, uid, func(p *podMemo) bool { return p.steady[clock] != nil })
			}}
	}
	return []part{
		{"first reservation", staleWindow,
			func(m *memory, uid types.UID, now time.Time) { m.reservedSince(uid, now) },
			func(m *memory, uid types.UID) bool {
				return memoHas(m, uid, func(p *podMemo) bool { return p.firstReserved != nil })
			}},
		{"policy problem", rememberProblemsFor,
			func(m *memory, uid types.UID, now time.Time) { m.policyProblemIsNew(uid, "conflict", now) },
			func(m *memory, uid types.UID) bool {
				return memoHas(m, uid, func(p *podMemo) bool { return p.policyProblem != nil })
			}},
		{"gang problem", rememberProblemsFor,
			func(m *memory, uid types.UID, now time.Time) { m.gangProblemIsNew(uid, "no size", now) },
			func(m *memory, uid types.UID) bool {
				return memoHas(m, uid, func(p *podMemo) bool { return p.gangProblem != nil })
			}},
		{"binding", staleWindow,
			func(m *memory, uid types.UID, now time.Time) { m.noteBound(uid, now) },
			func(m *memory, uid types.UID) bool { return m.boundHere(uid) }},
		{"written election", staleWindow,
			func(m *memory, uid types.UID, now time.Time) {
				m.noteElection(uid, writtenElection{value: "1/t1/n1", at: now})
			},
			func(m *memory, uid types.UID) bool { _, ok := m.electionWritten(uid); return ok }},
		{"elected domain", rememberDomainFor,
			func(m *memory, uid types.UID, now time.Time) {
				m.noteElectedDomain(uid, electedDomain{target: "t1", domain: map[string]string{"zone": "a"}, at: now})
			},
			func(m *memory, uid types.UID) bool { _, ok := m.lastElectedDomain(uid); return ok }},
		{"full domains", rememberFullFor,
			func(m *memory, uid types.UID, now time.Time) { m.noteFull(uid, "t1", "a", now) },
			func(m *memory, uid types.UID) bool {
				return memoHas(m, uid, func(p *podMemo) bool { return p.full != nil })
			}},
		steady("election clock", electionClock),
		steady("deny clock", denyClock),
		steady("repin clock", repinClock),
		steady("overdue clock", overdueClock),
		{"gang size", gangSizeTTL,
			func(m *memory, uid types.UID, now time.Time) {
				m.noteGangSize("gang/"+string(uid), gangSize{n: 4, at: now})
			},
			func(m *memory, uid types.UID) bool { _, ok := m.gangs["gang/"+string(uid)]; return ok }},
	}
}

// TestForgetDropsOnePod: a placed pod's memo goes whole, and the memo of
// another pod stays whole.
func TestForgetDropsOnePod(t *testing.T) {
	var m memory
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, p := range parts() {
		p.remember(&m, "placed", now)
		p.remember(&m, "waiting", now)
	}
	m.forget("placed")
	for _, p := range parts() {
		if p.name == "gang size" {
			continue // a gang's, not a pod's
		}
		if p.held(&m, "placed") {
			t.Errorf("%s of the placed pod survived forget", p.name)
		}
		if !p.held(&m, "waiting") {
			t.Errorf("%s of another pod went with the placed pod's", p.name)
		}
	}
	if _, ok := m.pods["placed"]; ok {
		t.Errorf("an empty memo of the placed pod is left")
	}
}

// TestSweepDropsEachPartAtItsAge: remembered at the same moment, each
// part of a pod's memo, and a gang's size, is kept up to its own age and
// dropped past it, whatever the other parts' ages; a memo left with
// nothing goes too. Parts remembered at the time of a sweep are kept.
func TestSweepDropsEachPartAtItsAge(t *testing.T) {
	clock := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	start := clock.Now()
	var m memory
	all := parts()
	for _, p := range all {
		p.remember(&m, "old", start)
	}
	ages := make([]time.Duration, 0, len(all))
	for _, p := range all {
		ages = append(ages, p.keptFor)
	}
	slices.Sort(ages)
	for _, age := range slices.Compact(ages) {
		for _, at := range []time.Duration{age, age + time.Second} {
			clock.SetTime(start.Add(at))
			for _, p := range all {
				p.remember(&m, "fresh", clock.Now())
			}
			m.sweep(clock.Now())
			for _, p := range all {
				if want := at <= p.keptFor; p.held(&m, "old") != want {
					t.Errorf("%s, kept for %v, held %v after %v", p.name, p.keptFor, !want, at)
				}
				if !p.held(&m, "fresh") {
					t.Errorf("%s remembered at the sweep went with it", p.name)
				}
			}
			m.forget("fresh")
			delete(m.gangs, "gang/fresh")
		}
	}
	if _, ok := m.pods["old"]; ok {
		t.Errorf("a memo with nothing left in it is kept")
	}
}
