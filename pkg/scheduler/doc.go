// Package scheduler is kube-scheduler with Flotilla's plugin compiled in: the
// command of cmd/scheduler, which runs in the target cluster. It and the
// packages under it (plugin, plugin/core) are the target side of the
// candidate protocol; the source side is the agent's.
//
// The command takes every flag of kube-scheduler, and
// --flotilla-debug-bind-address for the plugin's debug state. It registers
// the FlotillaCandidate plugin (pkg/scheduler/plugin) and keeps the scheduler
// from reporting on a pod deleted while it was being scheduled. Its
// KubeSchedulerConfiguration is expected to carry a profile named "flotilla"
// (the schedulerName of candidate pods) next to the default profile, so one
// scheduler serves the cluster's ordinary pods and the candidates that other
// clusters send it.
package scheduler
