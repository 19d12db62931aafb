package target

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/vnode"
)

// claim registers the virtual node of the target v describes, or finds it
// registered by that target already; a *vnode.TakenError when another
// target owns it (or it is no virtual node). Registering it with its owner
// before anything runs for the target makes the first of two targets that
// want one node its owner, and the second is refused before it starts.
func (c *Controller) claim(ctx context.Context, v view) error {
	return vnode.ClaimNode(ctx, vnode.Config{
		NodeName:    protocol.VirtualNodeName(v.namespace, nameOnly(v.name)),
		Target:      nameOnly(v.name),
		Namespace:   v.namespace,
		Labels:      v.labels,
		Client:      c.Kube,
		Address:     c.KubeletAddress,
		KubeletPort: c.KubeletPort,
	})
}

// takenMessage is the Ready condition's message of a target whose node is
// taken.
func takenMessage(taken *vnode.TakenError) string {
	if taken.Owner == "" {
		return fmt.Sprintf("Its virtual node %s exists and is no Flotilla virtual node (it has neither the %s annotation nor the labels of one): nothing runs for this target while it exists", taken.Node, protocol.VirtualNodeOwnerAnnotation)
	}
	return fmt.Sprintf("Its virtual node %s belongs to %s (annotation %s): nothing runs for this target while that one owns it; rename one of the two", taken.Node, taken.Owner, protocol.VirtualNodeOwnerAnnotation)
}

// deleteOwnNode deletes a virtual node if owner owns it; a node that is
// missing, or another's, is left alone.
func deleteOwnNode(ctx context.Context, kube kubernetes.Interface, name string, owner protocol.NodeOwner) error {
	if name == "" {
		return nil
	}
	node, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading virtual node %s: %w", name, err)
	}
	if vnode.CheckOwner(node, owner) != nil {
		return nil
	}
	err = kube.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &node.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting virtual node %s: %w", name, err)
	}
	klog.FromContext(ctx).Info("Deleted virtual node", "node", name, "owner", owner.String())
	return nil
}

// retiring is a running target's node of the old namespaced form, run while
// pods are bound to it.
type retiring struct {
	// mirrorOnly: another target owns the node and keeps it Ready; only
	// this target's pods on it are mirrored.
	mirrorOnly bool
	// status is the node's own: Ready as its target's node is, with the
	// default capacity (it takes no new pods).
	status *vnode.Status
	cancel context.CancelFunc
	done   chan struct{}
}

// retire serves the pods of a namespaced Target bound to its node of the
// old form (protocol.LegacyVirtualNodeName), which no new pod gets: while
// some are, the node runs, unschedulable (or, when another target owns it,
// those pods alone are mirrored); once none is, the node is deleted if it
// is the target's.
func (c *Controller) retire(ctx context.Context, r *running) error {
	t := r.t
	legacy := t.LegacyNodeName
	if legacy == "" {
		return nil
	}
	me := protocol.OwnerOfTargetName(t.Name)
	if c.podsOf(t.Name, "", legacy) == 0 {
		r.stopRetiring()
		if r.retired.Load() {
			// No pod is bound to an old-form node any more.
			return nil
		}
		if err := deleteOwnNode(ctx, c.Kube, legacy, me); err != nil {
			return err
		}
		r.retired.Store(true)
		return nil
	}
	r.retired.Store(false)
	node, err := c.Kube.CoreV1().Nodes().Get(ctx, legacy, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		// Deleted: the pod garbage collector removes its pods.
		r.stopRetiring()
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading node %s: %w", legacy, err)
	}
	if _, ok := vnode.OwnerOf(node); !ok {
		r.stopRetiring()
		return nil
	}
	r.startRetiring(c, legacy, vnode.CheckOwner(node, me) != nil)
	return nil
}

func (r *running) startRetiring(c *Controller, node string, mirrorOnly bool) {
	r.mu.Lock()
	if r.retiring != nil && r.retiring.mirrorOnly == mirrorOnly {
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	r.stopRetiring()
	ctx, cancel := context.WithCancel(r.ctx)
	ret := &retiring{mirrorOnly: mirrorOnly, status: vnode.NewStatus(), cancel: cancel, done: make(chan struct{})}
	if s := r.status.Get(); !s.Ready {
		ret.status.SetReady(false, s.Reason, s.Message)
	}
	cfg := c.nodeConfig(r.t, ret.status)
	cfg.NodeName, cfg.Retiring, cfg.MirrorOnly = node, true, mirrorOnly
	name := r.t.Name
	cfg.Accept = func(pod *corev1.Pod) bool { return runsOn(pod, name, "", node) }
	go func() {
		defer close(ret.done)
		c.runNode(ctx, cfg)
	}()
	r.mu.Lock()
	r.retiring = ret
	r.mu.Unlock()
	klog.FromContext(ctx).Info("Serving the pods still bound to the target's node of the old form", "target", name, "node", node, "mirrorOnly", mirrorOnly)
}

func (r *running) stopRetiring() {
	r.mu.Lock()
	ret := r.retiring
	r.retiring = nil
	r.mu.Unlock()
	if ret != nil {
		ret.cancel()
		<-ret.done
	}
}

// runNode runs a virtual node until ctx ends, starting it again with
// backoff when it fails.
func (c *Controller) runNode(ctx context.Context, cfg vnode.Config) {
	run := c.runVNode
	if run == nil {
		run = vnode.Run
	}
	backoff := time.Second
	for {
		err := run(ctx, cfg)
		if ctx.Err() != nil {
			return
		}
		klog.FromContext(ctx).Error(err, "Virtual node stopped; starting it again", "target", cfg.Target, "node", cfg.NodeName, "after", backoff)
		select {
		case <-ctx.Done():
			return
		case <-c.clock().After(backoff):
		}
		backoff = min(2*backoff, time.Minute)
	}
}
