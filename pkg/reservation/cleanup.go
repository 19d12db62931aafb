package reservation

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/flotilla-dev/flotilla/pkg/candidate"
	"github.com/flotilla-dev/flotilla/pkg/target"
)

// gone cleans up after a source pod that the cache no longer has: every
// candidate of it goes. Deleting is not undone, so the API server is asked
// first: a cache can be stale (a leader that was paused, a watch that
// lagged), and a pod of that name that lives keeps its candidates.
func (c *Controller) gone(ctx context.Context, req reconcile.Request, targets []*target.Target) (reconcile.Result, error) {
	live, err := c.Kube.CoreV1().Pods(req.Namespace).Get(ctx, req.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		c.memory.sweep(c.now())
		return c.deleteCandidates(ctx, req.Namespace, req.Name, nothing, targets)
	case err != nil:
		return reconcile.Result{}, fmt.Errorf("confirming that %s is gone: %w", req.NamespacedName, err)
	case !isSourcePod(live):
		return c.deleteCandidates(ctx, req.Namespace, req.Name, nothing, targets)
	}
	// The cache is behind: the pod's own events bring it back; until then
	// only the candidates of other pods of that name go.
	logr.FromContextOrDiscard(ctx).V(2).Info("The cache misses a source pod that exists; keeping its candidates", "uid", live.UID)
	if err := candidate.CleanUp(ctx, req.Namespace, req.Name, targets, ofPod(live.UID)); err != nil {
		return reconcile.Result{RequeueAfter: retryUnhealthy}, nil
	}
	return reconcile.Result{RequeueAfter: time.Second}, nil
}

// keepFunc says which candidates a clean-up keeps, by target and source UID.
type keepFunc = func(t *target.Target, sourceUID types.UID) bool

func nothing(*target.Target, types.UID) bool { return false }

// delegate keeps the candidate of source pod uid in target elected.
func delegate(uid types.UID, elected string) keepFunc {
	return func(t *target.Target, sourceUID types.UID) bool { return t.Name == elected && sourceUID == uid }
}

// ofPod keeps every candidate of source pod uid.
func ofPod(uid types.UID) keepFunc {
	return func(_ *target.Target, sourceUID types.UID) bool { return sourceUID == uid }
}

// cleanUp deletes the candidates of the pod's name that keep does not
// keep, as the cached pod (deleted, or bound) calls for. Candidates of
// another pod of that name are deleted only if they are not the live
// pod's: a cache can be stale (a leader paused past its lease, a watch
// that lags) and hold a pod deleted since, whose name a new pod lives
// under, with candidates and maybe a delegate of its own.
func (c *Controller) cleanUp(ctx context.Context, pod *corev1.Pod, keep keepFunc, targets []*target.Target) (reconcile.Result, error) {
	live, err := c.liveOther(ctx, pod, targets)
	if err != nil {
		logr.FromContextOrDiscard(ctx).Info("Cleaning up candidates failed; will retry", "error", err.Error())
		return reconcile.Result{RequeueAfter: retryUnhealthy}, nil
	}
	return c.deleteCandidates(ctx, pod.Namespace, pod.Name, func(t *target.Target, uid types.UID) bool {
		return keep(t, uid) || (live != "" && uid == live)
	}, targets)
}

// cleanUpOthers deletes the candidates of earlier pods of the pod's name
// (another source UID) that are not the live pod's: a pod deleted and
// created again under the same name (a StatefulSet's, or `kubectl replace
// --force`) while a target was unreachable, or before the old pod's
// candidates were cached, leaves them behind otherwise, holding nodes, and
// one already allowed could run unseen.
func (c *Controller) cleanUpOthers(ctx context.Context, pod *corev1.Pod, targets []*target.Target) error {
	live, err := c.liveOther(ctx, pod, targets)
	if err != nil {
		return err
	}
	return candidate.CleanUp(ctx, pod.Namespace, pod.Name, targets, func(_ *target.Target, uid types.UID) bool {
		return uid == pod.UID || (live != "" && uid == live)
	})
}

// liveOther is the UID of the pod that lives under the cached pod's name,
// when it is another pod than the cached one (the cache is stale), read
// from the API server; "" when it is the cached pod or there is none. It
// reads only when some target holds candidates of another pod of that
// name, the only ones whose deletion depends on it.
func (c *Controller) liveOther(ctx context.Context, pod *corev1.Pod, targets []*target.Target) (types.UID, error) {
	if !candidate.OtherUIDs(pod.Namespace, pod.Name, pod.UID, targets) {
		return "", nil
	}
	live, err := c.Kube.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("reading %s/%s before deleting candidates of other pods of its name: %w", pod.Namespace, pod.Name, err)
	case live.UID == pod.UID:
		return "", nil
	}
	logr.FromContextOrDiscard(ctx).Info("The cache holds an earlier pod of a name another pod lives under; keeping the live pod's candidates", "cached", pod.UID, "live", live.UID)
	return live.UID, nil
}

// deleteCandidates deletes the candidates of namespace/name that keep does
// not keep, as they are: the caller has read the live pod if it matters.
func (c *Controller) deleteCandidates(ctx context.Context, namespace, name string, keep keepFunc, targets []*target.Target) (reconcile.Result, error) {
	if err := candidate.CleanUp(ctx, namespace, name, targets, keep); err != nil {
		logr.FromContextOrDiscard(ctx).Info("Cleaning up candidates failed; will retry", "error", err.Error())
		return reconcile.Result{RequeueAfter: retryUnhealthy}, nil
	}
	return reconcile.Result{}, nil
}
