// Package candidate owns the source side of candidate pods: building a
// candidate from a source pod (spec.go) and fanning it out to every eligible
// target. The target side, the scheduler plugin that reserves and waits for
// the source's allowance, lives in the plugin subpackage.
package candidate
