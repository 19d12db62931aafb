package split

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/workload"
)

// Policies finds the placement policy governing a pod.
type Policies interface {
	// CapacityTypeFor returns the capacity-type split of the policy that governs pod, nil when none does.
	CapacityTypeFor(pod *corev1.Pod) *v1alpha1.CapacityTypeSplit
}

// Pods reads the pods of a workload that the split serves, as the split's
// caches keep them: a Member each, finished pods left out.
type Pods interface {
	Members(ctx context.Context, namespace string, key workload.Key) ([]Member, error)
}

// Workloads reads the workloads that carry a split of their own: the
// Deployments and StatefulSets.
type Workloads interface {
	// Workload returns the workload key names; nil when there is none of a
	// kind the split reads.
	Workload(ctx context.Context, namespace string, key workload.Key) (*Workload, error)
}

// Workload is what the split keeps of a Deployment or a StatefulSet.
type Workload struct {
	Namespace string
	Key       workload.Key
	UID       types.UID
	// Annotations are the workload's own (only the split's are kept);
	// TemplateLabels and TemplateAnnotations its pod template's.
	Annotations                         map[string]string
	TemplateLabels, TemplateAnnotations map[string]string
	MinReadySeconds                     int32
	Status                              Status
}

// Object is a reference to the workload for its Events.
func (w *Workload) Object() client.Object {
	meta := metav1.ObjectMeta{Namespace: w.Namespace, Name: w.Key.Name, UID: w.UID}
	if w.Key.Kind == "StatefulSet" {
		return &appsv1.StatefulSet{ObjectMeta: meta}
	}
	return &appsv1.Deployment{ObjectMeta: meta}
}

// PendingTTL is how long a place given to a pod is held for it in memory
// until the pod shows in the cache. A pod whose creation failed after
// admission holds its place this long; one seen in the cache holds it
// there.
const PendingTTL = 30 * time.Second

// ReasonInvalidMaxOnDemand is the reason of the Warning Event on a workload
// whose max-on-demand annotation cannot be read.
const ReasonInvalidMaxOnDemand = "InvalidMaxOnDemand"

// Assigner gives each new pod of a split workload its place. The places
// of a workload's pods are read from the cache, with the places this
// replica gave to pods the cache does not show yet, one pod of a workload
// at a time: a ReplicaSet creating five pods at once with maxOnDemand 3
// gets slots 0, 1 and 2 and two spot pods. Two replicas of the agent
// admitting pods of one workload at the same instant can each give the
// same place; the Rebalancer then replaces the extra pod.
type Assigner struct {
	Pods      Pods
	Workloads Workloads
	// Policies may be nil: no policy governs any pod.
	Policies Policies
	// Recorder tells a workload's owner of a bad annotation.
	Recorder events.EventRecorder
	Log      logr.Logger
	// Now is the clock; nil: time.Now.
	Now func() time.Time

	mu     sync.Mutex
	states map[stateKey]*state
}

type stateKey struct {
	namespace string
	workload  workload.Key
}

// state is one workload's places given out but not yet seen in the cache.
type state struct {
	mu      sync.Mutex
	users   int // holders of the state, under Assigner.mu
	pending []pending
}

type pending struct {
	slot    int32
	expires time.Time
}

// Assign gives pod, being admitted, its place in its workload's split, if
// the workload has one and did not opt out, and reports whether the pod
// changed. With dryRun the place is chosen but neither held nor told.
// It fails only when the cache cannot be read.
func (a *Assigner) Assign(ctx context.Context, pod *corev1.Pod, dryRun bool) (bool, error) {
	if OptedOut(pod.Labels) {
		return false, nil
	}
	key, ok := workload.Of(pod)
	if !ok {
		// A split counts a workload's pods: a pod of its own has none.
		return false, nil
	}
	log := a.Log.WithValues("namespace", pod.Namespace, "workload", key.String())
	w, err := a.Workloads.Workload(ctx, pod.Namespace, key)
	if err != nil {
		return false, fmt.Errorf("reading the workload %s of the pod: %w", key, err)
	}
	var workloadAnnotations, templateLabels map[string]string
	if w != nil {
		workloadAnnotations, templateLabels = w.Annotations, w.TemplateLabels
	}
	var policy *v1alpha1.CapacityTypeSplit
	if a.Policies != nil {
		policy = a.Policies.CapacityTypeFor(pod)
	}
	cfg, ok, problems := Resolve(pod.Annotations, workloadAnnotations, key.Kind, policy)
	for _, p := range problems {
		log.Info("Ignoring a bad max-on-demand annotation", "problem", p.Error())
		if w != nil && !dryRun && a.Recorder != nil {
			a.Recorder.Eventf(w.Object(), nil, corev1.EventTypeWarning, ReasonInvalidMaxOnDemand, "Split", "%v", p)
		}
	}
	if !ok {
		return false, nil
	}

	// A place the pod carries was given by an earlier invocation of the
	// webhook for this request; one its template carries is a copy of some
	// other pod's, which is no place at all.
	if p, placed := PlaceOf(pod.Labels); placed && !templateCarriesPlace(templateLabels) {
		return Apply(pod, cfg, p), nil
	}

	p, err := a.choose(ctx, pod.Namespace, key, cfg.MaxOnDemand, dryRun)
	if err != nil {
		return false, err
	}
	if !dryRun {
		places.WithLabelValues(p.Type()).Inc()
	}
	log.V(1).Info("Placed a new pod", "place", p.String(), "maxOnDemand", cfg.MaxOnDemand, "from", cfg.From)
	return Apply(pod, cfg, p), nil
}

func templateCarriesPlace(labels map[string]string) bool {
	_, ok := labels[protocol.CapacityTypeLabel]
	return ok
}

// choose picks the place of a new pod of the workload key, holding it for
// the pod unless dryRun.
func (a *Assigner) choose(ctx context.Context, namespace string, key workload.Key, maxOnDemand int32, dryRun bool) (Place, error) {
	sk := stateKey{namespace: namespace, workload: key}
	s := a.acquire(sk)
	defer a.release(sk, s)
	s.mu.Lock()
	defer s.mu.Unlock()

	pods, err := a.Pods.Members(ctx, namespace, key)
	if err != nil {
		return Place{}, fmt.Errorf("listing the pods of %s: %w", key, err)
	}
	held := Held(pods)
	seen := make(map[int32]bool, len(held))
	for _, slot := range held {
		seen[slot] = true
	}
	now := a.now()
	kept := s.pending[:0]
	for _, p := range s.pending {
		// Once the cache shows a pod in the place, the cache holds it.
		if now.Before(p.expires) && !seen[p.slot] {
			kept = append(kept, p)
			held = append(held, p.slot)
		}
	}
	s.pending = kept
	p := Choose(maxOnDemand, held)
	if p.OnDemand && !dryRun {
		s.pending = append(s.pending, pending{slot: p.Slot, expires: now.Add(PendingTTL)})
	}
	return p, nil
}

// acquire returns the state of a workload, made when missing; release
// drops it when nobody holds it and it holds no place, so the states of
// workloads long gone do not pile up.
func (a *Assigner) acquire(k stateKey) *state {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.states == nil {
		a.states = map[stateKey]*state{}
	}
	s := a.states[k]
	if s == nil {
		s = &state{}
		a.states[k] = s
	}
	s.users++
	return s
}

func (a *Assigner) release(k stateKey, s *state) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s.users--
	if s.users > 0 {
		return
	}
	s.mu.Lock()
	empty := len(s.pending) == 0
	s.mu.Unlock()
	if empty {
		delete(a.states, k)
	}
}

func (a *Assigner) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}
