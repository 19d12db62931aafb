package invitation

// Streams: the invited identity may read the logs of, and open exec,
// attach and port-forward streams to, its own delegates and nothing else.
// RBAC is the only check a log read (a GET) meets, and an admission policy
// on a stream (CONNECT) sees the pod's name but never its labels; so the
// grant names the pods. Per invitation and invited namespace, a Role
// (StreamsRole) lists the source's delegates there by name: the pods the
// API server admitted with the labels of the source's candidates
// (candidate=true, source-cluster=<clusterName>), scheduled by Flotilla's
// profile and bound to a node. The target's agent keeps it current from a
// trimmed informer of bound candidates.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/slim"
)

// The streams Roles are kept from a watch of bound candidates, of every
// namespace (the invited ones change without a restart).
// +kubebuilder:rbac:groups="",resources=pods,verbs=list;watch

// streamsCoalesce and streamsCoalesceMax bound how long a change of a
// namespace's delegates waits for more before its streams Role is written
// (streamsCoalescer.delay). A change after a quiet spell is written at
// once, so that a lone delegate is granted as soon as it binds. While
// changes keep coming, each write they schedule waits twice as long as the
// one before, from streamsCoalesce up to streamsCoalesceMax: every write
// carries the whole list of names and makes the API server's authorizer
// recompute, so a burst of delegates starting or stopping together costs
// about a write a second, not one every 100 ms, and no delegate waits more
// than a second for its grant.
const (
	streamsCoalesce    = 100 * time.Millisecond
	streamsCoalesceMax = time.Second
)

// streamsWorkers write Roles concurrently; one invitation's are written one
// at a time.
const streamsWorkers = 4

var streamRoleWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "flotilla_invitation_stream_role_writes_total",
	Help: "Writes of the Roles that grant an invited source the logs and streams of its delegates, by operation (create, update) and result (success, error).",
}, []string{"operation", "result"})

func init() {
	metrics.Registry.MustRegister(streamRoleWrites)
}

// StreamsName is the name of the invitation's streams Role and RoleBinding
// in each invited namespace.
func (inv Invitation) StreamsName() string { return inv.objectName() + "-streams" }

// StreamsRole grants the invited identity the logs and streams of the
// given pods' names in one namespace (rules from StreamRules).
func (inv Invitation) StreamsRole(namespace string, rules []rbacv1.PolicyRule) *rbacv1.Role {
	r := &rbacv1.Role{ObjectMeta: inv.meta(namespace), Rules: rules}
	r.Name = inv.StreamsName()
	return r
}

// StreamsRoleBinding binds StreamsRole. It carries the invitation's label
// and the Role's name, so that revoking the invitation, or its leaving the
// namespace, deletes both as it does the main Role and RoleBinding.
func (inv Invitation) StreamsRoleBinding(namespace string) *rbacv1.RoleBinding {
	b := &rbacv1.RoleBinding{ObjectMeta: inv.meta(namespace)}
	b.Name = inv.StreamsName()
	b.RoleRef = rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: b.Name}
	b.Subjects = []rbacv1.Subject{inv.subject()}
	return b
}

// StreamPod is what the streams grant reads of a pod, as the API server
// admitted it: its key, the labels that make it a source's candidate, its
// scheduler and its node. It is all the agent caches of a pod for this.
type StreamPod struct {
	Namespace, Name string
	// ResourceVersion tells the informer an update from a resync.
	ResourceVersion string
	// Candidate is the label protocol.CandidateLabel=true; SourceCluster
	// the value of protocol.SourceClusterLabel.
	Candidate     bool
	SourceCluster string
	SchedulerName string
	NodeName      string
}

// GetObjectMeta gives the informer the key and version it stores the pod
// under.
func (p *StreamPod) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, ResourceVersion: p.ResourceVersion}
}

// StreamPodOf is the part of pod the streams grant reads.
func StreamPodOf(pod *corev1.Pod) StreamPod {
	return StreamPod{
		Namespace:       pod.Namespace,
		Name:            pod.Name,
		ResourceVersion: pod.ResourceVersion,
		Candidate:       pod.Labels[protocol.CandidateLabel] == "true",
		SourceCluster:   pod.Labels[protocol.SourceClusterLabel],
		SchedulerName:   pod.Spec.SchedulerName,
		NodeName:        pod.Spec.NodeName,
	}
}

// isDelegateOf reports whether p is a delegate of source cluster: its
// candidate, as the invitation's policy lets it create one (label, source
// label, Flotilla's profile), bound to a node. Only a running pod has logs
// or streams, and a pod that waits is no delegate yet: the source may not
// reach it before its election bound it.
func (p StreamPod) isDelegateOf(cluster string) bool {
	return cluster != "" && p.Candidate && p.SourceCluster == cluster &&
		p.SchedulerName == protocol.SchedulerName && p.NodeName != ""
}

