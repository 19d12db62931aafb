package reservation

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/pkg/candidate"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
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
