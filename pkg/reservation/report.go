package reservation

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/flotilla-dev/flotilla/pkg/candidate"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/target"
)

// reportUninvited tells the pod's owner, once, that no target may take it
// because no invitation covers its namespace: PodScheduled=False with
// reason Unschedulable, as kube-scheduler says a pod no node can run, and a
// NotInvited Event.
func (c *Controller) reportUninvited(ctx context.Context, pod *corev1.Pod, uninvited []*target.Target, all int) {
	parts := uninvitedReasons(pod, uninvited)
	if c.setUnschedulable(ctx, pod, unschedulableMessage("", parts, all)) {
		c.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, ReasonNotInvited, "Fan out", "Skipped: %s", strings.Join(parts, "; "))
	}
}

// uninvitedReasons says, for each target whose invitation does not cover
// the pod's namespace, so.
func uninvitedReasons(pod *corev1.Pod, uninvited []*target.Target) []string {
	var parts []string
	for _, t := range uninvited {
		parts = append(parts, fmt.Sprintf("target %s does not invite this cluster into namespace %s", t.Name, t.NamespaceFor(pod.Namespace)))
	}
	return parts
}

// unschedulableMessage is the message of a source pod's PodScheduled=False
// condition, worded as kube-scheduler words a pod no node can run ("0/3
// nodes are available: ..."): each target's reason (Reasons, "t1: ...;
// t2: ...") and the targets whose invitation does not cover the pod's
// namespace.
func unschedulableMessage(reasons string, uninvited []string, targets int) string {
	parts := slices.Clone(uninvited)
	if reasons != "" {
		parts = append([]string{reasons}, parts...)
	}
	return fmt.Sprintf("0/%d targets can run the pod: %s", targets, strings.Join(parts, "; "))
}

// skewCounts matches the numbers of a spread's exclusion (placement's
// "zone=a would have 3 pods against 1 in b (maxSkew 1)").
var skewCounts = regexp.MustCompile(`would have \d+ pods against \d+ in (\S+) \(maxSkew (\d+)\)`)

// steadyMessage is msg without the sibling counts of spread exclusions,
// which change with every sibling placed: the condition is written when
// its message changes, and each write brings the pod back to the queue,
// so a message with counts would be written again and again while a
// burst is placed. kube-scheduler's own message has no counts either; the
// Events keep them.
func steadyMessage(msg string) string {
	return skewCounts.ReplaceAllString(msg, "would exceed maxSkew $2 against $1")
}

// setUnschedulable sets the pod's PodScheduled=False condition with reason
// Unschedulable (which autoscalers, kubectl and alerting read) and msg,
// unless it says so already. It reports whether it wrote it.
func (c *Controller) setUnschedulable(ctx context.Context, pod *corev1.Pod, msg string) bool {
	msg = steadyMessage(msg)
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.PodScheduled && cond.Reason == corev1.PodReasonUnschedulable && cond.Message == msg {
			return false
		}
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: msg,
		LastTransitionTime: metav1.Now(),
	}}}})
	if err != nil {
		return false
	}
	if _, err := c.Kube.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		logr.FromContextOrDiscard(ctx).Info("Reporting that no target can run the pod failed", "error", err.Error())
		return false
	}
	return true
}

// reportUnscheduled tells the pod's owner, once per message, why it is not
// placed: a PodScheduled=False condition (replaced when the pod is bound)
// and a Warning Event.
func (c *Controller) reportUnscheduled(ctx context.Context, pod *corev1.Pod, reason, action, msg string) {
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.PodScheduled && cond.Reason == reason && cond.Message == msg {
			return
		}
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: reason, Message: msg,
		LastTransitionTime: metav1.Now(),
	}}}})
	if err != nil {
		return
	}
	if _, err := c.Kube.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		logr.FromContextOrDiscard(ctx).Info("Reporting why the pod is not placed failed", "reason", reason, "error", err.Error())
		return
	}
	c.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, reason, action, "%s", msg)
}

// reportFanOut tells the pod's owner which targets were sent a candidate by
// this reconcile, when that says more than the first draw: some were left
// out for a reason (the policy, a target that cannot run the pod), or the
// set widened because every target that held a candidate failed it. The
// first candidates of a pod, drawn among targets that may all run it, are
// named by its Scheduled Event instead: an Event is a write in the source,
// and this one would come with every pod.
func (c *Controller) reportFanOut(pod *corev1.Pod, placements []candidate.Placement, pl *plan) {
	var sent []string
	widened := false
	for _, p := range placements {
		switch {
		case p.Created:
			sent = append(sent, p.Target.Name)
		case p.Candidate != nil:
			widened = true
		}
	}
	why := pl.exclusions()
	if len(sent) == 0 || (!widened && why == "") {
		return
	}
	msg := fmt.Sprintf("Sent a candidate to %d of %d targets: %s", len(sent), len(placements), strings.Join(sent, ", "))
	if why != "" {
		msg += "; " + why
	}
	c.Recorder.Eventf(pod, nil, corev1.EventTypeNormal, ReasonFannedOut, "Fan out", "%s", msg)
}

// ReasonPolicyUnsatisfiable is the reason of the Event of a pod its
// PlacementPolicy, or its required node affinity as the targets' summaries
// tell, or targets held back, let go to no target now; its PodScheduled
// condition is Unschedulable.
const ReasonPolicyUnsatisfiable = "PolicyUnsatisfiable"

// ReasonPolicyNotApplied is the reason of the Event of a pod that a
// PlacementPolicy meant to govern but does not (a conflict, a missing
// policy): it is placed as if no policy selected it.
const ReasonPolicyNotApplied = "PolicyNotApplied"

// reportProblem tells the pod's owner, once, why a policy does not govern it.
func (c *Controller) reportProblem(pod *corev1.Pod, problem string) {
	if !c.memory.policyProblemIsNew(pod.UID, problem, c.now()) {
		return
	}
	c.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, ReasonPolicyNotApplied, "Fan out", "%s; placed as if no policy selected it", problem)
}

// ReasonElectionRevoked is the reason of the Event of a pod whose elected
// candidate its target did not bind within the election timeout, and
// which the source deleted to elect another target.
const ReasonElectionRevoked = "ElectionRevoked"

// ReasonFannedOut is the reason of the Event that says which targets were
// sent a candidate of a pod.
const ReasonFannedOut = "FannedOut"

// ReasonNotInvited is the reason of the PodScheduled condition and Event of
// a pod whose namespace a target's invitation does not cover.
const ReasonNotInvited = protocol.ReasonNotInvited

// ReasonObjectMissing is the reason of the PodScheduled condition and Event
// of a pod that references a ConfigMap or Secret the source does not hold.
const ReasonObjectMissing = protocol.ReasonObjectMissing

// ReasonObjectConflict is the reason of the Event of a pod whose candidate
// a target did not get because it refused the copy of an object the pod
// references: mostly, an object of that name that is not this cluster's
// copy is in the way there.
const ReasonObjectConflict = "ObjectConflict"
