package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultbinder"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/queuesort"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/metrics"
	st "k8s.io/kubernetes/pkg/scheduler/testing"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// The plugin driven through kube-scheduler's own framework, as the
// scheduler's binding cycle drives it: Reserve, Permit and the wait on it,
// Unreserve when the wait is rejected, Bind once it is allowed. The target's
// API server is a fake clientset whose informers feed the plugin, as the
// scheduler's do; the test plays the source, writing the allowance or the
// denial on the candidate, and reads what the plugin wrote back.

const (
	profileName = "flotilla"
	nodeName    = "node-a"
	sourceUID   = "source-pod-uid"
	// How long a check waits for the plugin's background writes.
	settleTimeout = 10 * time.Second
)

// The node's labels for the default topology keys, which every Reserved and
// Bound report carries.
var nodeTopology = map[string]string{
	"topology.kubernetes.io/region": "region-1",
	"topology.kubernetes.io/zone":   "zone-a",
}

// targetScheduler is one profile of a target's scheduler running the plugin
// over a fake API server. bindings are the Bindings that server accepted.
type targetScheduler struct {
	t         *testing.T
	framework framework.Framework
	client    *fake.Clientset
	factory   informers.SharedInformerFactory
	// permitTimeout is the profile's permitTimeoutSeconds.
	permitTimeout time.Duration

	mu       sync.Mutex
	bindings []*v1.Binding
	// activated are the pods handed back to the queue, by name.
	activated []string
}

// newTargetScheduler builds the profile the chart configures (the plugin in
// multiPoint and first in bind, after the defaults it relies on: PrioritySort
// to order the queue and DefaultBinder for every other pod) with the chart's
// args and the given Permit timeout, over one node of 4 CPUs and 8Gi.
func newTargetScheduler(t *testing.T, permitTimeoutSeconds int) *targetScheduler {
	t.Helper()
	return newTargetSchedulerOf(t, permitTimeoutSeconds, "4")
}

// newTargetSchedulerOf is newTargetScheduler over a node of cpus CPUs.
func newTargetSchedulerOf(t *testing.T, permitTimeoutSeconds int, cpus string) *targetScheduler {
	t.Helper()
	ctx := t.Context()
	// The framework records into kube-scheduler's metrics, registered
	// once per process.
	metrics.Register()
	node := st.MakeNode().Name(nodeName).
		Label("topology.kubernetes.io/region", nodeTopology["topology.kubernetes.io/region"]).
		Label("topology.kubernetes.io/zone", nodeTopology["topology.kubernetes.io/zone"]).
		Capacity(map[v1.ResourceName]string{v1.ResourceCPU: cpus, v1.ResourceMemory: "8Gi"}).Obj()
	s := &targetScheduler{t: t, client: fake.NewClientset(node), permitTimeout: time.Duration(permitTimeoutSeconds) * time.Second}
	s.client.PrependReactor("create", "pods", s.bind)
	s.factory = informers.NewSharedInformerFactory(s.client, 0)

	args := fmt.Sprintf(`{"permitTimeoutSeconds": %d, "shareTimeoutSeconds": 300}`, permitTimeoutSeconds)
	profile := &config.KubeSchedulerProfile{
		SchedulerName: profileName,
		Plugins: &config.Plugins{
			MultiPoint: config.PluginSet{Enabled: []config.Plugin{{Name: queuesort.Name}, {Name: defaultbinder.Name}, {Name: Name}}},
			Bind:       config.PluginSet{Enabled: []config.Plugin{{Name: Name}}},
		},
		PluginConfig: []config.PluginConfig{{
			Name: Name,
			Args: &runtime.Unknown{ContentType: runtime.ContentTypeJSON, Raw: []byte(args)},
		}},
	}
	registry := frameworkruntime.Registry{
		queuesort.Name:     queuesort.New,
		defaultbinder.Name: defaultbinder.New,
		Name:               New,
	}
	f, err := frameworkruntime.NewFramework(ctx, registry, profile,
		frameworkruntime.WithClientSet(s.client),
		frameworkruntime.WithKubeConfig(noInvitations(t)),
		frameworkruntime.WithInformerFactory(s.factory),
		frameworkruntime.WithSnapshotSharedLister(cache.NewSnapshot(nil, []*v1.Node{node})),
		frameworkruntime.WithWaitingPods(frameworkruntime.NewWaitingPodsMap()),
		frameworkruntime.WithPodActivator(s),
	)
	if err != nil {
		t.Fatalf("building the framework: %v", err)
	}
	s.framework = f
	s.factory.Start(ctx.Done())
	for typ, synced := range s.factory.WaitForCacheSync(ctx.Done()) {
		if !synced {
			t.Fatalf("informer of %v did not sync", typ)
		}
	}
	return s
}

