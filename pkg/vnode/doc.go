// Package vnode owns the virtual node that stands for one target cluster
// inside a source cluster, and the mirroring of delegate pods onto the source
// pods bound to it. The node (registration, Ready condition, Lease
// heartbeats) is virtual-kubelet's node controller; the pods bound to it are
// mirrored by the package's own loop (see mirror), which keeps no copy of any
// pod beyond the shared informer's.
//
// The package owns:
//   - the Node object (protocol.VirtualNodeName): its labels, its owner
//     (protocol.VirtualNodeOwnerAnnotation), its NoSchedule taint
//     (protocol.VirtualNodeTaintKey=protocol.VirtualNodeTaintValue), its Ready
//     condition and capacity, and its Lease heartbeat in kube-node-lease. The
//     node is registered with its owner when missing and adopted when it is
//     its target's; a node another target owns, or a real node, is refused
//     (CheckOwner). Run never deletes it, so source pods keep their binding
//     across agent restarts (the agent deletes a drained target's node, and
//     a retiring node of the old namespaced form once its pods are gone).
//   - the status of every source pod bound to that node. The status mirrors
//     the delegate, the bound candidate in the target that the agent reports
//     through Delegates: phase, conditions, container and init container
//     statuses, pod IPs, host IPs, start time, reason and message. Fields that
//     only make sense for the source pod (QoS class, nominated node,
//     observedGeneration, resize and resource claim status, ephemeral
//     containers) are kept. The PodScheduled condition and conditions the
//     delegate does not report (readiness gates, DisruptionTarget) stay the
//     source's own, and the readiness gates of the source pod are honoured
//     when computing Ready, as a kubelet would.
//   - deletion of a source pod: the virtual node deletes its delegate, waits
//     until the delegate is gone, reports the source pod terminated (the
//     delegate's last containers states, or ContainerStatusUnknown with exit
//     code 137 for containers whose end was not observed) and then finishes
//     the deletion with a zero grace period, as a kubelet does once its
//     containers have stopped.
//
// A delegate that disappears while its source pod is bound and not being
// deleted (deleted or evicted in the target, or the target lost it) makes
// the source pod Failed with reason DelegateLost, its unfinished containers
// terminated with ContainerStatusUnknown, and a Warning event. Failed is
// final, as for any pod whose node lost it: the pod's controller replaces it
// and the replacement is placed anew. Because this is final, Delegates must
// answer from a synced cache; when it implements HasSynced, Run waits for it
// before looking at any pod.
//
// The package does not create delegates (the agent creates and elects them
// before it binds the source pod), does not garbage-collect delegates whose
// source pod vanished while no agent ran (candidate cleanup does), and does
// not yet serve the kubelet API (logs, exec).
package vnode
