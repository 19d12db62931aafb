package core

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// Scheduler is what the Manager needs of the scheduling framework; its
// Handle provides it.
type Scheduler interface {
	// GetWaitingPod returns the pod waiting in Permit, or nil.
	GetWaitingPod(uid types.UID) fwk.WaitingPod
}

// Options configure a Manager.
type Options struct {
	// PluginName is the name under which waiting pods are allowed or rejected.
	PluginName string
	// SchedulerName is the profile whose candidates this Manager serves.
	SchedulerName string
	// PermitTimeout bounds a wait in Permit.
	PermitTimeout time.Duration
	// TopologyKeys are the node labels whose values the Reserved and Bound
	// reports carry (Args.Topology); protocol.DefaultTopologyKeys when nil.
	TopologyKeys []string
	// Workers per queue; default 16: state writes are API calls, and a
	// burst of candidates must not wait behind each other.
	Workers int
	// MaxSettleRetries bounds how often a decided pod is looked for among
	// the waiting pods before giving up; default 20 (about 10 seconds).
	MaxSettleRetries int
	// ShareTimeout bounds how long a gang's share holds its members'
	// reservations from its first member's, however many keep joining
	// (see share); 0: candidates of a share wait as any other.
	ShareTimeout time.Duration
	// Activate hands pods back to the scheduler's queue: the members of a
	// share held back at PreFilter while an older share waited for room
	// (see HoldBack). Nil: they wait for their next try.
	Activate func(pods []*v1.Pod)
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// Manager runs the protocol for one scheduling profile: it makes a
// reservation at Reserve, decides at Permit, and settles waiting pods when
// the source's allowance or denial arrives through the pod informer.
type Manager struct {
	opts      Options
	scheduler Scheduler
	pods      corelisters.PodLister
	writer    *StateWriter
	settle    workqueue.TypedRateLimitingInterface[PodRef]

	mu       sync.Mutex
	reserved map[types.UID]*Reservation
	shares   map[shareKey]*shareRecord
}

// NewManager returns a Manager; Run starts its workers.
func NewManager(opts Options, scheduler Scheduler, pods corelisters.PodLister, writer *StateWriter) *Manager {
	if opts.Workers <= 0 {
		opts.Workers = 16
	}
	if opts.MaxSettleRetries <= 0 {
		opts.MaxSettleRetries = 20
	}
	if opts.TopologyKeys == nil {
		opts.TopologyKeys = protocol.DefaultTopologyKeys
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Manager{
		opts:      opts,
		scheduler: scheduler,
		pods:      pods,
		writer:    writer,
		settle: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[PodRef](5*time.Millisecond, time.Second),
			workqueue.TypedRateLimitingQueueConfig[PodRef]{Name: "flotilla_candidate_settle_" + opts.SchedulerName},
		),
		reserved: map[types.UID]*Reservation{},
		shares:   map[shareKey]*shareRecord{},
	}
}

// Run runs the state writer and the settling workers until ctx is done.
func (m *Manager) Run(ctx context.Context) {
	defer m.settle.ShutDown()
	go m.writer.Run(ctx, m.opts.Workers)
	for range m.opts.Workers {
		go wait.UntilWithContext(ctx, func(ctx context.Context) {
			for m.processNextSettle(ctx) {
			}
		}, time.Second)
	}
	if m.opts.ShareTimeout > 0 {
		go wait.UntilWithContext(ctx, func(ctx context.Context) {
			m.expireShares(m.opts.Now())
			m.sweepOrder(klog.FromContext(ctx), m.opts.Now())
		}, shareSweep)
	}
	<-ctx.Done()
}

// Reserve makes a new reservation of pod on node, whose labels are
// nodeLabels, and reports it as Reserved with score and the node's
// topology, unless the candidate is pre-allowed (PreAllowed): then no one
// waits for the report, Permit allows at once and the binding reports
// Bound. It returns the reservation's nonce.
func (m *Manager) Reserve(ctx context.Context, pod *v1.Pod, node string, nodeLabels map[string]string, score int64) (string, error) {
	nonce, err := NewNonce()
	if err != nil {
		return "", fmt.Errorf("reserving pod %s on node %s: %w", klog.KObj(pod), node, err)
	}
	topology := TopologyOf(nodeLabels, m.opts.TopologyKeys)
	now := m.opts.Now()
	r := &Reservation{Nonce: nonce, Node: node, Topology: topology, Pod: refOf(pod), Cluster: pod.Labels[protocol.SourceClusterLabel], ReservedAt: now}
	m.mu.Lock()
	if old := m.reserved[pod.UID]; old != nil {
		m.leaveShare(pod.UID, old, false, now)
	}
	m.reserved[pod.UID] = r
	m.joinShare(pod, r, now)
	m.reservedMember(pod)
	release := m.releaseHeldBack()
	m.mu.Unlock()
	m.activate(release)
	preAllowed := PreAllowed(pod.Labels, pod.Annotations)
	if !preAllowed {
		m.writer.Set(refOf(pod), protocol.State{Phase: protocol.PhaseReserved, Nonce: nonce, Node: node, Score: score, Topology: topology})
	}
	klog.FromContext(ctx).V(2).Info("Reserved candidate", "pod", klog.KObj(pod), "node", node, "nonce", nonce, "score", score, "topology", topology, "preAllowed", preAllowed)
	return nonce, nil
}

// ReasonReservationLost is the reason of the Unreserved state written for a
// reservation that the candidate's state still reports but that no
// scheduler holds any more.
const ReasonReservationLost = "the reservation was lost: the scheduler restarted, and the candidate is being scheduled again"

// Rescheduling is told that a candidate enters a new scheduling cycle. A
// Reserved state that this Manager does not hold was made by an earlier
// scheduler (one that restarted while the candidate waited in Permit): its
// node may have gone to another pod since, and no one would ever report the
// reservation's end, so the source would wait on its election forever. The
// Manager reports it Unreserved; the next Reserve reports anew.
func (m *Manager) Rescheduling(ctx context.Context, pod *v1.Pod) {
	raw, ok := pod.Annotations[protocol.StateAnnotation]
	if !ok {
		return
	}
	var reported protocol.State
	if json.Unmarshal([]byte(raw), &reported) != nil || reported.Phase != protocol.PhaseReserved {
		return
	}
	m.mu.Lock()
	held := m.reserved[pod.UID]
	m.mu.Unlock()
	if held != nil && held.Nonce == reported.Nonce {
		return
	}
	m.writer.Set(refOf(pod), protocol.State{Phase: protocol.PhaseUnreserved, Nonce: reported.Nonce, Node: reported.Node, Reason: ReasonReservationLost})
	klog.FromContext(ctx).V(2).Info("Reported a reservation no scheduler holds as Unreserved", "pod", klog.KObj(pod), "nonce", reported.Nonce, "node", reported.Node)
}

// Permit decides on the reservation from the freshest copy of the pod in the
// scheduler's cache, so an allowance that arrived before Permit is not
// missed. On Wait, the informer settles the pod later.
func (m *Manager) Permit(ctx context.Context, pod *v1.Pod) Decision {
	current := pod
	if m.pods != nil {
		if cached, err := m.pods.Pods(pod.Namespace).Get(pod.Name); err == nil && cached.UID == pod.UID {
			current = cached
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.reserved[pod.UID]
	if !ok {
		return Decision{Verdict: Reject, Reason: "no reservation was made for this scheduling cycle"}
	}
	d := Decide(r.Nonce, current.Labels, current.Annotations)
	switch {
	case d.Verdict == Wait && r.ShareExpired:
		d = Decision{Verdict: Reject, Reason: shareExpiredReason(m.opts.PermitTimeout, m.opts.ShareTimeout)}
	case d.Verdict == Wait && r.ShareYielded:
		d = Decision{Verdict: Reject, Reason: shareYieldedReason}
	}
	now := m.opts.Now()
	switch d.Verdict {
	case Wait:
		r.WaitingSince = now
		d.Timeout = m.opts.PermitTimeout
		if r.share != nil {
			// The share's deadline comes first (expireShares); this one
			// only backs it up.
			d.Timeout = min(m.opts.ShareTimeout+m.opts.PermitTimeout, MaxPermitTimeoutSeconds*time.Second)
		}
	default:
		r.Settled = true
		r.Reason = d.Reason
		m.leaveShare(pod.UID, r, d.Verdict == Allow, now)
	}
	klog.FromContext(ctx).V(3).Info("Permit decided", "pod", klog.KObj(pod), "nonce", r.Nonce, "verdict", d.Verdict, "reason", d.Reason)
	return d
}

// Unreserve forgets the reservation and reports it as Unreserved with the
// reason. That report landing on the pod is what requeues the candidate (see
// ReservationEnded). It returns the UnreserveKind, "" when it held no
// reservation of pod, and how long the reservation held its node.
func (m *Manager) Unreserve(ctx context.Context, pod *v1.Pod, node string) (kind string, held time.Duration) {
	now := m.opts.Now()
	r, ok := m.forget(pod.UID, now)
	if !ok {
		return "", 0
	}
	reason := UnreserveReason(*r, m.opts.PermitTimeout, now)
	m.writer.Set(refOf(pod), protocol.State{Phase: protocol.PhaseUnreserved, Nonce: r.Nonce, Node: node, Reason: reason})
	klog.FromContext(ctx).V(2).Info("Unreserved candidate", "pod", klog.KObj(pod), "node", node, "nonce", r.Nonce, "reason", reason)
	return UnreserveKind(*r, m.opts.PermitTimeout, now), now.Sub(r.ReservedAt)
}

// BindingAnnotations returns the annotations a binding of pod to node
// carries so that it reports the candidate as Bound in the same write: the
// API server merges a Binding's annotations into the pod it binds.
func (m *Manager) BindingAnnotations(pod *v1.Pod, node string) (map[string]string, error) {
	m.mu.Lock()
	var nonce string
	var topology map[string]string
	if r, ok := m.reserved[pod.UID]; ok {
		nonce, topology = r.Nonce, r.Topology
	}
	m.mu.Unlock()
	value, err := json.Marshal(protocol.State{Phase: protocol.PhaseBound, Nonce: nonce, Node: node, Topology: topology})
	if err != nil {
		return nil, fmt.Errorf("encoding Bound state of pod %s: %w", klog.KObj(pod), err)
	}
	return map[string]string{protocol.StateAnnotation: string(value)}, nil
}

// BoundReported records that pod's binding carried its Bound state.
func (m *Manager) BoundReported(pod *v1.Pod) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, ok := m.reserved[pod.UID]; ok {
		r.BoundReported = true
	}
}

// Bound forgets the reservation and reports the candidate as Bound, unless
// its binding already did (see BindingAnnotations): then it writes nothing.
func (m *Manager) Bound(ctx context.Context, pod *v1.Pod, node string) {
	r, ok := m.forget(pod.UID, m.opts.Now())
	var nonce string
	var topology map[string]string
	if ok {
		nonce, topology = r.Nonce, r.Topology
		if r.BoundReported {
			klog.FromContext(ctx).V(2).Info("Candidate bound", "pod", klog.KObj(pod), "node", node, "nonce", nonce)
			return
		}
	}
	m.writer.Set(refOf(pod), protocol.State{Phase: protocol.PhaseBound, Nonce: nonce, Node: node, Topology: topology})
	klog.FromContext(ctx).V(2).Info("Candidate bound by another binder; reporting Bound", "pod", klog.KObj(pod), "node", node, "nonce", nonce)
}

// EventHandler is the handler to add to the scheduler's pod informer: it
// queues this profile's candidates that hold a reservation whenever they
// change or disappear.
func (m *Manager) EventHandler() cache.ResourceEventHandler {
	return cache.FilteringResourceEventHandler{
		FilterFunc: func(obj any) bool {
			pod := podOf(obj)
			return pod != nil && pod.Spec.SchedulerName == m.opts.SchedulerName && IsCandidate(pod.Labels)
		},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { m.enqueue(podOf(obj)) },
			UpdateFunc: func(_, obj any) { m.enqueue(podOf(obj)) },
			DeleteFunc: func(obj any) { m.enqueue(podOf(obj)) },
		},
	}
}

func (m *Manager) enqueue(pod *v1.Pod) {
	if pod == nil {
		return
	}
	m.mu.Lock()
	_, ok := m.reserved[pod.UID]
	m.mu.Unlock()
	if ok {
		m.settle.Add(refOf(pod))
	}
}

func (m *Manager) processNextSettle(ctx context.Context) bool {
	ref, shutdown := m.settle.Get()
	if shutdown {
		return false
	}
	defer m.settle.Done(ref)
	logger := klog.FromContext(ctx).WithValues("pod", ref.String(), "podUID", ref.UID)

	retry, err := m.settlePod(logger, ref)
	switch {
	case err != nil:
		logger.Error(err, "Settling candidate failed; will retry")
	case !retry:
		m.settle.Forget(ref)
		return true
	}
	if m.settle.NumRequeues(ref) >= m.opts.MaxSettleRetries {
		logger.Info("Gave up settling candidate: it never showed up among the waiting pods; Permit will time out", "retries", m.settle.NumRequeues(ref))
		m.settle.Forget(ref)
		return true
	}
	m.settle.AddRateLimited(ref)
	return true
}

// settlePod allows or rejects the pod waiting on its reservation once the
// source has decided. It holds the table's lock while it does, so the
// reservation it decided on is the one it settles. It asks for a retry when
// the pod is not registered as waiting yet (Permit is still running).
func (m *Manager) settlePod(logger klog.Logger, ref PodRef) (retry bool, err error) {
	pod, err := m.pods.Pods(ref.Namespace).Get(ref.Name)
	gone := apierrors.IsNotFound(err) || (err == nil && pod.UID != ref.UID)
	if err != nil && !gone {
		return true, fmt.Errorf("reading pod from the scheduler's cache: %w", err)
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.reserved[ref.UID]
	if !ok || r.Settled {
		return false, nil
	}
	d := Decision{Verdict: Reject, Reason: "candidate deleted"}
	if !gone {
		d = Decide(r.Nonce, pod.Labels, pod.Annotations)
	}
	if d.Verdict == Wait {
		return false, nil
	}
	waiting := m.scheduler.GetWaitingPod(ref.UID)
	if waiting == nil {
		logger.V(4).Info("Candidate decided but not waiting yet", "nonce", r.Nonce, "verdict", d.Verdict)
		return true, nil
	}
	r.Settled = true
	r.Reason = d.Reason
	m.leaveShare(ref.UID, r, d.Verdict == Allow, m.opts.Now())
	if d.Verdict == Allow {
		waiting.Allow(m.opts.PluginName)
	} else {
		waiting.Reject(m.opts.PluginName, d.Reason)
	}
	logger.V(2).Info("Settled waiting candidate", "nonce", r.Nonce, "verdict", d.Verdict, "reason", d.Reason)
	return false, nil
}

// forget drops pod uid's reservation, and its place in its share.
func (m *Manager) forget(uid types.UID, now time.Time) (*Reservation, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.reserved[uid]
	if ok {
		delete(m.reserved, uid)
		m.leaveShare(uid, r, false, now)
	}
	return r, ok
}

// shareSweep is how often shares past their deadline are let go, and
// waits for room that are over ended.
const shareSweep = time.Second

func refOf(pod *v1.Pod) PodRef {
	return PodRef{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}
}

func podOf(obj any) *v1.Pod {
	switch t := obj.(type) {
	case *v1.Pod:
		return t
	case cache.DeletedFinalStateUnknown:
		pod, _ := t.Obj.(*v1.Pod)
		return pod
	default:
		return nil
	}
}
