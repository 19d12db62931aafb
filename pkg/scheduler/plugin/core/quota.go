package core

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// Amounts are cpu (millicores), memory (bytes) and pods.
type Amounts struct {
	CPU, Memory, Pods int64
}

func (a Amounts) plus(b Amounts) Amounts {
	return Amounts{CPU: addSat(a.CPU, b.CPU), Memory: addSat(a.Memory, b.Memory), Pods: addSat(a.Pods, b.Pods)}
}

func (a Amounts) less(b Amounts) Amounts {
	return Amounts{CPU: max(a.CPU-b.CPU, 0), Memory: max(a.Memory-b.Memory, 0), Pods: max(a.Pods-b.Pods, 0)}
}

func (a Amounts) String() string {
	return fmt.Sprintf("cpu %s, memory %s, pods %d",
		resource.NewMilliQuantity(a.CPU, resource.DecimalSI), resource.NewQuantity(a.Memory, resource.BinarySI), a.Pods)
}

func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// requestOptions compute a pod's requests as kube-scheduler 1.35 does (the
// same as the ClusterSummary's): the larger of what is asked and what is
// allocated after an in-place resize, pod-level requests over the
// containers', overhead included.
var requestOptions = resourcehelper.PodResourcesOptions{UseStatusResources: true}

// RequestsOf is what a pod counts against a quota; a pod always counts one pod.
func RequestsOf(pod *v1.Pod) Amounts {
	r := resourcehelper.PodRequests(pod, requestOptions)
	return Amounts{CPU: max(r.Cpu().MilliValue(), 0), Memory: max(r.Memory().Value(), 0), Pods: 1}
}

// Quota bounds what one invitation's candidates hold at once; a nil field is
// no bound.
type Quota struct {
	CPU, Memory, Pods *int64
}

// IsZero reports whether the quota bounds nothing.
func (q Quota) IsZero() bool { return q.CPU == nil && q.Memory == nil && q.Pods == nil }

// Invitation is a Source or ClusterSource as far as quotas go: whose
// candidates, where, and how much they may hold.
type Invitation struct {
	// Name is how users know it: "Source <namespace>/<name>" or
	// "ClusterSource <name>".
	Name string
	// Cluster is its spec.clusterName.
	Cluster string
	// Covers reports whether it covers a namespace.
	Covers func(namespace string) bool
	Quota  Quota
}

// Over lists, in words, the resources for which used exceeds the quota.
func (q Quota) Over(used Amounts) []string {
	var over []string
	check := func(name string, limit *int64, used int64, format func(int64) string) {
		if limit != nil && used > *limit {
			over = append(over, fmt.Sprintf("%s %s of %s", name, format(used), format(*limit)))
		}
	}
	milli := func(v int64) string { return resource.NewMilliQuantity(v, resource.DecimalSI).String() }
	bytes := func(v int64) string { return resource.NewQuantity(v, resource.BinarySI).String() }
	count := func(v int64) string { return fmt.Sprint(v) }
	check("cpu", q.CPU, used.CPU, milli)
	check("memory", q.Memory, used.Memory, bytes)
	check("pods", q.Pods, used.Pods, count)
	return over
}

// hold is one candidate as the ledger knows it. It counts while it is
// reserved by this scheduler, bound and not ended, or reported Reserved by
// a scheduler that may still be waiting on it (in flight), so a restart
// never forgets what an earlier instance held.
type hold struct {
	cluster, namespace string
	requests           Amounts
	// reserved: between Reserve and Unreserve (or PostBind) in this
	// process, for the reservation named nonce.
	reserved bool
	nonce    string
	// bound: the candidate has a node and has not ended.
	bound bool
	// inFlight: the pod reports a Reserved state (with inFlightNonce) and
	// has no node: a reservation this process may not know about.
	inFlight      bool
	inFlightNonce string
	// over names a reservation known to be over: this process unreserved
	// it, or is scheduling the candidate again.
	over    string
	overSet bool
	// counted is what the hold adds to the usage now.
	counted Amounts
}

func (h *hold) counts() bool {
	return h.reserved || h.bound || (h.inFlight && !(h.overSet && h.over == h.inFlightNonce))
}

