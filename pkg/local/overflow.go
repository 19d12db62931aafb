package local

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// Overflow evicts the pods kept here that did not fit after all.
// +kubebuilder:rbac:groups="",resources=pods/eviction,verbs=create

// Overflow sends on the pods kept here that their scheduler has found no
// node for during After: the room the view counted at admission was taken
// meanwhile (by another scheduler, or a pod the view had not seen), or the
// pod asks for what the view does not count (pod affinity, spread, ports,
// volumes). It evicts each such pod that has a controller, through the
// Eviction API so that PodDisruptionBudgets hold, and the controller makes
// a replacement, which the webhook sends through the targets: the view
// keeps none of that controller's pods for DefaultUnfitMemory. A pod
// without a controller cannot be made again; it stays, and gets an Event
// that says so. Overflow runs on the leader; with After 0 it evicts
// nothing and only starts the view once a self target has localFirst.
type Overflow struct {
	View     *View
	Keeper   *Keeper
	Kube     kubernetes.Interface
	Recorder events.EventRecorder
	// After is how long a kept pod may wait with no node for it.
	After time.Duration
	clock clock.Clock

	// evicted and told are the pods (by UID) evicted, and told they stay,
	// while they are stuck.
	evicted, told map[string]bool
}

var (
	_ manager.Runnable               = &Overflow{}
	_ manager.LeaderElectionRunnable = &Overflow{}
)

// NeedLeaderElection is true: one replica evicts.
func (o *Overflow) NeedLeaderElection() bool { return true }

// Start looks at the stuck pods every After/3 (1 to 10 s; 10 s with After
// 0) until ctx ends.
// It asks for the view as soon as a self target with localFirst exists,
// for the pods another replica's webhook kept.
func (o *Overflow) Start(ctx context.Context) error {
	if o.clock == nil {
		o.clock = clock.RealClock{}
	}
	o.evicted, o.told = map[string]bool{}, map[string]bool{}
	period := 10 * time.Second
	if o.After > 0 {
		period = min(max(o.After/3, time.Second), period)
	}
	wait.UntilWithContext(ctx, o.sweep, period)
	return nil
}

func (o *Overflow) sweep(ctx context.Context) {
	log := logr.FromContextOrDiscard(ctx).WithName("overflow")
	if !o.View.Wanted() {
		if first, err := o.Keeper.localFirst(ctx, metav1.NamespaceAll); err != nil {
			log.Error(err, "Looking for a self target with localFirst")
		} else if first {
			o.View.Want()
		}
		return
	}
	if !o.View.Synced() || o.After <= 0 {
		return
	}
	stuck := o.View.stuckBefore(o.clock.Now().Add(-o.After))
	still := make(map[string]bool, len(stuck))
	for _, k := range stuck {
		uid := string(k.uid)
		still[uid] = true
		if k.owner.UID == "" {
			if !o.told[uid] {
				o.told[uid] = true
				o.Recorder.Eventf(k.pod(), nil, corev1.EventTypeWarning, "StaysUnplaced", "Overflow",
					"Kept in this cluster, its scheduler has found no node for it for %s; a pod without a controller cannot be made again elsewhere: delete it and create it again to send it through the targets", o.After)
			}
			continue
		}
		if o.evicted[uid] {
			continue
		}
		evicted, err := o.evict(ctx, k)
		if err != nil {
			log.V(1).Info("Could not evict a pod kept here with no node for it; trying again", "namespace", k.namespace, "name", k.name, "err", err.Error())
			continue
		}
		if !evicted {
			// Gone, or changed since the view saw it (bound at last,
			// or seen stuck again): the view's next look decides.
			continue
		}
		o.evicted[uid] = true
		log.Info("Evicted a pod kept here with no node for it", "namespace", k.namespace, "name", k.name, "owner", k.owner.Kind+"/"+k.owner.Name)
		o.Recorder.Eventf(k.pod(), nil, corev1.EventTypeNormal, "Overflow", "Evict",
			"Kept in this cluster, its scheduler has found no node for it for %s: evicted, so that %s %s makes a pod that goes through the targets", o.After, k.owner.Kind, k.owner.Name)
	}
	for _, seen := range []map[string]bool{o.evicted, o.told} {
		for uid := range seen {
			if !still[uid] {
				delete(seen, uid)
			}
		}
	}
}

// evict asks the API server to evict the pod as the view holds it, its UID
// and resourceVersion: evicted is false, with no error, for a pod gone,
// replaced or changed meanwhile. A view that lags (a watch behind, or a
// leader that was paused and has not yet found out it is no longer one)
// never evicts a pod that its scheduler has bound since.
func (o *Overflow) evict(ctx context.Context, k keptPod) (evicted bool, err error) {
	pre := &metav1.Preconditions{UID: &k.uid}
	if k.resourceVersion != "" {
		pre.ResourceVersion = &k.resourceVersion
	}
	err = o.Kube.CoreV1().Pods(k.namespace).EvictV1(ctx, &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: k.name, Namespace: k.namespace},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: pre},
	})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return false, nil
	}
	return err == nil, err
}

// pod is a reference to the kept pod for its Events.
func (k keptPod) pod() *corev1.Pod {
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: k.namespace, Name: k.name, UID: k.uid},
	}
}