// noInvitations is the kubeConfig of an API server without Flotilla's CRDs,
// hence no Source or ClusterSource and no quota: it answers their lists Not
// Found and holds their watches open until the plugin stops. A watch that
// asks for the initial list (sendInitialEvents) is answered Not Found too,
// as the API server does, so that the informer falls back to a list and
// syncs: the plugin's PreFilter waits for that.
func noInvitations(t *testing.T) *rest.Config {
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if q := r.URL.Query(); q.Get("watch") != "true" || q.Get("sendInitialEvents") == "true" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	t.Cleanup(func() {
		server.CloseClientConnections()
		server.Close()
	})
	return &rest.Config{Host: server.URL}
}

// bind is the API server's pods/binding: it refuses a Binding for another
// pod of the name or for a bound pod, sets the node and merges the
// Binding's annotations into the pod, in one write.
func (s *targetScheduler) bind(action k8stesting.Action) (bool, runtime.Object, error) {
	if action.GetSubresource() != "binding" {
		return false, nil, nil
	}
	binding := action.(k8stesting.CreateAction).GetObject().(*v1.Binding)
	pods := v1.SchemeGroupVersion.WithResource("pods")
	obj, err := s.client.Tracker().Get(pods, binding.Namespace, binding.Name)
	if err != nil {
		return true, nil, err
	}
	pod := obj.(*v1.Pod)
	if binding.UID != "" && binding.UID != pod.UID {
		return true, nil, apierrors.NewConflict(v1.Resource("pods/binding"), pod.Name, fmt.Errorf("binding names UID %s, the pod is %s", binding.UID, pod.UID))
	}
	if pod.Spec.NodeName != "" {
		return true, nil, apierrors.NewConflict(v1.Resource("pods/binding"), pod.Name, fmt.Errorf("pod is already assigned to node %q", pod.Spec.NodeName))
	}
	pod.Spec.NodeName = binding.Target.Name
	if len(binding.Annotations) > 0 && pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	maps.Copy(pod.Annotations, binding.Annotations)
	if err := s.client.Tracker().Update(pods, pod, pod.Namespace); err != nil {
		return true, nil, err
	}
	s.mu.Lock()
	s.bindings = append(s.bindings, binding.DeepCopy())
	s.mu.Unlock()
	return true, binding, nil
}

// Activate is the scheduling queue's: it records the pods activated.
func (s *targetScheduler) Activate(_ klog.Logger, pods map[string]*v1.Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, pod := range pods {
		s.activated = append(s.activated, pod.Name)
	}
}

func (s *targetScheduler) activatedPods() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.activated...)
}

func (s *targetScheduler) madeBindings() []*v1.Binding {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*v1.Binding(nil), s.bindings...)
}

// createCandidate creates a candidate of the source pod sourceUID, asking
// for 1 CPU and 2Gi, and waits until the scheduler's cache holds it.
func (s *targetScheduler) createCandidate(name string) *v1.Pod {
	s.t.Helper()
	return s.createMember(name, "source-cluster", "")
}

// createMember is createCandidate of source cluster's gang share (none
// for ""), asking for 1 CPU and 1Gi.
func (s *targetScheduler) createMember(name, cluster, share string) *v1.Pod {
	s.t.Helper()
	memory := "2Gi"
	annotations := map[string]string{}
	if share != "" {
		memory, annotations[protocol.ShareAnnotation] = "1Gi", share
	}
	pod := st.MakePod().Namespace("ns").Name(name).UID(name + "-uid").SchedulerName(profileName).
		Labels(map[string]string{
			protocol.CandidateLabel:     "true",
			protocol.SourceUIDLabel:     sourceUID,
			protocol.SourceClusterLabel: cluster,
		}).
		Annotations(annotations).
		Req(map[v1.ResourceName]string{v1.ResourceCPU: "1", v1.ResourceMemory: memory}).Obj()
	if _, err := s.client.CoreV1().Pods(pod.Namespace).Create(s.t.Context(), pod, metav1.CreateOptions{}); err != nil {
		s.t.Fatalf("creating candidate %s: %v", name, err)
	}
	s.waitFor("the scheduler's cache to hold "+name, func() (bool, error) {
		_, err := s.factory.Core().V1().Pods().Lister().Pods(pod.Namespace).Get(name)
		return err == nil, nil
	})
	return pod
}

