// Package target owns the source agent's connection to one target cluster: a
// client, an informer over the candidates this source placed there, and the
// target's health. A Target is a value with its own lifecycle, so a broken or
// unreachable target is reported and never stalls the others.
package target

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// callTimeout bounds every call to a target, so a hung target costs one
// timeout, not a stuck worker. Watches are not bounded by it.
const callTimeout = 10 * time.Second

const bySourceIndex = "flotilla-source"

// A self target sends candidates into the agent's own cluster with the
// agent's own identity.
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;patch;delete

// Target is one target cluster as a source sees it.
type Target struct {
	// Name is how the source calls the target: a ClusterTarget's name, or
	// "<namespace>/<name>" of a Target. Candidates and elections carry it.
	Name string
	// Namespace is a Target's namespace, whose pods alone go there; empty
	// for a ClusterTarget.
	Namespace string
	// NodeName is the virtual node that stands for the target.
	NodeName string
	// LegacyNodeName is the node of the old namespaced form
	// (protocol.LegacyVirtualNodeName) that a namespaced Target's pods
	// bound before the upgrade still run on; "" for a ClusterTarget.
	LegacyNodeName string
	// Self is true when the target is the source cluster itself.
	Self bool
	// Labels are the labels of the target's virtual node.
	Labels map[string]string
	// PodCIDRs are the target's pod networks this cluster routes to: its
	// virtual node mirrors a delegate's pod IP only inside one of them.
	PodCIDRs []netip.Prefix

	// namespaces maps a source namespace to its namespace in the target
	// where the mapping names one.
	namespaces map[string]string

	client   kubernetes.Interface
	rest     *rest.Config
	cr       crclient.WithWatch
	selector string
	// summaryName is the ClusterSummary the target publishes for this
	// source; empty when the kubeconfig came without one.
	summaryName string
	informers   candidateInformers

	// token is the bearer token the client sends, replaced in place when
	// the kubeconfig's token is renewed (empty: the config authenticates).
	token atomic.Pointer[string]

	mu      sync.Mutex
	lastErr error

	// writes remembers creates, deletes and annotations not yet in the cache.
	writes *recent
	// own remembers the objects this process's creations and annotations
	// of candidates returned (OwnWrite).
	own *recent

	// summary is the last believable ClusterSummary the target published.
	summary atomic.Pointer[v1alpha1.ClusterSummaryStatus]

	// health is what the last look at the target found.
	health atomic.Pointer[probed]

	// outcomes learns how the target answers candidates.
	outcomes *outcomes

	// lost counts the delegates that vanished in the target.
	lost lostDelegates
	// cordoned: its virtual node is cordoned (spec.unschedulable).
	cordoned atomic.Bool
	// taints are its virtual node's placementpolicy.OperatorTaints.
	taints atomic.Pointer[[]corev1.Taint]

	// heardAt is when the target last answered a call with success or
	// its candidate watch delivered an event (Unix nanoseconds).
	heardAt atomic.Int64
}

// Config describes a target to connect to.
type Config struct {
	// Name, Namespace, Self and Labels become the Target's fields.
	Name      string
	Namespace string
	Self      bool
	Labels    map[string]string
	// NamespaceMapping maps source namespaces to target namespaces.
	NamespaceMapping map[string]string
	// PodCIDRs become the Target's field.
	PodCIDRs []netip.Prefix
	// REST is the connection to the target. Calls are bounded by their own
	// contexts; REST.Timeout, if set, would also cut the candidate watch.
	REST *rest.Config
	// SourceCluster is the source's name, which labels its candidates.
	SourceCluster string
	// SummaryName is the ClusterSummary of the source's invitation in the
	// target. When set, candidates are watched only in the namespaces it
	// names; when empty, in every namespace.
	SummaryName string
}

