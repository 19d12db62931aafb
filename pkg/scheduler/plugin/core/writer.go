package core

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// FieldManager names the scheduler's writes of the state annotation.
const FieldManager = "flotilla-scheduler"

// PodRef names one pod object; UID tells a candidate from a later one that
// reuses its deterministic name.
type PodRef struct {
	Namespace string
	Name      string
	UID       types.UID
}

func (r PodRef) String() string { return r.Namespace + "/" + r.Name }

// StatePatcher writes a candidate's state annotation.
type StatePatcher interface {
	// PatchState sets the state annotation of pod. It fails with a NotFound
	// error when the pod is gone, a Conflict or Invalid error when the name
	// now belongs to another pod, and a StaleStateError when the candidate
	// no longer lets the state land (StateLands).
	PatchState(ctx context.Context, pod PodRef, state protocol.State) error
}

// StaleStateError says that a state was not written because the candidate
// no longer lets it land (StateLands): another scheduler, or a binding,
// changed it first.
type StaleStateError struct {
	Pod    PodRef
	State  protocol.State
	Reason string
}

func (e *StaleStateError) Error() string {
	return fmt.Sprintf("not writing state %s (nonce %s) of pod %s: %s", e.State.Phase, e.State.Nonce, e.Pod, e.Reason)
}

// maxStateAttempts bounds how often a state write reads the candidate again
// after losing a race: each lost race is another write to the candidate,
// which the next read sees.
const maxStateAttempts = 5

// ClientStatePatcher patches the state annotation through the API server,
// as a compare-and-swap: it judges the state against a copy of the
// candidate (StateLands) and patches with that copy's resourceVersion, so
// the state lands only on the version it was judged against. It reads the
// copy from Pods, the scheduler's cache, when it has one, and from the API
// server after a conflict.
type ClientStatePatcher struct {
	Client kubernetes.Interface
	Pods   corelisters.PodLister
}

var _ StatePatcher = ClientStatePatcher{}

// PatchState sends a JSON merge patch of metadata.annotations. The patch
// carries the pod's UID, which the API server refuses to change, so a state
// meant for a deleted candidate never lands on its successor, and the
// resourceVersion of the copy it was judged against.
func (p ClientStatePatcher) PatchState(ctx context.Context, pod PodRef, state protocol.State) error {
	value, err := json.Marshal(state)
	if err != nil {
		return fmt.Errorf("encoding state of pod %s: %w", pod, err)
	}
	current := cachedCopy(p.Pods, pod.Namespace, pod.Name, pod.UID)
	for attempt := 1; ; attempt++ {
		if current == nil {
			current, err = p.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("reading pod %s to write state %s: %w", pod, state.Phase, err)
			}
		}
		if current.UID != pod.UID {
			return apierrors.NewConflict(v1.Resource("pods"), pod.Name, fmt.Errorf("pod %s is now another pod (UID %s, not %s)", pod, current.UID, pod.UID))
		}
		if reason := StateLands(state, current); reason != "" {
			return &StaleStateError{Pod: pod, State: state, Reason: reason}
		}
		patch, err := json.Marshal(map[string]any{
			"metadata": map[string]any{
				"uid":             pod.UID,
				"resourceVersion": current.ResourceVersion,
				"annotations":     map[string]string{protocol.StateAnnotation: string(value)},
				"managedFields":   noManagedFields,
			},
		})
		if err != nil {
			return fmt.Errorf("encoding state patch of pod %s: %w", pod, err)
		}
		_, err = p.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
		switch {
		case err == nil:
			return nil
		case apierrors.IsConflict(err) && attempt < maxStateAttempts:
			// The candidate changed since the copy: judge again on a
			// fresh one (a UID that changed fails there).
			current = nil
		case apierrors.IsConflict(err):
			// Not a Conflict to the writer, which would drop the state:
			// the candidate is busy, not gone; try again later.
			return fmt.Errorf("patching state %s of pod %s: it changed under %d attempts: %v", state.Phase, pod, attempt, err)
		default:
			return fmt.Errorf("patching state %s of pod %s: %w", state.Phase, pod, err)
		}
	}
}

// noManagedFields, written as a candidate's managedFields, clears them
// (the API server's reset): the API server tracks no manager of a pod
// that has none, so the writes that follow the candidate's first state
// (its allowance, its binding, its status, its next state) skip that
// bookkeeping. Flotilla reads no candidate's managers; the target's audit
// log, not managedFields, says who wrote what.
var noManagedFields = []map[string]any{{}}

// cachedCopy is the scheduler's cached copy of a candidate, nil when it has
// no cache, does not hold the pod, or holds another pod of that name.
func cachedCopy(pods corelisters.PodLister, namespace, name string, uid types.UID) *v1.Pod {
	if pods == nil {
		return nil
	}
	if cached, err := pods.Pods(namespace).Get(name); err == nil && cached.UID == uid {
		return cached
	}
	return nil
}