// StreamRules are the rules of an invitation's streams Role in one
// namespace: pods/log get and pods/exec, pods/attach, pods/portforward
// get and create (a stream over websockets is a GET, which the API server
// authorizes as get and, since 1.35, as create too; over SPDY a POST,
// create) on the names of the pods given that are delegates of the source
// cluster, and none at all when there is no such pod (a rule with no
// resourceNames would grant every name).
func StreamRules(cluster string, pods []StreamPod) []rbacv1.PolicyRule {
	var names []string
	for _, p := range pods {
		if p.isDelegateOf(cluster) {
			names = append(names, p.Name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	slices.Sort(names)
	names = slices.Compact(names)
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods/log"}, Verbs: []string{"get"}, ResourceNames: names},
		{APIGroups: []string{""}, Resources: slices.Clone(streamSubresources), Verbs: []string{"get", "create"}, ResourceNames: slices.Clone(names)},
	}
}

// trimStreamPod is the informer's transform: a pod becomes its StreamPod.
// It may be given one it already trimmed.
func trimStreamPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	p := StreamPodOf(pod)
	p.Namespace = slim.Intern(p.Namespace)
	p.SourceCluster = slim.Intern(p.SourceCluster)
	p.SchedulerName = slim.Intern(p.SchedulerName)
	p.NodeName = slim.Intern(p.NodeName)
	return &p, nil
}

// byNamespaceAndSource indexes the cached pods by "<namespace>/<source
// cluster>", what one streams Role is made of.
const byNamespaceAndSource = "namespaceAndSource"

func namespaceAndSource(namespace, cluster string) string { return namespace + "/" + cluster }

// streamsKey is one invitation's streams Role in one namespace.
type streamsKey struct{ id, namespace string }

// streamGrants keeps the streams Role of every invitation in every
// namespace it covers. The invitation controller says which with set and
// forget; the Roles follow the delegates from then on. It runs on the
// leader only, and watches nothing until an invitation exists.
type streamGrants struct {
	client client.Client // writes Roles
	reader client.Reader // reads them, uncached
	pods   cache.SharedIndexInformer
	queue  workqueue.TypedRateLimitingInterface[streamsKey]
	// work is closed at the first set: there is something to watch.
	work     chan struct{}
	workOnce sync.Once

	mu     sync.Mutex
	grants map[string]*streamGrant // by invitation ID
	// queued says when a Role is written for a change of delegates.
	queued streamsCoalescer
}

// streamGrant is one invitation's.
type streamGrant struct {
	// Guarded by streamGrants.mu.
	inv        Invitation
	namespaces []string
	forgotten  bool

	// write is held while this invitation's Roles are written, so that
	// set and forget return only once no write of the past is in flight.
	write sync.Mutex
	// known is, per namespace, the Role as last read or written (its
	// version and rules), so that a change of delegates costs one write
	// and no read. Guarded by write; set clears it, so that every
	// resync of the invitation reads the Roles again and repairs them.
	known map[string]*rbacv1.Role
}

var (
	_ manager.Runnable               = &streamGrants{}
	_ manager.LeaderElectionRunnable = &streamGrants{}
)

func newStreamGrants(kube kubernetes.Interface, c client.Client, reader client.Reader) *streamGrants {
	s := &streamGrants{
		client: c,
		reader: reader,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[streamsKey](100*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[streamsKey]{Name: "flotilla_invitation_streams"}),
		work:   make(chan struct{}),
		grants: map[string]*streamGrant{},
		queued: streamsCoalescer{},
	}
	s.pods = newBoundCandidateInformer(kube)
	_, _ = s.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { s.podChanged(obj) },
		UpdateFunc: func(oldObj, newObj any) {
			// A cached pod is bound, its name and scheduler fixed: only
			// its labels can change what it grants.
			o, okOld := oldObj.(*StreamPod)
			n, okNew := newObj.(*StreamPod)
			if okOld && okNew && o.Candidate == n.Candidate && o.SourceCluster == n.SourceCluster {
				return
			}
			s.podChanged(oldObj)
			s.podChanged(newObj)
		},
		DeleteFunc: func(obj any) { s.podChanged(obj) },
	})
	return s
}