// New prepares a target; Start begins watching it.
func New(c Config) (*Target, error) {
	cfg := rest.CopyConfig(c.REST)
	// A timeout on the client would also end every watch after that long,
	// relisting the candidates each time; each call has its own deadline.
	cfg.Timeout = 0
	// No gzip (as for the source, agent.NewManager): the target's API
	// server would compress every event of the candidates' watch, one
	// flush at a time, with the CPU its admin lends; an event is a
	// protobuf pod of a few kilobytes.
	cfg.DisableCompression = true
	if cfg.QPS == 0 {
		cfg.QPS, cfg.Burst = 100, 200
	}
	t := &Target{}
	if cfg.BearerToken != "" {
		// The token is renewed while the target runs: the client reads it
		// on every request instead of keeping the one it started with.
		t.SetToken(cfg.BearerToken)
		cfg.BearerToken = ""
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &bearer{token: &t.token, next: rt} })
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("target %s: creating client: %w", c.Name, err)
	}
	// Flotilla's kinds (the ClusterSummary) have no protobuf.
	crCfg := rest.CopyConfig(cfg)
	crCfg.ContentType, crCfg.AcceptContentTypes = runtime.ContentTypeJSON, runtime.ContentTypeJSON
	if t.cr, err = crclient.NewWithWatch(crCfg, crclient.Options{Scheme: scheme}); err != nil {
		return nil, fmt.Errorf("target %s: creating client: %w", c.Name, err)
	}
	selector := CandidateSelector(c.SourceCluster, c.Name)
	t.Name, t.Namespace, t.Self, t.Labels, t.PodCIDRs = c.Name, c.Namespace, c.Self, c.Labels, slices.Clone(c.PodCIDRs)
	t.NodeName = protocol.VirtualNodeName(c.Namespace, nameOnly(c.Name))
	t.LegacyNodeName = protocol.LegacyVirtualNodeName(c.Namespace, nameOnly(c.Name))
	if c.Namespace != "" && !strings.HasPrefix(c.Name, c.Namespace+"/") {
		return nil, fmt.Errorf("target %s: a namespaced target's name is <namespace>/<name>, and %s is not of namespace %s", c.Name, c.Name, c.Namespace)
	}
	t.namespaces = c.NamespaceMapping
	t.client, t.selector, t.summaryName, t.writes, t.own = client, selector, c.SummaryName, newRecent(), newRecent()
	t.rest = cfg
	t.informers.t = t
	t.outcomes = newOutcomes()
	t.informers.addHandler(func(_, cand *corev1.Pod) { t.outcomes.seen(cand) })
	t.informers.addHandler(func(_, cand *corev1.Pod) { t.watchDelivered(cand) })
	return t, nil
}

// CandidateSelector selects the candidates that the target the source
// sourceCluster calls name made: every watch, list and sweep of a
// target's candidates goes through it, so that two targets of one source
// that reach the same cluster and namespace never see, elect or delete
// each other's.
func CandidateSelector(sourceCluster, name string) string {
	return labels.SelectorFromSet(labels.Set{
		protocol.CandidateLabel:     "true",
		protocol.SourceClusterLabel: sourceCluster,
		protocol.TargetLabel:        protocol.TargetLabelValue(name),
	}).String()
}

// SetToken replaces the bearer token the target's client sends.
func (t *Target) SetToken(token string) { t.token.Store(&token) }

// Token is the bearer token the client sends, "" when it has none.
func (t *Target) Token() string {
	if p := t.token.Load(); p != nil {
		return *p
	}
	return ""
}

// bearer sets the current token on each request.
type bearer struct {
	token *atomic.Pointer[string]
	next  http.RoundTripper
}

func (b *bearer) RoundTrip(req *http.Request) (*http.Response, error) {
	if p := b.token.Load(); p != nil && *p != "" && req.Header.Get("Authorization") == "" {
		req = req.Clone(req.Context())
		req.Header.Set("Authorization", "Bearer "+*p)
	}
	return b.next.RoundTrip(req)
}

// scheme knows what the source reads of a target beyond pods.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = v1alpha1.AddToScheme(s)
	return s
}()

// NodeNameOf is the virtual node of the target the source calls name
// ("<namespace>/<name>" of a Target, or a ClusterTarget's name).
func NodeNameOf(name string) string { return protocol.VirtualNodeNameOf(name) }

// ElectedTo is the target a source pod's election names, "" when it names
// none (or cannot be read).
func ElectedTo(pod *corev1.Pod) string {
	e, err := protocol.ParseElection(pod.Annotations[protocol.ElectionAnnotation])
	if err != nil {
		return ""
	}
	return e.Target
}

// Runs reports whether a source pod runs in t: bound to t's virtual node,
// or to its node of the old form and elected for t.
func (t *Target) Runs(pod *corev1.Pod) bool {
	return runsOn(pod, t.Name, t.NodeName, t.LegacyNodeName)
}