// Ledger keeps, per source cluster and namespace, what candidates hold, and
// the candidates refused for a quota, so they can be retried when usage
// drops or a quota is raised. It is safe for concurrent use; nothing in it
// blocks.
type Ledger struct {
	mu    sync.Mutex
	holds map[types.UID]*hold
	// usage[cluster][namespace] is the sum of the holds counted there.
	usage map[string]map[string]Amounts
	// waiting are the candidates refused for a quota, by UID.
	waiting map[types.UID]*v1.Pod
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger {
	return &Ledger{holds: map[types.UID]*hold{}, usage: map[string]map[string]Amounts{}, waiting: map[types.UID]*v1.Pod{}}
}

// sourceCluster is the candidate's source cluster; empty for a pod that is
// not a candidate, which no quota concerns.
func sourceCluster(pod *v1.Pod) string {
	if !IsCandidate(pod.Labels) {
		return ""
	}
	return pod.Labels[protocol.SourceClusterLabel]
}

// update changes the hold of pod with change and brings the usage up to
// date. It reports whether the usage of the pod's cluster dropped.
func (l *Ledger) update(pod *v1.Pod, change func(h *hold)) (dropped bool) {
	cluster := sourceCluster(pod)
	if cluster == "" {
		return false
	}
	h, ok := l.holds[pod.UID]
	if !ok {
		h = &hold{cluster: cluster, namespace: pod.Namespace}
		l.holds[pod.UID] = h
	}
	// A candidate's labels are the source's writes: should its cluster
	// label change, the hold moves with it.
	l.uncount(h)
	h.cluster, h.namespace, h.requests = cluster, pod.Namespace, RequestsOf(pod)
	before := h.counted
	change(h)
	h.counted = Amounts{}
	if h.counts() {
		h.counted = h.requests
	}
	l.count(h)
	return h.counted.CPU < before.CPU || h.counted.Memory < before.Memory || h.counted.Pods < before.Pods
}

func (l *Ledger) uncount(h *hold) {
	byNS := l.usage[h.cluster]
	if byNS == nil {
		return
	}
	if left := byNS[h.namespace].less(h.counted); left != (Amounts{}) {
		byNS[h.namespace] = left
	} else {
		delete(byNS, h.namespace)
	}
	if len(byNS) == 0 {
		delete(l.usage, h.cluster)
	}
}

func (l *Ledger) count(h *hold) {
	if h.counted == (Amounts{}) {
		return
	}
	if l.usage[h.cluster] == nil {
		l.usage[h.cluster] = map[string]Amounts{}
	}
	l.usage[h.cluster][h.namespace] = l.usage[h.cluster][h.namespace].plus(h.counted)
}

// ended: a pod that ran to its end holds nothing any more.
func ended(pod *v1.Pod) bool {
	return pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed
}

// reservedNonce is the nonce of the pod's Reserved state, if it reports one.
func reservedNonce(pod *v1.Pod) (string, bool) {
	raw, ok := pod.Annotations[protocol.StateAnnotation]
	if !ok {
		return "", false
	}
	var s protocol.State
	if json.Unmarshal([]byte(raw), &s) != nil || s.Phase != protocol.PhaseReserved {
		return "", false
	}
	return s.Nonce, true
}

// Observe takes in a pod as the informer shows it (added or updated): a
// bound candidate counts until it ends, and one whose state says Reserved
// without a node counts as in flight until that reservation is known to be
// over. It returns the candidates to retry when usage dropped.
func (l *Ledger) Observe(pod *v1.Pod) []*v1.Pod {
	l.mu.Lock()
	defer l.mu.Unlock()
	if sourceCluster(pod) == "" {
		return nil
	}
	if ended(pod) {
		return l.forget(pod.UID)
	}
	dropped := l.update(pod, func(h *hold) {
		// A binding is never undone, and a stale copy from before it must
		// not undo what PostBind recorded.
		h.bound = h.bound || pod.Spec.NodeName != ""
		h.inFlight, h.inFlightNonce = false, ""
		if pod.Spec.NodeName == "" {
			h.inFlightNonce, h.inFlight = reservedNonce(pod)
		}
	})
	if dropped {
		return l.retry(pod.Labels[protocol.SourceClusterLabel])
	}
	return nil
}

// EventHandler is the handler to add to the scheduler's pod informer: it
// keeps the ledger up to date with every candidate, whatever its scheduler,
// and passes the candidates to retry, when usage dropped, to activate.
func (l *Ledger) EventHandler(activate func([]*v1.Pod)) cache.ResourceEventHandler {
	return cache.FilteringResourceEventHandler{
		FilterFunc: func(obj any) bool {
			pod := podOf(obj)
			return pod != nil && IsCandidate(pod.Labels)
		},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { activate(l.Observe(podOf(obj))) },
			UpdateFunc: func(_, obj any) { activate(l.Observe(podOf(obj))) },
			DeleteFunc: func(obj any) { activate(l.Forget(podOf(obj).UID)) },
		},
	}
}

// Forget drops a deleted pod. It returns the candidates to retry when usage
// dropped.
func (l *Ledger) Forget(uid types.UID) []*v1.Pod {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.forget(uid)
}

