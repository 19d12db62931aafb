package split

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/workload"
)

// Reasons of the rebalancer's Events on a workload.
const (
	ReasonRebalancing = "Rebalancing"
	// ReasonSplitNotApplied: a pod made since the last eviction came
	// without a place, so the split's webhook did not see it.
	ReasonSplitNotApplied = "SplitNotApplied"
)

// Request names a workload to rebalance.
type Request struct {
	Namespace string
	Key       workload.Key
}

func (r Request) String() string { return r.Namespace + "/" + r.Key.String() }

// Evictor evicts one pod through the Eviction API, which keeps to the
// pod's PodDisruptionBudgets; uid guards against a pod of the same name
// made since.
type Evictor interface {
	Evict(ctx context.Context, namespace, name string, uid types.UID) error
}

// KubeEvictor is the Evictor of a clientset.
type KubeEvictor struct{ Kube kubernetes.Interface }

// +kubebuilder:rbac:groups="",resources=pods/eviction,verbs=create

// Evict evicts the pod.
func (e KubeEvictor) Evict(ctx context.Context, namespace, name string, uid types.UID) error {
	return e.Kube.PolicyV1().Evictions(namespace).Evict(ctx, &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Namespace: namespace, Name: name},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}},
	})
}

// How long the rebalancer waits: for the cache to show a pod it evicted,
// after a PodDisruptionBudget refused an eviction, and after a replacement
// came back without a place.
const (
	cacheLagRetry  = time.Second
	refusedRetry   = 10 * time.Second
	unplacedPause  = 5 * time.Minute
	settledRecheck = 5 * time.Second
)

// Rebalancer brings each split workload's pods back to its maxOnDemand,
// on the leader: when more pods are on-demand than allowed, or fewer while
// spot pods run, or pods run without a place, and only while the workload
// is fully available, it evicts one pod (see Rebalance), whose replacement
// gets its place from the webhook. It never edits a running pod.
//
// What it decides is a function of the workload and its pods as the
// caches show them. It remembers in memory only its last eviction of each
// workload, as a guard: until the cache shows that pod going, the
// workload's status may not show it yet either, and a replacement made
// since without a place means the webhook did not see it, so evicting more
// would only bring more pods without a place: it pauses and says so.
type Rebalancer struct {
	Pods      Pods
	Workloads Workloads
	// Policies may be nil.
	Policies Policies
	Evictor  Evictor
	Recorder events.EventRecorder
	// Now is the clock; nil: time.Now.
	Now func() time.Time

	mu      sync.Mutex
	evicted map[Request]eviction
}

type eviction struct {
	uid         types.UID
	at          time.Time
	pausedUntil time.Time
}

var _ reconcile.TypedReconciler[Request] = &Rebalancer{}

