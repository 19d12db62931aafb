package vnode

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Reasons the virtual node writes on source pods.
const (
	// ReasonDelegateLost is the pod reason, and the Warning event reason,
	// when the delegate of a bound source pod that is not being deleted no
	// longer exists in the target.
	ReasonDelegateLost = "DelegateLost"
	// ReasonDelegateOrphaned is the Warning event reason when a source pod
	// is deleted while its target does not answer: its delegate is deleted
	// once the target answers again.
	ReasonDelegateOrphaned = "DelegateOrphaned"
	// ReasonRejected is the pod reason, and the Warning event reason, of a
	// pod bound to a virtual node that Flotilla did not place there.
	ReasonRejected = "VirtualNodeRejected"
	// ReasonTargetLost is the Warning event reason on the pods of a virtual
	// node whose target stops answering; ReasonTargetReady, the Normal one
	// when it answers again.
	ReasonTargetLost = "TargetLost"
	// ReasonContainerStatusUnknown is a kubelet's reason for a container
	// whose end it could not observe; the virtual node uses it for the
	// containers of a delegate that vanished before they were seen to stop.
	ReasonContainerStatusUnknown = "ContainerStatusUnknown"
	// ReasonReadinessGatesNotReady is a kubelet's reason for a Ready=False
	// condition caused by the pod's readiness gates.
	ReasonReadinessGatesNotReady = "ReadinessGatesNotReady"
	// reasonPodCompleted is a kubelet's reason for Ready=False once a pod has
	// stopped.
	reasonPodCompleted = "PodCompleted"
	// exitCodeUnknown is what a kubelet reports for a container whose end it
	// could not observe (128+SIGKILL).
	exitCodeUnknown = 137
)

// kubeletConditions are the pod conditions a kubelet owns; the delegate's
// kubelet reports them, and stale copies on the source pod are dropped.
var kubeletConditions = map[corev1.PodConditionType]bool{
	corev1.PodInitialized:            true,
	corev1.PodReady:                  true,
	corev1.ContainersReady:           true,
	corev1.PodReadyToStartContainers: true,
}

// desiredStatus is the status the source pod should have, given its
// delegate in the target (nil when none exists). target names the target in
// messages; podCIDRs are the target's pod networks this cluster routes to
// (see routableIPs); now stamps the transitions the virtual node makes
// itself.
func desiredStatus(source, delegate *corev1.Pod, target string, podCIDRs []netip.Prefix, now time.Time) corev1.PodStatus {
	switch {
	case delegate != nil:
		return mirrorStatus(source, delegate, podCIDRs)
	case source.DeletionTimestamp != nil:
		msg := fmt.Sprintf("The container's end was not observed before its delegate in target %s was deleted", target)
		return terminatedStatus(source, "", "", msg, false, now)
	default:
		msg := fmt.Sprintf("The delegate of this pod in target %s no longer exists", target)
		out := terminatedStatus(source, ReasonDelegateLost, msg,
			fmt.Sprintf("The container could not be located: its delegate in target %s no longer exists", target), true, now)
		// As a kubelet or the taint manager marks the pods it stops, so a
		// Job's podFailurePolicy can tell a lost delegate from a failure of
		// the pod's own (a ReplicaSet replaces a failed pod either way).
		setCondition(&out, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: ReasonDelegateLost, Message: msg}, metav1.NewTime(now))
		return out
	}
}

