// Package cli owns the kubectl plugin kubectl-flotilla: invite a source
// (in a target), join a target (in a source), the status of both sides, and
// why one pod runs where it runs, or nowhere.
//
// The commands only read and write Flotilla's objects as a user would; the
// agents do the rest. What a command decides (which answer a target gave,
// what a flag means, what an invitation file holds) is a pure function of
// plain values, tested without a cluster; test/e2e/cli_test.go runs the
// built binary against sandbox clusters.
package cli