// annotate writes annotations on the candidate as its source does; a nil
// value removes one.
func (s *targetScheduler) annotate(pod *v1.Pod, annotations map[string]any) {
	s.t.Helper()
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		s.t.Fatal(err)
	}
	if _, err := s.client.CoreV1().Pods(pod.Namespace).Patch(s.t.Context(), pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		s.t.Fatalf("annotating %s: %v", pod.Name, err)
	}
}

// stored is the candidate as the API server holds it.
func (s *targetScheduler) stored(pod *v1.Pod) *v1.Pod {
	s.t.Helper()
	got, err := s.client.CoreV1().Pods(pod.Namespace).Get(s.t.Context(), pod.Name, metav1.GetOptions{})
	if err != nil {
		s.t.Fatalf("reading %s: %v", pod.Name, err)
	}
	return got
}

// waitForState waits until the candidate's state annotation reports phase
// and returns that state.
func (s *targetScheduler) waitForState(pod *v1.Pod, phase protocol.Phase) protocol.State {
	s.t.Helper()
	var state protocol.State
	s.waitFor(fmt.Sprintf("%s to report %s", pod.Name, phase), func() (bool, error) {
		raw, ok := s.stored(pod).Annotations[protocol.StateAnnotation]
		if !ok {
			return false, nil
		}
		var reported protocol.State
		if err := json.Unmarshal([]byte(raw), &reported); err != nil {
			return false, fmt.Errorf("state annotation %q: %w", raw, err)
		}
		state = reported
		return state.Phase == phase, nil
	})
	return state
}

func (s *targetScheduler) waitFor(what string, done func() (bool, error)) {
	s.t.Helper()
	err := wait.PollUntilContextTimeout(s.t.Context(), 5*time.Millisecond, settleTimeout, true, func(context.Context) (bool, error) {
		return done()
	})
	if err != nil {
		s.t.Fatalf("waiting for %s: %v", what, err)
	}
}

// candidateCycle is a candidate's scheduling cycle: its pod and cycle
// state, the reservation Reserve reported and the end of its wait in
// Permit.
type candidateCycle struct {
	pod      *v1.Pod
	state    fwk.CycleState
	reserved protocol.State
	ended    <-chan *fwk.Status
}

// waitInPermit creates a candidate, runs Reserve for it on the node (the
// plugin must report the reservation) and Permit, which must ask to wait
// for the profile's timeout, and waits on Permit in the background, as the
// binding cycle does.
func (s *targetScheduler) waitInPermit(name string) *candidateCycle {
	s.t.Helper()
	return s.reserveAndWait(s.createCandidate(name))
}

// reserveAndWait is waitInPermit of a candidate created already; a member
// of a share waits longer than the Permit timeout, its share's deadline
// coming first.
func (s *targetScheduler) reserveAndWait(pod *v1.Pod) *candidateCycle {
	s.t.Helper()
	c := &candidateCycle{pod: pod, state: framework.NewCycleState()}
	if status := s.framework.RunReservePluginsReserve(s.t.Context(), c.state, c.pod, nodeName); !status.IsSuccess() {
		s.t.Fatalf("Reserve: %s", describe(status))
	}
	c.reserved = s.waitForState(c.pod, protocol.PhaseReserved)

	waits, status := s.framework.RunPermitPlugins(s.t.Context(), c.state, c.pod, nodeName)
	if !status.IsWait() {
		s.t.Fatalf("Permit of a candidate its source has not answered: %s, want Wait", describe(status))
	}
	if _, member := pod.Annotations[protocol.ShareAnnotation]; member && waits[Name] <= s.permitTimeout || !member && waits[Name] != s.permitTimeout {
		s.t.Fatalf("Permit waits %v, want the profile's permitTimeoutSeconds, %v", waits[Name], s.permitTimeout)
	}
	s.framework.AddWaitingPod(c.pod, waits)
	ended := make(chan *fwk.Status, 1)
	go func() { ended <- s.framework.WaitOnPermit(s.t.Context(), c.pod) }()
	c.ended = ended
	return c
}

// waitEnded returns how the wait in Permit ended.
func (s *targetScheduler) waitEnded(c *candidateCycle) *fwk.Status {
	s.t.Helper()
	select {
	case status := <-c.ended:
		return status
	case <-time.After(settleTimeout):
		s.t.Fatalf("the wait in Permit did not end within %v", settleTimeout)
		return nil
	}
}

