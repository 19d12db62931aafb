// Package candidate owns the source side of candidate pods, run by the
// source cluster's agent: building a candidate from a source pod (spec.go)
// and fanning it out to every eligible target. The target side, the
// scheduler plugin that reserves and waits for the source's allowance, runs
// in the target cluster's scheduler: pkg/scheduler/plugin.
package candidate
