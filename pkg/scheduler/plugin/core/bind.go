package core

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// Binder reads a candidate from the API server and binds it.
type Binder interface {
	// Get reads the pod from the API server, not from a cache.
	Get(ctx context.Context, namespace, name string) (*v1.Pod, error)
	// Bind creates the Binding; the API server refuses it with a Conflict
	// when the pod's resourceVersion is no longer the Binding's.
	Bind(ctx context.Context, binding *v1.Binding) error
}

// ClientBinder binds through the API server.
type ClientBinder struct {
	Client kubernetes.Interface
}

var _ Binder = ClientBinder{}

// Get reads the pod from the API server.
func (b ClientBinder) Get(ctx context.Context, namespace, name string) (*v1.Pod, error) {
	return b.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
}

// Bind creates the Binding.
func (b ClientBinder) Bind(ctx context.Context, binding *v1.Binding) error {
	return b.Client.CoreV1().Pods(binding.Namespace).Bind(ctx, binding, metav1.CreateOptions{})
}

// BindRefusedError says why a reservation may no longer bind its
// candidate (Bindable).
type BindRefusedError struct {
	Reason string
}

func (e *BindRefusedError) Error() string { return "not binding the candidate: " + e.Reason }

// Bind binds pod to node, the node of the reservation this Manager holds,
// as a compare-and-swap: it judges a copy of the candidate (Bindable: it
// still reports this reservation as Reserved and carries the source's
// allowance of it) and sends a Binding with that copy's resourceVersion,
// which the API server takes as a precondition. A scheduler deposed while it
// held the reservation in Permit therefore cannot bind once its successor
// has reported the reservation lost, however long it was frozen between
// judging and binding: that report changed the version. When the
// candidate changed otherwise (a write of the source), it judges a fresh
// copy and tries again. The Binding carries the Bound state, so the
// candidate is never seen bound and still Reserved.
//
// On a BindRefusedError the reservation ends (Unreserve) with its reason.
func (m *Manager) Bind(ctx context.Context, pod *v1.Pod, node string, binder Binder) error {
	m.mu.Lock()
	r, ok := m.reserved[pod.UID]
	var nonce string
	if ok {
		nonce = r.Nonce
	}
	m.mu.Unlock()
	if !ok {
		return &BindRefusedError{Reason: "no reservation is held for this scheduling cycle"}
	}
	annotations, err := m.BindingAnnotations(pod, node)
	if err != nil {
		return err
	}
	logger := klog.FromContext(ctx).WithValues("pod", klog.KObj(pod), "node", node, "nonce", nonce)

	current := cachedCopy(m.pods, pod.Namespace, pod.Name, pod.UID)
	for attempt := 1; ; attempt++ {
		if current == nil {
			current, err = binder.Get(ctx, pod.Namespace, pod.Name)
			if err != nil {
				return fmt.Errorf("reading candidate %s before binding it: %w", klog.KObj(pod), err)
			}
		}
		reason := Bindable(nonce, node, current)
		if current.UID != pod.UID {
			reason = "the candidate was deleted and its name reused"
		}
		if reason != "" {
			m.refused(pod, reason)
			logger.V(2).Info("Refused to bind candidate", "reason", reason, "resourceVersion", current.ResourceVersion)
			return &BindRefusedError{Reason: reason}
		}
		binding := &v1.Binding{
			ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, ResourceVersion: current.ResourceVersion, Annotations: annotations},
			Target:     v1.ObjectReference{Kind: "Node", Name: node},
		}
		err := binder.Bind(ctx, binding)
		switch {
		case err == nil:
			m.BoundReported(pod)
			logger.V(3).Info("Bound candidate", "resourceVersion", current.ResourceVersion)
			return nil
		case apierrors.IsConflict(err) && attempt < maxStateAttempts:
			logger.V(3).Info("Candidate changed since it was judged; judging it again", "resourceVersion", current.ResourceVersion, "err", err)
			current = nil
		default:
			return fmt.Errorf("binding candidate %s to node %s: %w", klog.KObj(pod), node, err)
		}
	}
}

// refused records why the reservation of pod may not bind, the reason its
// Unreserve reports.
func (m *Manager) refused(pod *v1.Pod, reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, ok := m.reserved[pod.UID]; ok {
		r.Reason = reason
	}
}