// allow writes the source's allowance of the reservation, which must end
// the wait in Permit.
func (s *targetScheduler) allow(c *candidateCycle) {
	s.t.Helper()
	allowance := protocol.Allowance{SourceUID: sourceUID, Generation: 1, Nonce: c.reserved.Nonce}
	s.annotate(c.pod, map[string]any{protocol.AllowedAnnotation: allowance.Encode()})
	if status := s.waitEnded(c); !status.IsSuccess() {
		s.t.Fatalf("the wait in Permit ended with %s after the source's allowance, want success", describe(status))
	}
}

// unreserve runs Unreserve, as the binding cycle does when it fails, and
// returns the Unreserved state the plugin wrote.
func (s *targetScheduler) unreserve(c *candidateCycle) protocol.State {
	s.t.Helper()
	s.framework.RunReservePluginsUnreserve(s.t.Context(), c.state, c.pod, nodeName)
	return s.waitForState(c.pod, protocol.PhaseUnreserved)
}

// rejectedByPlugin reports whether status rejects the pod on this plugin's
// word.
func rejectedByPlugin(status *fwk.Status) bool {
	return status.IsRejected() && status.Plugin() == Name
}

// describe shows a status, nil (success) too.
func describe(status *fwk.Status) string {
	if status == nil {
		return "Success"
	}
	return fmt.Sprintf("%v %q (plugin %q)", status.Code(), status.Message(), status.Plugin())
}

// An allowed candidate: Reserve reports the reservation on the candidate,
// Permit holds it until the source's allowance of that reservation lands,
// and Bind binds it with a Binding that reports it Bound itself.
func TestAllowedCandidateBindsReportingBound(t *testing.T) {
	s := newTargetScheduler(t, 30)
	c := s.waitInPermit("allowed")
	if !protocol.ValidNonce(c.reserved.Nonce) {
		t.Fatalf("Reserved state names no valid nonce: %+v", c.reserved)
	}
	// 1 CPU of 4 and 2Gi of 8Gi placed: three quarters of each left.
	want := protocol.State{Phase: protocol.PhaseReserved, Nonce: c.reserved.Nonce, Node: nodeName, Score: 75, Topology: nodeTopology}
	if diff := cmp.Diff(want, c.reserved); diff != "" {
		t.Errorf("Reserved state (-want +got):\n%s", diff)
	}
	s.allow(c)

	if status := s.framework.RunBindPlugins(t.Context(), c.state, c.pod, nodeName); !status.IsSuccess() {
		t.Fatalf("Bind: %s", describe(status))
	}
	bindings := s.madeBindings()
	if len(bindings) != 1 {
		t.Fatalf("%d Bindings made, want 1", len(bindings))
	}
	if b := bindings[0]; b.Name != c.pod.Name || b.UID != c.pod.UID || b.Target.Name != nodeName {
		t.Errorf("Binding of %s (UID %s) to %q, want %s (UID %s) to %s", b.Name, b.UID, b.Target.Name, c.pod.Name, c.pod.UID, nodeName)
	}
	var bound protocol.State
	if err := json.Unmarshal([]byte(bindings[0].Annotations[protocol.StateAnnotation]), &bound); err != nil {
		t.Fatalf("the Binding carries no state: %v (annotations %v)", err, bindings[0].Annotations)
	}
	want = protocol.State{Phase: protocol.PhaseBound, Nonce: c.reserved.Nonce, Node: nodeName, Topology: nodeTopology}
	if diff := cmp.Diff(want, bound); diff != "" {
		t.Errorf("state carried by the Binding (-want +got):\n%s", diff)
	}
	if got := s.stored(c.pod); got.Spec.NodeName != nodeName {
		t.Errorf("candidate bound to %q, want %s", got.Spec.NodeName, nodeName)
	}
}

