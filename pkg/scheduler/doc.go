// Package scheduler is kube-scheduler with Flotilla's plugin compiled in: the
// command of cmd/scheduler.
//
// The command takes every flag of kube-scheduler, and
// --flotilla-debug-bind-address for the plugin's debug state. It registers
// the FlotillaCandidate plugin (pkg/candidate/plugin) and keeps the scheduler
// from reporting on a pod deleted while it was being scheduled. Its
// KubeSchedulerConfiguration is expected to carry a profile named "flotilla"
// (the schedulerName of candidate pods) next to the default profile, so one
// scheduler serves the cluster's ordinary pods and the candidates that other
// clusters send it.
package scheduler