// mirrorStatus copies the delegate's status onto the source's. What the
// delegate reports about itself (phase, containers, IPs, kubelet conditions)
// wins; what only means something for the source pod is kept. Values a
// kube-apiserver would refuse (bad IPs, statuses of containers the source pod
// does not have, conditions without a valid type, out-of-range users,
// unknown resource health) are dropped, so a malformed
// delegate cannot block every later status update of its source pod. Pod
// IPs are mirrored only inside podCIDRs.
func mirrorStatus(source, delegate *corev1.Pod, podCIDRs []netip.Prefix) corev1.PodStatus {
	out := source.Status.DeepCopy()
	d := &delegate.Status

	out.Phase = phaseOf(d.Phase)
	out.Reason = d.Reason
	out.Message = d.Message
	out.HostIP, out.HostIPs = hostIPs(d)
	out.PodIP, out.PodIPs = podIPs(d, podCIDRs)
	if d.StartTime != nil {
		out.StartTime = d.StartTime.DeepCopy()
	}
	out.InitContainerStatuses = containerStatuses(d.InitContainerStatuses, source.Status.InitContainerStatuses, &source.Spec, true)
	out.ContainerStatuses = containerStatuses(d.ContainerStatuses, source.Status.ContainerStatuses, &source.Spec, false)
	out.Conditions = mergeConditions(source.Status.Conditions, d.Conditions)
	applyReadinessGates(source, out)
	return *out
}

// terminatedStatus is the source's current status with every container that
// was not seen to stop marked terminated with ContainerStatusUnknown, the
// pod in a terminal phase and not ready. failed forces phase Failed;
// otherwise the pod Succeeded when every container exited 0.
func terminatedStatus(source *corev1.Pod, reason, message, containerMessage string, failed bool, now time.Time) corev1.PodStatus {
	out := source.Status.DeepCopy()
	at := metav1.NewTime(now)
	out.InitContainerStatuses = terminateContainers(source.Spec.InitContainers, out.InitContainerStatuses, containerMessage, at, true)
	out.ContainerStatuses = terminateContainers(source.Spec.Containers, out.ContainerStatuses, containerMessage, at, false)

	out.Phase = corev1.PodSucceeded
	if failed || len(out.ContainerStatuses) == 0 {
		out.Phase = corev1.PodFailed
	}
	for _, cs := range out.ContainerStatuses {
		if cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 0 {
			out.Phase = corev1.PodFailed
		}
	}
	if reason != "" {
		out.Reason, out.Message = reason, message
	}
	for _, t := range []corev1.PodConditionType{corev1.ContainersReady, corev1.PodReady} {
		setCondition(out, corev1.PodCondition{Type: t, Status: corev1.ConditionFalse, Reason: reasonPodCompleted}, at)
	}
	return *out
}