// An allowance the source withdrew after the wait in Permit ended: Bind
// refuses the candidate, which no other bind plugin may then bind, and
// Unreserve reports why.
func TestWithdrawnAllowanceIsNotBound(t *testing.T) {
	s := newTargetScheduler(t, 30)
	c := s.waitInPermit("withdrawn")
	s.allow(c)

	s.annotate(c.pod, map[string]any{protocol.AllowedAnnotation: nil})
	s.waitFor("the scheduler's cache to see the allowance withdrawn", func() (bool, error) {
		cached, err := s.factory.Core().V1().Pods().Lister().Pods(c.pod.Namespace).Get(c.pod.Name)
		if err != nil {
			return false, err
		}
		_, allowed := cached.Annotations[protocol.AllowedAnnotation]
		return !allowed, nil
	})
	status := s.framework.RunBindPlugins(t.Context(), c.state, c.pod, nodeName)
	if !rejectedByPlugin(status) {
		t.Fatalf("Bind of a candidate whose allowance was withdrawn: %s, want rejected by %s", describe(status), Name)
	}
	if n := len(s.madeBindings()); n != 0 {
		t.Fatalf("%d Bindings made of a candidate whose allowance was withdrawn", n)
	}

	unreserved := s.unreserve(c)
	if unreserved.Nonce != c.reserved.Nonce || unreserved.Reason == "" || !strings.HasSuffix(status.Message(), unreserved.Reason) {
		t.Errorf("Unreserved state %+v, want reservation %s ended for the reason Bind refused it: %s", unreserved, c.reserved.Nonce, status.Message())
	}
}

// A denied candidate: the source's denial ends the wait in Permit with the
// denial's reason, and Unreserve reports the reservation Unreserved with it.
func TestDeniedCandidateIsUnreservedWithTheReason(t *testing.T) {
	s := newTargetScheduler(t, 30)
	c := s.waitInPermit("denied")
	denial := protocol.Denial{SourceUID: sourceUID, Generation: 2}
	s.annotate(c.pod, map[string]any{protocol.DeniedAnnotation: denial.Encode()})
	status := s.waitEnded(c)
	if !rejectedByPlugin(status) || !strings.HasPrefix(status.Message(), protocol.DeniedMessage) {
		t.Fatalf("the wait in Permit ended with %s after the source's denial, want rejected by %s: %s...", describe(status), Name, protocol.DeniedMessage)
	}

	want := protocol.State{Phase: protocol.PhaseUnreserved, Nonce: c.reserved.Nonce, Node: nodeName, Reason: status.Message()}
	if diff := cmp.Diff(want, s.unreserve(c)); diff != "" {
		t.Errorf("Unreserved state (-want +got):\n%s", diff)
	}
	if n := len(s.madeBindings()); n != 0 {
		t.Errorf("%d Bindings made of a denied candidate", n)
	}
}

// A candidate its source never answers: the wait in Permit ends at the
// profile's timeout, and Unreserve reports that as the reason.
func TestUnansweredCandidateTimesOutInPermit(t *testing.T) {
	s := newTargetScheduler(t, 1)
	c := s.waitInPermit("unanswered")
	status := s.waitEnded(c)
	if !rejectedByPlugin(status) || !strings.Contains(status.Message(), "timeout") {
		t.Fatalf("the wait in Permit ended with %s, want rejected by %s for its timeout", describe(status), Name)
	}

	want := protocol.State{Phase: protocol.PhaseUnreserved, Nonce: c.reserved.Nonce, Node: nodeName,
		Reason: "permit timed out after 1s without an allowance from the source"}
	if diff := cmp.Diff(want, s.unreserve(c)); diff != "" {
		t.Errorf("Unreserved state (-want +got):\n%s", diff)
	}
}

// A pod that is not a candidate goes through untouched: no wait, and
// DefaultBinder binds it, with no state.
func TestOrdinaryPodPassesThrough(t *testing.T) {
	s := newTargetScheduler(t, 30)
	pod := st.MakePod().Namespace("ns").Name("ordinary").UID("ordinary-uid").SchedulerName(profileName).Obj()
	if _, err := s.client.CoreV1().Pods(pod.Namespace).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	state := framework.NewCycleState()
	if status := s.framework.RunReservePluginsReserve(t.Context(), state, pod, nodeName); !status.IsSuccess() {
		t.Fatalf("Reserve: %v", status)
	}
	if _, status := s.framework.RunPermitPlugins(t.Context(), state, pod, nodeName); !status.IsSuccess() {
		t.Fatalf("Permit: %v, want success", status)
	}
	if status := s.framework.RunBindPlugins(t.Context(), state, pod, nodeName); !status.IsSuccess() {
		t.Fatalf("Bind: %v", status)
	}
	bindings := s.madeBindings()
	if len(bindings) != 1 || bindings[0].Annotations[protocol.StateAnnotation] != "" {
		t.Fatalf("Bindings %+v, want one by DefaultBinder, with no state", bindings)
	}
}