func (l *Ledger) forget(uid types.UID) []*v1.Pod {
	delete(l.waiting, uid)
	h, ok := l.holds[uid]
	if !ok {
		return nil
	}
	l.uncount(h)
	delete(l.holds, uid)
	if h.counted != (Amounts{}) {
		return l.retry(h.cluster)
	}
	return nil
}

// Reserve counts a candidate from Reserve on, for the reservation named
// nonce.
func (l *Ledger) Reserve(pod *v1.Pod, nonce string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.waiting, pod.UID)
	l.update(pod, func(h *hold) { h.reserved, h.nonce = true, nonce })
}

// Unreserve stops counting a candidate whose reservation ended without a
// binding. Its own Reserved report, should the informer show it later, no
// longer counts either. It returns the candidates to retry.
func (l *Ledger) Unreserve(pod *v1.Pod) []*v1.Pod {
	l.mu.Lock()
	defer l.mu.Unlock()
	if h, ok := l.holds[pod.UID]; !ok || !h.reserved {
		return nil
	}
	if l.update(pod, func(h *hold) {
		h.reserved = false
		h.over, h.overSet = h.nonce, true
	}) {
		return l.retry(sourceCluster(pod))
	}
	return nil
}

// Bound counts a candidate as bound from PostBind on, before the informer
// shows its node.
func (l *Ledger) Bound(pod *v1.Pod) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.update(pod, func(h *hold) {
		h.reserved = false
		h.bound = true
	})
}

// Retrying records that this scheduler is scheduling a candidate again: a
// Reserved state it reports without a node, and that this process did not
// make, is over, since only this scheduler could be holding it.
func (l *Ledger) Retrying(pod *v1.Pod) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h, ok := l.holds[pod.UID]
	if !ok || h.reserved || !h.inFlight {
		return
	}
	l.update(pod, func(h *hold) { h.over, h.overSet = h.inFlightNonce, true })
}

// Usage is what the candidates of cluster hold in the namespaces covers
// accepts, leaving out the candidate except.
func (l *Ledger) Usage(cluster string, covers func(string) bool, except types.UID) Amounts {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.usageOf(cluster, covers, except)
}

func (l *Ledger) usageOf(cluster string, covers func(string) bool, except types.UID) Amounts {
	var used Amounts
	for ns, a := range l.usage[cluster] {
		if covers(ns) {
			used = used.plus(a)
		}
	}
	if h, ok := l.holds[except]; ok && h.cluster == cluster && covers(h.namespace) {
		used = used.less(h.counted)
	}
	return used
}

// Admit decides whether a candidate fits the quota of every invitation that
// covers it (each is a bound of its own, so all of them apply). It returns
// "" when it fits, else the reason in words, naming the quota; a refused
// candidate is remembered and returned by a later call that frees usage of
// its cluster, or by Waiting.
func (l *Ledger) Admit(pod *v1.Pod, invitations []Invitation) string {
	cluster := sourceCluster(pod)
	if cluster == "" {
		return ""
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	want := RequestsOf(pod)
	var reasons []string
	for _, inv := range invitations {
		if inv.Quota.IsZero() || inv.Cluster != cluster || !inv.Covers(pod.Namespace) {
			continue
		}
		used := l.usageOf(cluster, inv.Covers, pod.UID)
		if over := inv.Quota.Over(used.plus(want)); len(over) > 0 {
			reasons = append(reasons, fmt.Sprintf("%s: %s", inv.Name, strings.Join(over, ", ")))
		}
	}
	if len(reasons) == 0 {
		delete(l.waiting, pod.UID)
		return ""
	}
	l.waiting[pod.UID] = pod
	sort.Strings(reasons)
	return "over the quota of " + strings.Join(reasons, "; ") + " (counting this pod's requests)"
}

// Defer remembers a candidate that could not be checked yet (the quotas or
// the usage are not known yet), to be retried with the others.
func (l *Ledger) Defer(pod *v1.Pod) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.waiting[pod.UID] = pod
}

// Waiting returns the candidates of cluster (every cluster for "") refused
// for a quota or deferred, to retry after that cluster's quotas changed, and
// forgets them: a refused one is remembered again by Admit.
func (l *Ledger) Waiting(cluster string) []*v1.Pod {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.retry(cluster)
}

func (l *Ledger) retry(cluster string) []*v1.Pod {
	var pods []*v1.Pod
	for uid, pod := range l.waiting {
		if cluster == "" || sourceCluster(pod) == cluster {
			pods = append(pods, pod)
			delete(l.waiting, uid)
		}
	}
	return pods
}