// newBoundCandidateInformer watches the pods that may be delegates: those
// labelled as candidates of some source, scheduled by Flotilla's profile
// and bound. A candidate enters it when it binds and leaves it when it is
// deleted; waiting candidates and every other pod are never sent.
func newBoundCandidateInformer(kube kubernetes.Interface) cache.SharedIndexInformer {
	candidate, _ := labels.NewRequirement(protocol.CandidateLabel, selection.Equals, []string{"true"})
	source, _ := labels.NewRequirement(protocol.SourceClusterLabel, selection.Exists, nil)
	labelSel := labels.NewSelector().Add(*candidate, *source).String()
	fieldSel := fields.AndSelectors(
		fields.OneTermNotEqualSelector("spec.nodeName", ""),
		fields.OneTermEqualSelector("spec.schedulerName", protocol.SchedulerName),
	).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector, o.FieldSelector = labelSel, fieldSel
			return kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector, o.FieldSelector = labelSel, fieldSel
			return kube.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, o)
		},
	}
	inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{
		byNamespaceAndSource: func(obj any) ([]string, error) {
			p, ok := obj.(*StreamPod)
			if !ok {
				return nil, nil
			}
			return []string{namespaceAndSource(p.Namespace, p.SourceCluster)}, nil
		},
	})
	// Not started: setting the transform cannot fail.
	_ = inf.SetTransform(trimStreamPod)
	return inf
}

// NeedLeaderElection: the leader applies invitations.
func (s *streamGrants) NeedLeaderElection() bool { return true }

// podChanged queues the Roles of the invitations of the pod's source that
// cover its namespace: at once, or with the others of a burst.
func (s *streamGrants) podChanged(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	p, ok := obj.(*StreamPod)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for id, g := range s.grants {
		if g.inv.Spec.ClusterName != p.SourceCluster || !slices.Contains(g.namespaces, p.Namespace) {
			continue
		}
		key := streamsKey{id: id, namespace: p.Namespace}
		if wait := s.queued.delay(key, now); wait > 0 {
			s.queue.AddAfter(key, wait)
		} else {
			s.queue.Add(key)
		}
	}
}

// set keeps the streams Roles of inv in namespaces (the ones it covers
// now) from now on, and reads every one of them again soon to repair it.
// It returns once no write made for an earlier set is in flight.
func (s *streamGrants) set(inv Invitation, namespaces []string) {
	s.workOnce.Do(func() { close(s.work) })
	id := inv.ID()
	s.mu.Lock()
	g := s.grants[id]
	if g == nil {
		g = &streamGrant{known: map[string]*rbacv1.Role{}}
		s.grants[id] = g
	}
	g.inv, g.namespaces = inv, slices.Clone(namespaces)
	s.queued.prune(id, namespaces, time.Now())
	s.mu.Unlock()

	g.write.Lock()
	clear(g.known)
	g.write.Unlock()
	// Roles of namespaces no longer covered go with their RoleBindings
	// (Controller.apply).
	for _, ns := range namespaces {
		s.queue.Add(streamsKey{id: id, namespace: ns})
	}
}

// forget stops keeping the invitation's streams Roles. It returns once no
// write of them is in flight and none will start, so that what the caller
// deletes next stays deleted.
func (s *streamGrants) forget(id string) {
	s.mu.Lock()
	g := s.grants[id]
	delete(s.grants, id)
	if g != nil {
		g.forgotten = true
	}
	s.queued.prune(id, nil, time.Time{}) // covers no namespace: all go
	s.mu.Unlock()
	if g != nil {
		g.write.Lock()
		clear(g.known)
		g.write.Unlock()
	}
}

// streamsCoalescer is, per invitation and namespace whose delegates
// changed lately, when its streams Role is written next. streamGrants.mu
// guards it.
type streamsCoalescer map[streamsKey]streamsWindow

// streamsWindow is one key's: when the write last queued for it was to
// start, and how long the next coalesced write waits.
type streamsWindow struct {
	due  time.Time
	wait time.Duration
}

// quiet reports whether no change came for streamsCoalesceMax since the
// key's last write was due: the key is then as one never seen. (Quiet
// after its current wait only, a namespace whose delegates change a few
// times a second, each change a little more than 100 ms after the last,
// had every change written alone: 0.74 writes a placed pod across ten
// targets in a steady stream of 5,000 pods.)
func (w streamsWindow) quiet(now time.Time) bool { return now.Sub(w.due) >= streamsCoalesceMax }

// delay says how long from now a change of key's delegates waits before
// its Role is written, and notes the write. The rule:
//   - a key never seen or quiet (no change for streamsCoalesceMax since
//     its last write) is written at once (0), and its next coalesced
//     write will wait streamsCoalesce;
//   - a key whose write is still to come (due after now) waits for that
//     write, which will read this change too;
//   - otherwise (written less than a wait ago) the change waits the key's
//     wait, and the wait after it doubles, up to streamsCoalesceMax.
func (c streamsCoalescer) delay(key streamsKey, now time.Time) time.Duration {
	w, ok := c[key]
	switch {
	case !ok || w.quiet(now):
		c[key] = streamsWindow{due: now, wait: streamsCoalesce}
		return 0
	case now.Before(w.due):
		return w.due.Sub(now)
	default:
		c[key] = streamsWindow{due: now.Add(w.wait), wait: min(2*w.wait, streamsCoalesceMax)}
		return w.wait
	}
}