// runsOn reports whether a source pod runs in the target the source calls
// name, whose virtual node is node and old-form node legacy. The node
// alone does not say it: an old-form name was shared (Target b of
// namespace a and ClusterTarget a-b both had flotilla-a-b), and the pods
// bound there before the upgrade are each their elected target's. A pod
// on the target's own node with no election (bound by hand) is the
// node's, as before.
func runsOn(pod *corev1.Pod, name, node, legacy string) bool {
	switch elected := ElectedTo(pod); {
	case pod.Spec.NodeName == "":
		return false
	case pod.Spec.NodeName == node:
		return elected == "" || elected == name
	case pod.Spec.NodeName == legacy:
		return elected == name
	}
	return false
}

// nameOnly is the object name in a target's Name ("<namespace>/<name>" or
// "<name>").
func nameOnly(name string) string {
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		return name[i+1:]
	}
	return name
}

// NamespaceFor is the namespace in the target of a source namespace's pods.
func (t *Target) NamespaceFor(sourceNamespace string) string {
	if ns, ok := t.namespaces[sourceNamespace]; ok {
		return ns
	}
	return sourceNamespace
}

// Serves reports whether pods of a source namespace may go to the target: a
// namespaced Target takes only its own namespace's pods.
func (t *Target) Serves(sourceNamespace string) bool {
	return t.Namespace == "" || t.Namespace == sourceNamespace
}

// owns reports whether a candidate in the target's cache is one of this
// target's: for a namespaced Target, a candidate of a pod of its own
// namespace, in the namespace it sends that namespace's pods to. Other
// candidates of this source may be in the same cluster (a ClusterTarget
// of it, or the source itself for a self Target): a namespaced Target
// never sees, elects, mirrors or deletes them, so a tenant's Target cannot
// act on another namespace's pods.
func (t *Target) owns(candidate *corev1.Pod) bool {
	if t.Namespace == "" {
		return true
	}
	return candidate.Annotations[protocol.SourceNamespaceAnnotation] == t.Namespace &&
		candidate.Namespace == t.NamespaceFor(t.Namespace)
}

// Client is the target's clientset, for callers that probe it.
func (t *Target) Client() kubernetes.Interface { return t.client }

func indexBySource(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil
	}
	return []string{SourceKey(pod)}, nil
}

// SourceKey is "<namespace>/<name>" of the source pod a candidate stands for.
func SourceKey(candidate *corev1.Pod) string {
	return candidate.Annotations[protocol.SourceNamespaceAnnotation] + "/" + candidate.Annotations[protocol.SourceNameAnnotation]
}

// Start starts the candidate informers; it returns at once. With an
// invitation summary, they start when SetNamespaces names the namespaces.
func (t *Target) Start(ctx context.Context) {
	t.informers.start(ctx, t.summaryName != "")
}

// Shutdown stops the informers and waits for them.
func (t *Target) Shutdown() { t.informers.stopAll() }

// HasSynced reports whether every candidate informer has listed once.
func (t *Target) HasSynced() bool { return t.informers.hasSynced() }

// Summary returns the last believable ClusterSummary the target published
// for this source, nil before the first. It is shared: do not modify it.
func (t *Target) Summary() *v1alpha1.ClusterSummaryStatus { return t.summary.Load() }

func (t *Target) setSummary(s *v1alpha1.ClusterSummaryStatus) { t.summary.Store(s.DeepCopy()) }

// SummaryName is the ClusterSummary of the source's invitation, "" if none.
func (t *Target) SummaryName() string { return t.summaryName }

// SetNamespaces sets the namespaces the invitation covers: candidates go,
// and are watched, only there.
func (t *Target) SetNamespaces(namespaces []string) { t.informers.setNamespaces(namespaces, false) }

// Namespaces are the invited namespaces; nil when every one is open.
func (t *Target) Namespaces() []string { return t.informers.namespaces() }

// Covers reports whether the source may send candidates to namespace ns
// of the target.
func (t *Target) Covers(ns string) bool { return t.informers.covers(ns) }

// ChangeHandler is told of a change of a candidate: cand as the cache holds
// it now (its last state when deleted), and old, the object an update
// replaced in the cache, nil for an addition or a deletion.
type ChangeHandler func(old, cand *corev1.Pod)

// OnCandidate registers a handler for every change of one of the target's
// candidates.
func (t *Target) OnCandidate(f func(candidate *corev1.Pod)) {
	t.OnCandidateChange(func(_, candidate *corev1.Pod) { f(candidate) })
}

// OnCandidateChange registers a handler for every change of one of the
// target's candidates, with the object an update replaced.
func (t *Target) OnCandidateChange(f ChangeHandler) {
	t.informers.addHandler(func(old, candidate *corev1.Pod) {
		if t.owns(candidate) {
			f(old, candidate)
		}
	})
}

