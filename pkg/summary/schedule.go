package summary

import (
	"sort"
	"time"
)

// writeSchedule decides when each summary is looked at: a summary is touched
// when what it shows may have changed, and a touched summary is due once
// its last write is an interval old. The first change after a quiet interval
// is published at once; the changes that follow within the interval are
// published together when it ends, however many they are. Looking at a
// summary whose content did not change costs no write and leaves the
// schedule as it was, so the next change is published at once.
//
// It holds plain values and takes the time as an argument: the tests drive
// it with any clock. It is not safe for concurrent use.
type writeSchedule struct {
	interval time.Duration
	entries  map[string]*scheduleEntry
}

type scheduleEntry struct {
	touched   bool
	lastWrite time.Time // zero: never written by this process
}

func newWriteSchedule(interval time.Duration) *writeSchedule {
	return &writeSchedule{interval: interval, entries: make(map[string]*scheduleEntry)}
}

// Touch marks a summary as possibly changed, adding it when it is new.
func (s *writeSchedule) Touch(name string) {
	e := s.entries[name]
	if e == nil {
		e = &scheduleEntry{}
		s.entries[name] = e
	}
	e.touched = true
}

// TouchAll marks every summary as possibly changed.
func (s *writeSchedule) TouchAll() {
	for _, e := range s.entries {
		e.touched = true
	}
}

// Forget drops a summary.
func (s *writeSchedule) Forget(name string) { delete(s.entries, name) }

// Due returns, sorted, the touched summaries that may be written at now,
// and clears their mark: the caller looks at each and calls Wrote for those
// it wrote (or failed to write).
func (s *writeSchedule) Due(now time.Time) []string {
	var due []string
	for name, e := range s.entries {
		if e.touched && !now.Before(s.allowedAt(e)) {
			e.touched = false
			due = append(due, name)
		}
	}
	sort.Strings(due)
	return due
}

// Wrote records a write of a summary at now (or a failed attempt, which
// waits as long before the next one).
func (s *writeSchedule) Wrote(name string, now time.Time) {
	if e := s.entries[name]; e != nil {
		e.lastWrite = now
	}
}

// Retry touches a summary whose write failed, so that it is tried again
// once the interval after the failed attempt has passed.
func (s *writeSchedule) Retry(name string, now time.Time) {
	if e := s.entries[name]; e != nil {
		e.lastWrite = now
		e.touched = true
	}
}

// Next is the earliest time a touched summary becomes due; ok is false when
// none is touched.
func (s *writeSchedule) Next() (next time.Time, ok bool) {
	for _, e := range s.entries {
		if !e.touched {
			continue
		}
		if at := s.allowedAt(e); !ok || at.Before(next) {
			next, ok = at, true
		}
	}
	return next, ok
}

func (s *writeSchedule) allowedAt(e *scheduleEntry) time.Time {
	if e.lastWrite.IsZero() {
		return time.Time{}
	}
	return e.lastWrite.Add(s.interval)
}
