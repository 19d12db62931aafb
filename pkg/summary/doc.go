// Package summary owns the ClusterSummary: what a target cluster tells each
// invited source about its capacity, in aggregates only (never a single node
// or pod), and what a source checks before it believes one.
//
//   - Aggregate turns nodes and pods into the capacity part of a summary. It
//     is a pure function: equal inputs render equal summaries.
//   - Validate is the source's check of a summary a peer wrote; the peer may
//     be broken or hostile, so every list and quantity is bounded.
//   - Publisher runs in the target's agent (on the leader): the invitation
//     controller tells it which summaries to keep (Set, Remove), and it
//     writes each at most once per interval, only when its content changed.
//
// Once it has a summary to keep or delete (a cluster that invites no source
// has none: it does not watch, and every source pod bound to a virtual node
// is not sent to it), the publisher watches every node and every bound pod
// of the cluster through its own client-go informers, not through the agent's manager
// cache: that cache holds only source pods (selected by
// spec.schedulerName=flotilla-source and trimmed for placement), and asking
// it for every pod would either change what placement sees or start a second,
// untrimmed informer over all pods. The publisher's pod informer lists only
// bound pods that have not ended (a field selector) and keeps of each, in place of the
// pod, a PodUsage: its key, node and effective requests, about 150 bytes
// where a decoded pod takes kilobytes. Of a node it keeps the labels,
// schedulability, readiness and allocatable cpu, memory and pods (trim.go).
package summary