// StateWriter writes candidates' states in the background. It keeps only the
// latest desired state per pod, so a burst of transitions costs one write,
// and it never writes two states of one pod at once or out of order: the
// queue hands a pod to one worker at a time, and that worker always writes
// the newest state it holds.
//
// Across pods, a Reserved state is written only once every Unreserved state
// set before it has landed (or was dropped), for up to reportOrderWait: a
// node let go by one candidate and reserved by another is then never seen
// by a source's watch (which delivers a namespace's pods in the order they
// were written) as held by both. A source that counts reservations (a
// gang's places) would otherwise count the node twice: a gang's share
// let go at once, and the room it held reserved at once by another
// share's members, showed a source eight reservations in a target that
// held four, and half a gang bound.
type StateWriter struct {
	patcher StatePatcher
	queue   workqueue.TypedRateLimitingInterface[types.UID]

	mu      sync.Mutex
	pending map[types.UID]desiredState
	version uint64
}

type desiredState struct {
	pod     PodRef
	state   protocol.State
	version uint64
	// since is when it was set.
	since time.Time
}

// reportOrderWait bounds how long a Reserved state waits for the
// Unreserved states set before it: a write that keeps failing must not
// hold every other report back.
const reportOrderWait = 5 * time.Second

// reportOrderRecheck is how soon a Reserved state held back looks again.
const reportOrderRecheck = 10 * time.Millisecond

// NewStateWriter returns a writer over patcher. A nil rateLimiter means
// exponential per-pod backoff from 50ms to 30s.
func NewStateWriter(name string, patcher StatePatcher, rateLimiter workqueue.TypedRateLimiter[types.UID]) *StateWriter {
	if rateLimiter == nil {
		rateLimiter = workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](50*time.Millisecond, 30*time.Second)
	}
	return &StateWriter{
		patcher: patcher,
		queue:   workqueue.NewTypedRateLimitingQueueWithConfig(rateLimiter, workqueue.TypedRateLimitingQueueConfig[types.UID]{Name: name}),
		pending: map[types.UID]desiredState{},
	}
}

// Set records the state pod should carry; it returns at once.
func (w *StateWriter) Set(pod PodRef, state protocol.State) {
	w.mu.Lock()
	w.version++
	w.pending[pod.UID] = desiredState{pod: pod, state: state, version: w.version, since: time.Now()}
	w.mu.Unlock()
	w.queue.Add(pod.UID)
}

// unreservedBefore reports whether an Unreserved state set before version
// is still to be written. Called with w.mu held.
func (w *StateWriter) unreservedBefore(version uint64) bool {
	for _, d := range w.pending {
		if d.version < version && d.state.Phase == protocol.PhaseUnreserved {
			return true
		}
	}
	return false
}

// Pending counts the pods whose latest state is not written yet.
func (w *StateWriter) Pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.pending)
}

// Run writes with the given number of workers until ctx is done.
func (w *StateWriter) Run(ctx context.Context, workers int) {
	defer w.queue.ShutDown()
	for range workers {
		go wait.UntilWithContext(ctx, func(ctx context.Context) {
			for w.processNext(ctx) {
			}
		}, time.Second)
	}
	<-ctx.Done()
}

func (w *StateWriter) processNext(ctx context.Context) bool {
	uid, shutdown := w.queue.Get()
	if shutdown {
		return false
	}
	defer w.queue.Done(uid)

	w.mu.Lock()
	want, ok := w.pending[uid]
	held := ok && want.state.Phase == protocol.PhaseReserved && time.Since(want.since) < reportOrderWait && w.unreservedBefore(want.version)
	w.mu.Unlock()
	if !ok {
		w.queue.Forget(uid)
		return true
	}
	if held {
		w.queue.AddAfter(uid, reportOrderRecheck)
		return true
	}

	logger := klog.FromContext(ctx).WithValues("pod", want.pod.String(), "podUID", uid, "phase", want.state.Phase, "nonce", want.state.Nonce)
	err := w.patcher.PatchState(ctx, want.pod, want.state)
	switch {
	case err == nil:
		logger.V(4).Info("Wrote candidate state")
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err) || apierrors.IsInvalid(err):
		// The candidate is gone or its name belongs to a new pod (or it
		// kept changing under every attempt): the state has nobody left to
		// inform.
		logger.V(3).Info("Dropped candidate state", "err", err)
	case errors.As(err, new(*StaleStateError)):
		// A binding or another scheduler changed the candidate first, and
		// the state would now say something false (StateLands).
		logger.V(2).Info("Dropped candidate state the candidate no longer lets land", "err", err)
	default:
		logger.Error(err, "Writing candidate state failed; will retry", "retries", w.queue.NumRequeues(uid))
		w.queue.AddRateLimited(uid)
		return true
	}
	w.queue.Forget(uid)
	w.mu.Lock()
	if w.pending[uid].version == want.version {
		delete(w.pending, uid)
	}
	w.mu.Unlock()
	return true
}