// Reconcile rebalances one workload by at most one pod.
func (r *Rebalancer) Reconcile(ctx context.Context, req Request) (reconcile.Result, error) {
	log := logr.FromContextOrDiscard(ctx)
	w, err := r.Workloads.Workload(ctx, req.Namespace, req.Key)
	if err != nil {
		return reconcile.Result{}, err
	}
	if w == nil || !Served(w.TemplateLabels) {
		r.forget(req)
		return reconcile.Result{}, nil
	}
	cfg, ok, problems := Resolve(w.TemplateAnnotations, w.Annotations, req.Key.Kind, r.policyOf(w))
	for _, p := range problems {
		r.Recorder.Eventf(w.Object(), nil, corev1.EventTypeWarning, ReasonInvalidMaxOnDemand, "Split", "%v", p)
	}
	if !ok {
		r.forget(req)
		return reconcile.Result{}, nil
	}
	pods, err := r.Pods.Members(ctx, req.Namespace, req.Key)
	if err != nil {
		return reconcile.Result{}, err
	}
	now := r.now()

	if last, ok := r.lastEviction(req); ok {
		if now.Before(last.pausedUntil) {
			return reconcile.Result{RequeueAfter: last.pausedUntil.Sub(now)}, nil
		}
		if last.pausedUntil.IsZero() {
			for _, m := range pods {
				if m.UID == last.uid && !m.Terminating {
					log.V(1).Info("Waiting for the cache to show the evicted pod going", "pod", m.Name)
					return reconcile.Result{RequeueAfter: cacheLagRetry}, nil
				}
			}
			// Creation times are in seconds: a pod of the same second as
			// the eviction counts as made since.
			since := last.at.Truncate(time.Second)
			for _, m := range pods {
				if !m.Placed && !m.Terminating && !m.Created.Before(since) {
					r.Recorder.Eventf(w.Object(), nil, corev1.EventTypeWarning, ReasonSplitNotApplied, "Rebalance",
						"Pod %s was admitted without a place on on-demand or spot nodes: the webhook of the split did not see it (can the API server reach the agent?); rebalancing pauses for %s", m.Name, unplacedPause)
					r.pause(req, now.Add(unplacedPause))
					return reconcile.Result{RequeueAfter: unplacedPause}, nil
				}
			}
		}
	}

	minReady := time.Duration(w.MinReadySeconds) * time.Second
	if settled, why := Settled(w.Status, pods, minReady, now); !settled {
		log.V(1).Info("Not rebalancing until the workload is fully available", "waiting", why)
		// Its status and pods change as it settles, and bring it back
		// here; only minReadySeconds passing changes nothing watched.
		if minReady > 0 {
			return reconcile.Result{RequeueAfter: min(minReady, settledRecheck)}, nil
		}
		return reconcile.Result{}, nil
	}
	victim, why, ok := Rebalance(cfg.MaxOnDemand, pods)
	if !ok {
		r.forget(req)
		return reconcile.Result{}, nil
	}
	err = r.Evictor.Evict(ctx, req.Namespace, victim.Name, victim.UID)
	switch {
	case apierrors.IsTooManyRequests(err):
		// A PodDisruptionBudget says not now.
		evictions.WithLabelValues("refused").Inc()
		log.Info("Eviction refused; retrying", "pod", victim.Name, "error", err.Error())
		return reconcile.Result{RequeueAfter: refusedRetry}, nil
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		// Gone already, or another pod of that name: the cache will say.
		return reconcile.Result{RequeueAfter: cacheLagRetry}, nil
	case err != nil:
		evictions.WithLabelValues("refused").Inc()
		return reconcile.Result{}, fmt.Errorf("evicting pod %s/%s: %w", req.Namespace, victim.Name, err)
	}
	evictions.WithLabelValues("evicted").Inc()
	r.remember(req, eviction{uid: victim.UID, at: now})
	onDemand, spot, unplaced := Count(pods)
	log.Info("Evicted a pod to rebalance", "pod", victim.Name, "place", placeString(victim), "reason", why,
		"onDemand", onDemand, "spot", spot, "unplaced", unplaced, "maxOnDemand", cfg.MaxOnDemand)
	r.Recorder.Eventf(w.Object(), nil, corev1.EventTypeNormal, ReasonRebalancing, "Rebalance",
		"Evicted pod %s (%s): %s (max %d on-demand, from %s); its replacement gets the place of the split", victim.Name, placeString(victim), why, cfg.MaxOnDemand, cfg.From)
	return reconcile.Result{RequeueAfter: cacheLagRetry}, nil
}

func placeString(m Member) string {
	if !m.Placed {
		return "no place"
	}
	return m.Place.String()
}

// Served reports whether the pods of a template reach the split: opted in
// to the single-cluster split, or multi-cluster, and not opted out.
func Served(templateLabels map[string]string) bool {
	if OptedOut(templateLabels) {
		return false
	}
	return templateLabels[protocol.CapacitySplitLabel] == "true" || templateLabels[protocol.ElectLabel] == "true"
}

// policyOf asks the policies about a pod as the workload's template makes
// them.
func (r *Rebalancer) policyOf(w *Workload) *v1alpha1.CapacityTypeSplit {
	if r.Policies == nil {
		return nil
	}
	return r.Policies.CapacityTypeFor(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Namespace: w.Namespace, Labels: w.TemplateLabels, Annotations: w.TemplateAnnotations,
	}})
}

func (r *Rebalancer) lastEviction(req Request) (eviction, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.evicted[req]
	return e, ok
}

func (r *Rebalancer) remember(req Request, e eviction) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.evicted == nil {
		r.evicted = map[Request]eviction{}
	}
	r.evicted[req] = e
}

// pause stops evictions of a workload until; after, the pods without a
// place are replaced again, the webhook having had the time to come back.
func (r *Rebalancer) pause(req Request, until time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.evicted[req]
	e.pausedUntil = until
	r.evicted[req] = e
}

func (r *Rebalancer) forget(req Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.evicted, req)
}

func (r *Rebalancer) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}