// Err is the target's last error, nil when it is healthy.
func (t *Target) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lastErr
}

func (t *Target) setErr(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lastErr = err
}

// observe records the outcome of a call as the target's health: a call the
// target answered, even with a refusal of that one request, clears the
// error; only a target that does not answer, or fails, is unhealthy.
func (t *Target) observe(err error) error {
	if err != nil && !RefusedRequest(err) {
		t.setErr(err)
	} else {
		t.setErr(nil)
	}
	if err == nil {
		t.heard()
	}
	return err
}

func (t *Target) heard() { t.heardAt.Store(time.Now().UnixNano()) }

// watchDelivered is told of every event of the candidate watch: the
// target is not silent, whatever a call that timed out said (a busy API
// server answers its watches while a list waits).
func (t *Target) watchDelivered(*corev1.Pod) {
	t.heard()
	t.mu.Lock()
	defer t.mu.Unlock()
	var status apierrors.APIStatus
	if t.lastErr != nil && !errors.As(t.lastErr, &status) {
		t.lastErr = nil
	}
}

// HeardWithin reports whether the target answered a call with success, or
// its candidate watch delivered an event, within d.
func (t *Target) HeardWithin(d time.Duration) bool {
	at := t.heardAt.Load()
	return at != 0 && time.Since(time.Unix(0, at)) < d
}

// ErrSilent wraps the last failure of a target that gave no answer at all:
// calls to it are not made until a probe finds it answering again.
var ErrSilent = errors.New("the target did not answer its last call; waiting for a probe to reach it")

// silent returns an error wrapping ErrSilent while the target's last call
// got no answer (a timeout, a refused or broken connection): a blackholed
// target would otherwise cost every placement a call timeout. The probe,
// every few seconds, calls it anyway and clears this when it answers.
func (t *Target) silent() error {
	err := t.Err()
	var status apierrors.APIStatus
	if err == nil || errors.As(err, &status) {
		return nil
	}
	return fmt.Errorf("%w: %v", ErrSilent, err)
}

// RefusedRequest reports whether err is a target's answer about one request
// (an object refused by admission, such as a missing PriorityClass or a
// policy; an invalid object; a name taken or gone) rather than about the
// target: one pod the target refuses says nothing of the others. A
// credential the target stopped accepting is about the target, and the
// probe also sees an identity that lost its rights.
func RefusedRequest(err error) bool {
	return apierrors.IsNotFound(err) || apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) ||
		apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) ||
		apierrors.IsRequestEntityTooLargeError(err)
}

// Candidate returns the candidate with the given name from the cache.
func (t *Target) Candidate(namespace, name string) (*corev1.Pod, bool) {
	idx := t.informers.indexer(namespace)
	if idx == nil {
		return nil, false
	}
	obj, ok, err := idx.GetByKey(namespace + "/" + name)
	if err != nil || !ok {
		return nil, false
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok || !t.owns(pod) {
		return nil, false
	}
	return pod, true
}

// OwnWrite reports whether cand, as the candidate watch brings it, is the
// object one of this process's writes (a creation, an annotation) returned,
// and the cache still holds it as it was: nothing written since by anyone
// else (the target's scheduler, its kubelet, another agent) shows. A round
// of its source pod would find there only what the round that wrote it
// knew. Each such object is told once; an event that reached the cache
// before its write returned is not told (its round runs as any other's).
func (t *Target) OwnWrite(cand *corev1.Pod) bool {
	key := ownKey(cand)
	if !t.own.has(key) {
		return false
	}
	t.own.forget(key)
	now, ok := t.Candidate(cand.Namespace, cand.Name)
	return ok && now.UID == cand.UID && now.ResourceVersion == cand.ResourceVersion
}

// rememberOwn records the object a write returned (OwnWrite); one without
// a UID or resourceVersion names nothing.
func (t *Target) rememberOwn(p *corev1.Pod) {
	if p != nil && p.UID != "" && p.ResourceVersion != "" {
		t.own.add(ownKey(p))
	}
}

// ownKey names an object a write returned, in own.
func ownKey(p *corev1.Pod) string { return string(p.UID) + "/" + p.ResourceVersion }

// Holds reports whether the target holds a candidate of the source pod
// with the given UID that is not being deleted, or this process created
// one that the cache does not show yet.
func (t *Target) Holds(namespace, name string, sourceUID types.UID) bool {
	if c, ok := t.Candidate(namespace, name); ok && types.UID(c.Labels[protocol.SourceUIDLabel]) == sourceUID {
		return c.DeletionTimestamp == nil
	}
	return t.writes.has(createKey(namespace, name, string(sourceUID)))
}

// CandidatesOf lists the cached candidates of a source pod (any UID).
func (t *Target) CandidatesOf(namespace, name string) []*corev1.Pod {
	if !t.Serves(namespace) {
		return nil
	}
	idx := t.informers.indexer(t.NamespaceFor(namespace))
	if idx == nil {
		return nil
	}
	objs, err := idx.ByIndex(bySourceIndex, namespace+"/"+name)
	if err != nil {
		return nil
	}
	out := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if pod, ok := o.(*corev1.Pod); ok && t.owns(pod) {
			out = append(out, pod)
		}
	}
	return out
}

