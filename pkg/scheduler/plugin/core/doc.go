// Package core owns the target side of the candidate protocol: the logic of
// the FlotillaCandidate plugin, which runs in the target cluster's
// scheduler, apart from the scheduling framework's glue (package plugin,
// its parent): the plugin's arguments, the decision rule that turns a
// candidate's annotations into allow/reject/wait, the table of in-flight
// reservations and their nonces, the score a reservation reports, the
// coalescing writer of the state annotation, and the Manager that settles
// pods waiting in Permit when the source answers.
//
// Nothing here makes an API call on the caller's goroutine: state is written
// by the writer's workers and waiting pods are settled by the Manager's.
package core
