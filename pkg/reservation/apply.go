package reservation

import (
	"context"
	"fmt"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/flotilla-dev/flotilla/pkg/candidate"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/target"
	"github.com/go-logr/logr"
)

// electionWriter is where a decision's election and allowance go: the
// election on the source pod, the allowance on the elected target's
// candidate.
type electionWriter interface {
	// writeElection records e on the source pod, conditional on the
	// resourceVersion the decision read, with the domain of the elected
	// reservation's node as its target reported it (nil: not reported).
	writeElection(ctx context.Context, pod *corev1.Pod, e protocol.Election, domain map[string]string) error
	// allow writes the allowance on the pod's candidate in its target.
	allow(ctx context.Context, pod *corev1.Pod, a Allowance) error
}

// applyElection writes what d decided about the election: first the
// election, durably, and only once it is written the allowance, so that no
// candidate is ever allowed on an election that a conflict or a crash
// lost. elected runs between the two (the workload's siblings may count
// the election from then on).
func applyElection(ctx context.Context, w electionWriter, pod *corev1.Pod, d Decision, elected func()) error {
	if d.Elect != nil {
		if err := w.writeElection(ctx, pod, *d.Elect, d.electedDomain()); err != nil {
			return err
		}
		if elected != nil {
			elected()
		}
	}
	if d.Allow != nil {
		if err := w.allow(ctx, pod, *d.Allow); err != nil {
			return err
		}
	}
	return nil
}

// allow writes the allowance on the pod's candidate in its target.
func (c *Controller) allow(ctx context.Context, pod *corev1.Pod, a Allowance) error {
	t, ok := c.Targets.Get(a.Target)
	if !ok {
		return fmt.Errorf("elected target %s is no longer configured", a.Target)
	}
	name := candidate.CandidateNameOf(pod, c.SourceCluster, t.Name)
	return t.Annotate(ctx, t.NamespaceFor(pod.Namespace), name, map[string]*string{protocol.AllowedAnnotation: ptr.To(a.Allowance.Encode())})
}

// electedDomain is the domain its target reported for the node of the
// reservation the decision elects; nil when it elects none or the target
// did not say.
func (d Decision) electedDomain() map[string]string {
	if !d.Elects() {
		return nil
	}
	for _, o := range d.Observed {
		if o.Target == d.Elect.Target && o.State.Nonce == d.Elect.Nonce {
			return o.State.Domain()
		}
	}
	return nil
}

// writeElection records the election on the source pod. The write carries
// the resourceVersion the decision was based on, so two agents (or one agent
// and a stale cache) can never both succeed. It is a PUT of pods/status of
// the cached pod with the annotation set: the API server takes the metadata
// and status of pods/status (not the spec, which the cache trims) and, at
// that resourceVersion, the cached pod is the stored one, so only the
// annotation changes. Sent as protobuf, it costs the source API server
// about half of what the merge patch it replaces did (a patch is applied to
// the pod converted to JSON and back).
func (c *Controller) writeElection(ctx context.Context, pod *corev1.Pod, e protocol.Election, domain map[string]string) error {
	update := *pod // shallow: the cached pod stays the object the decision saw
	update.Annotations = make(map[string]string, len(pod.Annotations)+2)
	maps.Copy(update.Annotations, pod.Annotations)
	update.Annotations[protocol.ElectionAnnotation] = e.Encode()
	// The domain of the elected reservation's node goes with it, so that
	// its siblings count it where it is.
	written := ""
	if e.Elected() && domain != nil {
		written = protocol.EncodeDomain(domain)
		update.Annotations[protocol.ElectedDomainAnnotation] = written
	} else {
		delete(update.Annotations, protocol.ElectedDomainAnnotation)
	}
	updated, err := c.Kube.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, &update, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("recording election %s on %s/%s: %w", e.Encode(), pod.Namespace, pod.Name, err)
	}
	c.memory.noteElection(pod.UID, writtenElection{value: e.Encode(), domain: written, at: c.now(), rv: updated.ResourceVersion})
	if e.Elected() {
		electionSeconds.Observe(sinceCreation(pod))
		if domain != nil {
			c.memory.noteElectedDomain(pod.UID, electedDomain{target: e.Target, domain: domain, at: c.now()})
		}
	}
	return nil
}

// bind binds the source pod to the elected target's virtual node, then
// deletes the other candidates. The Scheduled event tells which target was
// elected and which of its nodes runs the pod.
func (c *Controller) bind(ctx context.Context, pod *corev1.Pod, targetName, targetNode string, generation int64, candidates []string, targets []*target.Target) (reconcile.Result, error) {
	node := target.NodeNameOf(targetName)
	if c.memory.boundHere(pod.UID) {
		return c.cleanUp(ctx, pod, delegate(pod.UID, targetName), targets)
	}
	binding := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	}
	err := c.Kube.CoreV1().Pods(pod.Namespace).Bind(ctx, binding, metav1.CreateOptions{})
	switch {
	case err == nil:
		podBoundSeconds.Observe(sinceCreation(pod))
		c.Recorder.Eventf(pod, nil, corev1.EventTypeNormal, "Scheduled", "Bind", "Elected target %s (election %d) of the candidates in %s, whose node %s runs it; bound to virtual node %s",
			targetName, generation, strings.Join(candidates, ", "), targetNode, node)
	case apierrors.IsConflict(err):
		// Bound already: by an earlier reconcile whose result the cache
		// does not show yet (which reported it), or to another node. Only
		// the live pod tells: cleaning up as if bound here would delete the
		// delegate that runs it elsewhere.
		live, getErr := c.Kube.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		switch {
		case getErr != nil:
			return reconcile.Result{}, fmt.Errorf("binding %s/%s to %s: %w; reading it back: %w", pod.Namespace, pod.Name, node, err, getErr)
		case live.UID != pod.UID:
			return reconcile.Result{}, nil // another pod of that name: its own reconcile
		case live.Spec.NodeName != node:
			logr.FromContextOrDiscard(ctx).Error(err, "Source pod bound elsewhere than its elected target; keeping that binding", "node", live.Spec.NodeName, "elected", targetName)
			c.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, "ProtocolViolation", "Bind",
				"Target %s's candidate was bound, but the pod is bound to %s already; the candidate in %s will be deleted", targetName, live.Spec.NodeName, targetName)
			// The bound pod's own reconcile (its update brings it) cleans
			// up; this look is in case that was missed.
			return reconcile.Result{RequeueAfter: retryUnhealthy}, nil
		}
	default:
		return reconcile.Result{}, fmt.Errorf("binding %s/%s to %s: %w", pod.Namespace, pod.Name, node, err)
	}
	c.memory.noteBound(pod.UID, c.now())
	return c.cleanUp(ctx, pod, delegate(pod.UID, targetName), targets)
}