// prune drops the invitation id's keys of namespaces not in covered, and
// those quiet at now, which delay treats as keys never seen. So a key is
// one small struct, and a namespace that stopped changing loses its key at
// the invitation's next set (a resync at most).
func (c streamsCoalescer) prune(id string, covered []string, now time.Time) {
	for key, w := range c {
		if key.id == id && (w.quiet(now) || !slices.Contains(covered, key.namespace)) {
			delete(c, key)
		}
	}
}

// Start watches bound candidates, once there is an invitation, and keeps
// the Roles until ctx ends.
func (s *streamGrants) Start(ctx context.Context) error {
	log := klog.FromContext(ctx).WithName("streams")
	ctx = klog.NewContext(ctx, log)
	defer s.queue.ShutDown()
	select {
	case <-ctx.Done():
		return nil
	case <-s.work:
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { s.pods.RunWithContext(ctx) })
	// An empty cache would take every grant away.
	if !cache.WaitForNamedCacheSyncWithContext(ctx, s.pods.HasSynced) {
		return nil
	}
	log.Info("Granting invited sources the logs and streams of their delegates")
	for range streamsWorkers {
		wg.Go(func() {
			for s.next(ctx) {
			}
		})
	}
	<-ctx.Done()
	s.queue.ShutDown()
	return nil
}

func (s *streamGrants) next(ctx context.Context) bool {
	key, quit := s.queue.Get()
	if quit {
		return false
	}
	defer s.queue.Done(key)
	if err := s.sync(ctx, key); err != nil {
		klog.FromContext(ctx).Error(err, "Granting the streams of delegates", "invitation", key.id, "namespace", key.namespace)
		s.queue.AddRateLimited(key)
		return true
	}
	s.queue.Forget(key)
	return true
}

// sync makes the invitation's streams Role in the namespace name its
// delegates there now.
func (s *streamGrants) sync(ctx context.Context, key streamsKey) error {
	s.mu.Lock()
	g := s.grants[key.id]
	s.mu.Unlock()
	if g == nil {
		return nil
	}
	g.write.Lock()
	defer g.write.Unlock()
	s.mu.Lock()
	inv, covered, forgotten := g.inv, slices.Contains(g.namespaces, key.namespace), g.forgotten
	s.mu.Unlock()
	if forgotten || !covered {
		return nil
	}
	objs, err := s.pods.GetIndexer().ByIndex(byNamespaceAndSource, namespaceAndSource(key.namespace, inv.Spec.ClusterName))
	if err != nil {
		return fmt.Errorf("listing the delegates of %s in %s from the cache: %w", inv.Spec.ClusterName, key.namespace, err)
	}
	pods := make([]StreamPod, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*StreamPod); ok {
			pods = append(pods, *p)
		}
	}
	want := inv.StreamsRole(key.namespace, StreamRules(inv.Spec.ClusterName, pods))
	if known := g.known[key.namespace]; known != nil {
		if sameRole(known, want) {
			return nil
		}
		want.ResourceVersion = known.ResourceVersion
		err := s.client.Update(ctx, want)
		countRoleWrite("update", err)
		if err == nil {
			g.known[key.namespace] = want
			return nil
		}
		delete(g.known, key.namespace)
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return fmt.Errorf("updating Role %s/%s: %w", want.Namespace, want.Name, err)
		}
		want.ResourceVersion = "" // read it again below
	}
	existing := &rbacv1.Role{}
	err = s.reader.Get(ctx, client.ObjectKeyFromObject(want), existing)
	switch {
	case apierrors.IsNotFound(err):
		err := s.client.Create(ctx, want)
		countRoleWrite("create", err)
		if err != nil {
			return fmt.Errorf("creating Role %s/%s: %w", want.Namespace, want.Name, err)
		}
	case err != nil:
		return fmt.Errorf("reading Role %s/%s: %w", want.Namespace, want.Name, err)
	case sameRole(existing, want):
		want = existing
	default:
		want.ResourceVersion = existing.ResourceVersion
		err := s.client.Update(ctx, want)
		countRoleWrite("update", err)
		if err != nil {
			return fmt.Errorf("updating Role %s/%s: %w", want.Namespace, want.Name, err)
		}
	}
	g.known[key.namespace] = want
	return nil
}

// sameRole reports whether existing grants what want does and carries its
// labels (no rules and empty rules alike).
func sameRole(existing, want *rbacv1.Role) bool {
	return equality.Semantic.DeepEqual(existing.Labels, want.Labels) && equality.Semantic.DeepEqual(existing.Rules, want.Rules)
}

func countRoleWrite(op string, err error) {
	result := "success"
	if err != nil {
		result = "error"
	}
	streamRoleWrites.WithLabelValues(op, result).Inc()
}