// terminateContainers returns the statuses of containers with every
// container that has not stopped marked terminated. Init containers that
// never started stay as they are, as a kubelet leaves them.
func terminateContainers(spec []corev1.Container, statuses []corev1.ContainerStatus, message string, at metav1.Time, init bool) []corev1.ContainerStatus {
	byName := make(map[string]int, len(statuses))
	for i, cs := range statuses {
		byName[cs.Name] = i
	}
	out := make([]corev1.ContainerStatus, 0, len(spec))
	for _, c := range spec {
		cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image}
		i, reported := byName[c.Name]
		if reported {
			cs = statuses[i]
		}
		if init && !reported {
			continue
		}
		if cs.State.Terminated != nil || (init && cs.State.Running == nil) {
			out = append(out, cs)
			continue
		}
		term := &corev1.ContainerStateTerminated{
			ExitCode:    exitCodeUnknown,
			Reason:      ReasonContainerStatusUnknown,
			Message:     message,
			FinishedAt:  at,
			ContainerID: cs.ContainerID,
		}
		if cs.State.Running != nil {
			term.StartedAt = cs.State.Running.StartedAt
		}
		cs.State = corev1.ContainerState{Terminated: term}
		cs.Ready = false
		started := false
		cs.Started = &started
		out = append(out, cs)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func phaseOf(p corev1.PodPhase) corev1.PodPhase {
	switch p {
	case corev1.PodPending, corev1.PodRunning, corev1.PodSucceeded, corev1.PodFailed, corev1.PodUnknown:
		return p
	case "":
		return corev1.PodPending
	default:
		return corev1.PodUnknown
	}
}

// containerStatuses keeps one status per container of the source pod, in the
// delegate's order, without the user or resource health a kube-apiserver
// would refuse for the source pod. A container the source pod shows
// terminated stays so unless its restart policy lets it run again, as the
// kube-apiserver requires.
func containerStatuses(statuses, current []corev1.ContainerStatus, spec *corev1.PodSpec, init bool) []corev1.ContainerStatus {
	containers := spec.Containers
	if init {
		containers = spec.InitContainers
	}
	byName := make(map[string]*corev1.Container, len(containers))
	for i := range containers {
		byName[containers[i].Name] = &containers[i]
	}
	var out []corev1.ContainerStatus
	for _, cs := range statuses {
		c := byName[cs.Name]
		if c == nil {
			continue
		}
		byName[cs.Name] = nil
		cs = *cs.DeepCopy()
		if i := containerIndex(current, cs.Name); i >= 0 && cs.State.Terminated == nil {
			if old := current[i].State.Terminated; old != nil && !mayRunAgain(c, spec, old.ExitCode, init) {
				cs = *current[i].DeepCopy()
			}
		}
		if !validUser(cs.User, spec.OS) {
			cs.User = nil
		}
		cs.AllocatedResourcesStatus = validResourcesStatus(cs.AllocatedResourcesStatus, c)
		out = append(out, cs)
	}
	return out
}

func containerIndex(statuses []corev1.ContainerStatus, name string) int {
	for i, cs := range statuses {
		if cs.Name == name {
			return i
		}
	}
	return -1
}

// mayRunAgain reports whether a kube-apiserver lets a container that
// terminated with exitCode be reported waiting or running again, whether or
// not it knows per-container restart policies and rules (the
// ContainerRestartRules feature): only what both allow.
func mayRunAgain(c *corev1.Container, spec *corev1.PodSpec, exitCode int32, init bool) bool {
	byPod := spec.RestartPolicy == corev1.RestartPolicyAlways ||
		spec.RestartPolicy == corev1.RestartPolicyOnFailure && exitCode != 0 ||
		init && c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
	return byPod && byContainerRules(c, spec, exitCode)
}

// byContainerRules is the kubelet's ContainerShouldRestart: a matching
// Restart rule, else the container's policy, else the pod's.
func byContainerRules(c *corev1.Container, spec *corev1.PodSpec, exitCode int32) bool {
	if c.RestartPolicy != nil {
		for _, rule := range c.RestartPolicyRules {
			if rule.ExitCodes == nil {
				continue
			}
			listed := slices.Contains(rule.ExitCodes.Values, exitCode)
			op := rule.ExitCodes.Operator
			if op == corev1.ContainerRestartRuleOnExitCodesOpIn && listed || op == corev1.ContainerRestartRuleOnExitCodesOpNotIn && !listed {
				if rule.Action == corev1.ContainerRestartRuleActionRestart {
					return true
				}
				break
			}
		}
		switch *c.RestartPolicy {
		case corev1.ContainerRestartPolicyAlways:
			return true
		case corev1.ContainerRestartPolicyOnFailure:
			return exitCode != 0
		case corev1.ContainerRestartPolicyNever:
			return false
		}
	}
	switch spec.RestartPolicy {
	case corev1.RestartPolicyOnFailure:
		return exitCode != 0
	case corev1.RestartPolicyNever:
		return false
	default:
		return true
	}
}

// validUser reports whether a container's user is one a kube-apiserver
// accepts for a pod of that OS: IDs within range, none of Linux's on Windows.
func validUser(u *corev1.ContainerUser, os *corev1.PodOS) bool {
	if u == nil || u.Linux == nil {
		return true
	}
	if os != nil && os.Name == corev1.Windows {
		return false
	}
	ok := len(validation.IsValidUserID(u.Linux.UID)) == 0 && len(validation.IsValidGroupID(u.Linux.GID)) == 0
	for _, g := range u.Linux.SupplementalGroups {
		ok = ok && len(validation.IsValidGroupID(g)) == 0
	}
	return ok
}

// validResourcesStatus keeps the health reports a kube-apiserver accepts for
// the container: of a resource it requests or a claim it uses, with known
// health values and each device once.
func validResourcesStatus(list []corev1.ResourceStatus, c *corev1.Container) []corev1.ResourceStatus {
	names := map[corev1.ResourceName]bool{}
	for name := range c.Resources.Requests {
		names[name] = true
	}
	for _, claim := range c.Resources.Claims {
		name := "claim:" + claim.Name
		if claim.Request != "" {
			name += "/" + claim.Request
		}
		names[corev1.ResourceName(name)] = true
	}
	var out []corev1.ResourceStatus
	for _, rs := range list {
		ok := names[rs.Name]
		ids := map[corev1.ResourceID]bool{}
		for _, r := range rs.Resources {
			switch r.Health {
			case corev1.ResourceHealthStatusHealthy, corev1.ResourceHealthStatusUnhealthy, corev1.ResourceHealthStatusUnknown:
			default:
				ok = false
			}
			ok = ok && !ids[r.ResourceID]
			ids[r.ResourceID] = true
		}
		if ok {
			out = append(out, rs)
		}
	}
	return out
}

// mergeConditions keeps the source's conditions that the delegate does not
// report and that are not a kubelet's (PodScheduled: the source pod's own
// binding; readiness gates and DisruptionTarget set in the source), then adds
// the delegate's. The delegate's observedGeneration counts the delegate's
// generations, not the source's, so it is dropped.
func mergeConditions(source, delegate []corev1.PodCondition) []corev1.PodCondition {
	fromDelegate := make([]corev1.PodCondition, 0, len(delegate))
	reported := map[corev1.PodConditionType]bool{}
	for _, c := range delegate {
		if len(validation.IsQualifiedName(string(c.Type))) > 0 || c.Type == corev1.PodScheduled || reported[c.Type] {
			continue
		}
		reported[c.Type] = true
		c = *c.DeepCopy()
		c.ObservedGeneration = 0
		fromDelegate = append(fromDelegate, c)
	}
	var out []corev1.PodCondition
	for _, c := range source {
		if reported[c.Type] || kubeletConditions[c.Type] {
			continue
		}
		out = append(out, *c.DeepCopy())
	}
	out = append(out, fromDelegate...)
	return out
}

// applyReadinessGates makes the pod not Ready while one of the source pod's
// readiness gates is not True, as a kubelet does. The delegate's kubelet
// cannot know the gates: they are set in the source cluster.
func applyReadinessGates(source *corev1.Pod, status *corev1.PodStatus) {
	if len(source.Spec.ReadinessGates) == 0 {
		return
	}
	ready := conditionIndex(status.Conditions, corev1.PodReady)
	if ready < 0 || status.Conditions[ready].Status != corev1.ConditionTrue {
		return
	}
	var missing []string
	for _, g := range source.Spec.ReadinessGates {
		i := conditionIndex(status.Conditions, g.ConditionType)
		if i < 0 || status.Conditions[i].Status != corev1.ConditionTrue {
			missing = append(missing, string(g.ConditionType))
		}
	}
	if len(missing) == 0 {
		return
	}
	c := &status.Conditions[ready]
	c.Status = corev1.ConditionFalse
	c.Reason = ReasonReadinessGatesNotReady
	c.Message = fmt.Sprintf("the status of pod readiness gate(s) %s is not \"True\"", strings.Join(missing, ", "))
	// Keep the source's transition time while Ready=False stands, so the
	// same inputs always give the same status.
	if i := conditionIndex(source.Status.Conditions, corev1.PodReady); i >= 0 && source.Status.Conditions[i].Status == corev1.ConditionFalse {
		c.LastTransitionTime = source.Status.Conditions[i].LastTransitionTime
	}
}

// setCondition sets a condition, stamping at as its transition time when
// its status changes.
func setCondition(status *corev1.PodStatus, c corev1.PodCondition, at metav1.Time) {
	i := conditionIndex(status.Conditions, c.Type)
	if i < 0 {
		c.LastTransitionTime = at
		status.Conditions = append(status.Conditions, c)
		return
	}
	old := status.Conditions[i]
	c.LastTransitionTime = old.LastTransitionTime
	c.LastProbeTime = old.LastProbeTime
	if old.Status != c.Status {
		c.LastTransitionTime = at
	}
	status.Conditions[i] = c
}

func conditionIndex(conditions []corev1.PodCondition, t corev1.PodConditionType) int {
	for i, c := range conditions {
		if c.Type == t {
			return i
		}
	}
	return -1
}

// podIPs returns the delegate's pod IPs that this cluster routes to (see
// routableIPs), at most one per family, and the primary one.
func podIPs(d *corev1.PodStatus, podCIDRs []netip.Prefix) (string, []corev1.PodIP) {
	raw := make([]string, 0, len(d.PodIPs))
	for _, ip := range d.PodIPs {
		raw = append(raw, ip.IP)
	}
	if len(raw) == 0 {
		raw = []string{d.PodIP}
	}
	return addresses(routableIPs(raw, podCIDRs), "", func(ip string) corev1.PodIP { return corev1.PodIP{IP: ip} })
}

// routableIPs keeps the addresses that lie inside one of podCIDRs, none
// when podCIDRs is empty. A delegate's IP is the target's word: on the
// source pod, this cluster's Services, Endpoints and NetworkPolicies would
// take it for the pod's and send traffic there, so only an address of a
// network the operator says this cluster reaches the target's pods on is
// believed. Addresses that are never a pod's elsewhere (loopback,
// link-local, unspecified, multicast) are dropped whatever the CIDRs say:
// traffic sent there stays on the sender's own node.
func routableIPs(raw []string, podCIDRs []netip.Prefix) []string {
	var out []string
	for _, s := range raw {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" || a.Is4In6() || !usablePodIP(a) {
			continue
		}
		if slices.ContainsFunc(podCIDRs, func(p netip.Prefix) bool { return p.Contains(a) }) {
			out = append(out, s)
		}
	}
	return out
}

