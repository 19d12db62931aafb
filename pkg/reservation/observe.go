package reservation

import (
	"context"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/candidate"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/target"
)

// freshElection reads the election record from the source's API server,
// when a bound candidate carries an allowance of a later election than the
// cached record: only the current election's candidate is adopted, and a
// cache can lag behind the write that allowed it. It returns the record
// read if it is later than the cached one.
func (c *Controller) freshElection(ctx context.Context, pod *corev1.Pod, cached protocol.Election) protocol.Election {
	live, err := c.Kube.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil || live.UID != pod.UID {
		return cached
	}
	e, err := protocol.ParseElection(live.Annotations[protocol.ElectionAnnotation])
	if err != nil || e.Generation <= cached.Generation {
		return cached
	}
	return e
}

// confirmRelease reads the elected candidate from its target's API server
// when the cache says the candidate can no longer bind on the election
// (gone, or a new one in its place): only a live read may release an
// election, since the cache can lag behind the one that saw the
// reservation. The live view replaces the cached one in observed.
//
// A target that is not configured any more (being drained) whose candidate
// of the pod is bound there is observed live: the pod binds to it. Else
// it is released once its drain has
// deleted its candidates that did not run a pod (target.Set.Drained: the
// object stays while pods still run there, which may be for ever), or once
// its object is gone (drained before this process started, or its
// finalizer removed by hand, which leaves what it holds to its operator:
// docs/join-a-target.md). Until then (the drain not done yet, or the agent
// starting) the election waits.
func (c *Controller) confirmRelease(ctx context.Context, pod *corev1.Pod, election protocol.Election, observed []Observed) []Observed {
	i := slices.IndexFunc(observed, func(o Observed) bool { return o.Target == election.Target })
	if i < 0 {
		if t, ok := c.Targets.Draining(election.Target); ok {
			// A target being drained keeps a bound candidate of a pod
			// elected there: its running copy, which the pod is bound to
			// rather than elected again elsewhere beside it.
			if o := c.observeLive(ctx, pod, t, Observed{}); o.Exists && o.State.Phase == protocol.PhaseBound {
				return append(observed, o)
			}
		}
		if c.Targets.Drained(election.Target) || c.targetGone(ctx, election.Target) {
			return append(observed, Observed{Target: election.Target, Live: true})
		}
		if t, ok := c.Targets.Get(election.Target); ok {
			// Configured, but the fan-out did not look at it: its cache
			// holds no candidate of the pod (revoked, or deleted by
			// someone). Only its API server can say so for sure.
			return append(observed, c.observeLive(ctx, pod, t, Observed{}))
		}
		return observed
	}
	if observed[i].Live || !releasedIfLive(observed[i], election) {
		return observed
	}
	t, ok := c.Targets.Get(election.Target)
	if !ok {
		return observed
	}
	observed[i] = c.observeLive(ctx, pod, t, observed[i])
	return observed
}

// observeLive reads the pod's candidate in t from its API server: gone (or
// another pod's of that name) is no candidate. The policy's verdict on the
// cached view (cached.Bonus, cached.Excluded) is kept.
func (c *Controller) observeLive(ctx context.Context, pod *corev1.Pod, t *target.Target, cached Observed) Observed {
	live, err := t.Live(ctx, t.NamespaceFor(pod.Namespace), candidate.CandidateNameOf(pod, c.SourceCluster, t.Name))
	if live != nil && types.UID(live.Labels[protocol.SourceUIDLabel]) != pod.UID {
		live = nil // another pod's of that name
	}
	o := observe(candidate.Placement{Target: t, Candidate: live, Err: err})
	o.Live, o.live = err == nil, live
	o.Bonus, o.Excluded = cached.Bonus, cached.Excluded
	return o
}

// targetGone reports whether the Target ("namespace/name") or ClusterTarget
// ("name") of that name is gone.
func (c *Controller) targetGone(ctx context.Context, name string) bool {
	var obj client.Object = &v1alpha1.ClusterTarget{}
	key := client.ObjectKey{Name: name}
	if ns, n, namespaced := strings.Cut(name, "/"); namespaced {
		obj, key = &v1alpha1.Target{}, client.ObjectKey{Namespace: ns, Name: n}
	}
	return apierrors.IsNotFound(c.Client.Get(ctx, key, obj))
}

func anyReserved(observed []Observed) bool {
	for _, o := range observed {
		if o.Exists && o.State.Phase == protocol.PhaseReserved {
			return true
		}
	}
	return false
}

func anyBound(observed []Observed) bool {
	for _, o := range observed {
		if o.Exists && o.State.Phase == protocol.PhaseBound {
			return true
		}
	}
	return false
}

func excludedReservation(observed []Observed) bool {
	for _, o := range observed {
		if o.Exists && o.State.Phase == protocol.PhaseReserved && o.Excluded != "" {
			return true
		}
	}
	return false
}

// observe turns a placement into what the election looks at. A malformed
// state annotation is a peer's mistake: it counts as no report.
func observe(p candidate.Placement) Observed {
	o := Observed{Target: p.Target.Name, Err: p.Err}
	cand := p.Candidate
	if cand == nil {
		return o
	}
	o.Exists = cand.DeletionTimestamp == nil
	o.Allowed = cand.Annotations[protocol.AllowedAnnotation]
	o.Denied = cand.Annotations[protocol.DeniedAnnotation]
	if raw := cand.Annotations[protocol.StateAnnotation]; raw != "" {
		if s, err := protocol.ParseState(raw); err == nil {
			o.State = s
		}
	}
	if cand.Spec.NodeName != "" {
		// The binding itself is the truth; the plugin's Bound report may
		// still be on its way (or missing, for a rogue binding).
		o.State.Phase = protocol.PhaseBound
	}
	o.Unschedulable = target.Unschedulable(cand)
	return o
}

// candidatesIn names the targets that hold a candidate of the pod.
func candidatesIn(observed []Observed) []string {
	var names []string
	for _, o := range observed {
		if o.Exists {
			names = append(names, o.Target)
		}
	}
	slices.Sort(names)
	return names
}

func nodeOf(observed []Observed, target string) string {
	if o, ok := find(observed, target); ok {
		return o.State.Node
	}
	return ""
}