// Candidates lists every cached candidate of the target.
func (t *Target) Candidates() []*corev1.Pod {
	var out []*corev1.Pod
	for _, idx := range t.informers.indexers() {
		for _, o := range idx.List() {
			if pod, ok := o.(*corev1.Pod); ok && t.owns(pod) {
				out = append(out, pod)
			}
		}
	}
	return out
}

// Create creates a candidate; an existing one is not an error. created
// tells whether this call made it.
func (t *Target) Create(ctx context.Context, candidate *corev1.Pod) (created bool, err error) {
	key := createKey(candidate.Namespace, candidate.Name, candidate.Labels[protocol.SourceUIDLabel])
	if t.writes.has(key) {
		return false, nil
	}
	if err := t.silent(); err != nil {
		return false, fmt.Errorf("target %s: not creating candidate %s/%s: %w", t.Name, candidate.Namespace, candidate.Name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	// Waiting for its answer before the call: the target may answer, and
	// this agent's cache show it, before the call returns (a candidate
	// reserved at once, or bound on a pre-allowance), and an answer seen
	// for a candidate not waiting is ignored. Recorded after the call,
	// such a candidate waited unanswered until forgetWaitingAfter, its age
	// raising its target's Answer by the second, so that the target was
	// no longer sure for any pod of a burst.
	outcome := candidateKey(candidate.Namespace, candidate.Name)
	sent := t.outcomes.sent(outcome)
	made, err := t.client.CoreV1().Pods(candidate.Namespace).Create(ctx, candidate, metav1.CreateOptions{})
	if err != nil && sent {
		t.outcomes.unsent(outcome)
	}
	if apierrors.IsAlreadyExists(err) {
		t.writes.add(key)
		return false, t.observe(nil)
	}
	if err != nil {
		return false, t.observe(fmt.Errorf("target %s: creating candidate %s/%s: %w", t.Name, candidate.Namespace, candidate.Name, err))
	}
	t.writes.add(key)
	t.rememberOwn(made)
	candidatesCreated.WithLabelValues(t.Name).Inc()
	return true, t.observe(nil)
}

// createKey names the creation of a source pod's candidate in writes.
func createKey(namespace, name, sourceUID string) string {
	return "create/" + namespace + "/" + name + "/" + sourceUID
}

// Delete deletes a candidate if it still has the given UID (empty: any).
func (t *Target) Delete(ctx context.Context, namespace, name string, uid types.UID) error {
	key := "delete/" + namespace + "/" + name + "/" + string(uid)
	if t.writes.has(key) {
		return nil
	}
	if err := t.silent(); err != nil {
		return fmt.Errorf("target %s: not deleting candidate %s/%s: %w", t.Name, namespace, name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	opts := metav1.DeleteOptions{}
	if uid != "" {
		opts.Preconditions = &metav1.Preconditions{UID: &uid}
	}
	// Counted before the call: the deletion's watch event may reach the
	// cache before the call returns, and a candidate deleted by someone
	// else is no miss.
	t.outcomes.deleted(candidateKey(namespace, name))
	err := t.client.CoreV1().Pods(namespace).Delete(ctx, name, opts)
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		t.writes.add(key)
		return t.observe(nil)
	}
	if err != nil {
		return t.observe(fmt.Errorf("target %s: deleting candidate %s/%s: %w", t.Name, namespace, name, err))
	}
	t.writes.add(key)
	candidatesDeleted.WithLabelValues(t.Name).Inc()
	klog.V(4).InfoS("Deleted candidate", "target", t.Name, "pod", klog.KRef(namespace, name))
	return t.observe(nil)
}

// Live reads a candidate from the target's API server rather than from
// the cache, for a decision a lagging cache must not make: nil, with no
// error, when there is none.
func (t *Target) Live(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	if err := t.silent(); err != nil {
		return nil, fmt.Errorf("target %s: not reading candidate %s/%s: %w", t.Name, namespace, name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	pod, err := t.client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, t.observe(nil)
	}
	if err != nil {
		return nil, t.observe(fmt.Errorf("target %s: reading candidate %s/%s: %w", t.Name, namespace, name, err))
	}
	return pod, t.observe(nil)
}

// Revoke deletes a candidate that has not been bound, as the given copy
// shows it: the deletion carries its UID and resourceVersion as
// preconditions, so it fails if the candidate changed meanwhile (bound, or a
// new report of its scheduler). A pod that is not bound is removed at once,
// and a pod that is gone or being deleted can no longer be bound: once
// Revoke reports it revoked, that candidate never runs. revoked is false,
// with no error, when the candidate changed: look again.
func (t *Target) Revoke(ctx context.Context, candidate *corev1.Pod) (revoked bool, err error) {
	if candidate.Spec.NodeName != "" {
		return false, nil
	}
	if err := t.silent(); err != nil {
		return false, fmt.Errorf("target %s: not revoking candidate %s/%s: %w", t.Name, candidate.Namespace, candidate.Name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	err = t.client.CoreV1().Pods(candidate.Namespace).Delete(ctx, candidate.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &candidate.UID, ResourceVersion: &candidate.ResourceVersion},
	})
	if err == nil || apierrors.IsNotFound(err) {
		// A candidate sent again under the name (pinned elsewhere, say)
		// is a new creation, not the one remembered.
		t.writes.forget(createKey(candidate.Namespace, candidate.Name, candidate.Labels[protocol.SourceUIDLabel]))
	}
	switch {
	case err == nil:
		candidatesDeleted.WithLabelValues(t.Name).Inc()
		candidatesRevoked.WithLabelValues(t.Name).Inc()
		return true, t.observe(nil)
	case apierrors.IsNotFound(err):
		return true, t.observe(nil)
	case apierrors.IsConflict(err):
		// Changed since that copy, or another pod under that name.
		return false, t.observe(nil)
	default:
		return false, t.observe(fmt.Errorf("target %s: revoking candidate %s/%s: %w", t.Name, candidate.Namespace, candidate.Name, err))
	}
}

// Annotate merges annotations into a candidate (a nil value removes a key).
func (t *Target) Annotate(ctx context.Context, namespace, name string, annotations map[string]*string) error {
	return t.annotate(ctx, namespace, name, annotations, true)
}

// AnnotateAgain is Annotate without its memory of recent writes, for a
// value that may be set, removed and set again under one name (a denial):
// every call writes.
func (t *Target) AnnotateAgain(ctx context.Context, namespace, name string, annotations map[string]*string) error {
	return t.annotate(ctx, namespace, name, annotations, false)
}

func (t *Target) annotate(ctx context.Context, namespace, name string, annotations map[string]*string, remember bool) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		return err
	}
	key := "annotate/" + namespace + "/" + name + "/" + string(patch)
	if remember && t.writes.has(key) {
		return nil
	}
	if err := t.silent(); err != nil {
		return fmt.Errorf("target %s: not annotating candidate %s/%s: %w", t.Name, namespace, name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	patched, err := t.client.CoreV1().Pods(namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return t.observe(fmt.Errorf("target %s: annotating candidate %s/%s: %w", t.Name, namespace, name, err))
	}
	t.rememberOwn(patched)
	if remember {
		t.writes.add(key)
	}
	if v := annotations[protocol.AllowedAnnotation]; v != nil {
		candidatesAllowed.WithLabelValues(t.Name).Inc()
	}
	if v, ok := annotations[protocol.DeniedAnnotation]; ok {
		if v != nil {
			candidatesDenied.WithLabelValues(t.Name).Inc()
		} else {
			denialsLifted.WithLabelValues(t.Name).Inc()
		}
	}
	return t.observe(nil)
}

// RESTConfig is a copy of the configuration the target's client uses, with
// the round-tripper that sends the current (renewed) bearer token, for
// callers that need more than a clientset: streams of exec, attach and
// port-forward.
func (t *Target) RESTConfig() *rest.Config { return rest.CopyConfig(t.rest) }

// CandidateCount is how many of the target's candidates its cache holds.
func (t *Target) CandidateCount() int {
	if t.Namespace != "" {
		return len(t.Candidates())
	}
	n := 0
	for _, idx := range t.informers.indexers() {
		n += len(idx.ListKeys())
	}
	return n
}