// usablePodIP reports whether an address may be a pod's in another cluster.
func usablePodIP(a netip.Addr) bool {
	return !a.IsUnspecified() && !a.IsLoopback() && !a.IsMulticast() && !a.IsLinkLocalUnicast() &&
		!a.IsLinkLocalMulticast() && !a.IsInterfaceLocalMulticast()
}

// ParsePodCIDRs parses a target's pod networks (spec.podCIDRs), each in
// CIDR notation, to the form Config.PodCIDRs takes.
func ParsePodCIDRs(cidrs []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(cidrs))
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return nil, fmt.Errorf("pod CIDR %q: %w", c, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// hostIPs is podIPs for the delegate's node addresses.
func hostIPs(d *corev1.PodStatus) (string, []corev1.HostIP) {
	raw := make([]string, 0, len(d.HostIPs))
	for _, ip := range d.HostIPs {
		raw = append(raw, ip.IP)
	}
	return addresses(raw, d.HostIP, func(ip string) corev1.HostIP { return corev1.HostIP{IP: ip} })
}

// addresses keeps the valid addresses of a list (or of the single legacy
// field when the list is empty) and returns the primary one and the list.
func addresses[T any](list []string, single string, wrap func(string) T) (string, []T) {
	if len(list) == 0 {
		list = []string{single}
	}
	ips := validIPs(list)
	if len(ips) == 0 {
		return "", nil
	}
	out := make([]T, len(ips))
	for i, ip := range ips {
		out[i] = wrap(ip)
	}
	return ips[0], out
}

// validIPs keeps the first valid IPv4 and the first valid IPv6 address, in
// their order: what a kube-apiserver accepts for a dual-stack pod.
func validIPs(raw []string) []string {
	var out []string
	var v4, v6 bool
	for _, s := range raw {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" || a.Is4In6() {
			continue
		}
		if a.Is4() {
			if v4 {
				continue
			}
			v4 = true
		} else {
			if v6 {
				continue
			}
			v6 = true
		}
		out = append(out, s)
	}
	return out
}
