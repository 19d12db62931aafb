package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// TestAgentKilledBetweenElectionAndAllowance kills the agent after it wrote
// an election on the source pod and before any allowance reached the
// elected candidate (the targets refuse allowances with a
// ValidatingAdmissionPolicy until the agent is dead). Started again, the
// agent allows the candidate its record names, for the same election, and
// no other: the record on the source pod is the only memory there is.
func TestAgentKilledBetweenElectionAndAllowance(t *testing.T) {
	t.Parallel()
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{
		{Name: "src", WithoutScheduler: true},
		// A Permit timeout far beyond the test: the elected reservation
		// outlives the agent's absence, so its election must stay as it
		// was written (same target, same generation, same nonce).
		{Name: "t1", Nodes: []sandbox.NodeSpec{{CPU: "4"}}, PermitTimeoutSeconds: 600},
		{Name: "t2", Nodes: []sandbox.NodeSpec{{CPU: "4"}}, PermitTimeoutSeconds: 600},
	}})
	ctx := t.Context()
	for _, c := range s.Clusters {
		createNamespace(t, c.Client(), placementNS)
	}
	src := s.Cluster("src")
	targets := []*sandbox.Cluster{s.Cluster("t1"), s.Cluster("t2")}
	for _, c := range targets {
		refuseAllowances(t, c)
	}
	agent, err := sandbox.StartAgent(ctx, src, targets)
	if err != nil {
		t.Fatal(err)
	}
	seen := watchCandidates(t, targets, "killed")

	srcPods := src.Client().CoreV1().Pods(placementNS)
	pod, err := srcPods.Create(ctx, optedInPod("killed", "1"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var before protocol.Election
	waitFor(t, 60*time.Second, "an election on the source pod", func() (bool, string) {
		p, err := srcPods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		before, err = protocol.ParseElection(p.Annotations[protocol.ElectionAnnotation])
		if err != nil {
			t.Fatalf("the agent wrote a malformed election: %v", err)
		}
		return before.Elected(), fmt.Sprintf("election %q", p.Annotations[protocol.ElectionAnnotation])
	})
	t.Logf("election before the kill: %s", before.Encode())
	// The other target holds a reservation too: the restarted agent could
	// elect it, and must not.
	waitFor(t, 60*time.Second, "both candidates reserved", func() (bool, string) {
		reserved := map[string]bool{}
		for _, v := range seen.where(func(v candidateVersion) bool { return v.state.Phase == protocol.PhaseReserved }) {
			reserved[v.cluster] = true
		}
		return len(reserved) == len(targets), fmt.Sprintf("reserved in %v", reserved)
	})
	if v := seen.where(func(v candidateVersion) bool { return v.allowed != "" || v.node != "" }); len(v) > 0 {
		t.Fatalf("a candidate was allowed or bound though every target refuses allowances: %v", v)
	}
	if err := agent.Kill(); err != nil {
		t.Fatal(err)
	}
	for _, c := range targets {
		acceptAllowances(t, c)
	}
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	if err := agent.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}

	want := protocol.VirtualNodeName("", before.Target)
	sources := waitSourcePods(t, src.Client(), "app=killed", 1, func(p *corev1.Pod) bool {
		return p.Spec.NodeName == want && p.Status.Phase == corev1.PodRunning
	})
	waitFor(t, 60*time.Second, "one delegate, in the elected target", func() (bool, string) {
		return checkOneDelegateEach(ctx, s, sources)
	})
	after, err := protocol.ParseElection(sources[0].Annotations[protocol.ElectionAnnotation])
	if err != nil || after != before {
		t.Errorf("election after the restart %+v (%v), want it unchanged: %+v", after, err, before)
	}
	allowance := protocol.Allowance{SourceUID: string(pod.UID), Generation: before.Generation, Nonce: before.Nonce}.Encode()
	var allowed []string
	for _, v := range seen.where(func(v candidateVersion) bool { return v.allowed != "" || v.node != "" }) {
		switch {
		case v.cluster != before.Target:
			t.Errorf("the candidate in %s, which the election does not name, was allowed or bound: %v", v.cluster, v)
		case v.allowed != allowance:
			t.Errorf("the elected candidate carried allowance %q (bound to %q), want %q only", v.allowed, v.node, allowance)
		default:
			allowed = append(allowed, v.allowed)
		}
	}
	if len(allowed) == 0 {
		t.Errorf("the elected candidate was never seen allowed")
	}
	bound := seen.where(func(v candidateVersion) bool { return v.cluster == before.Target && v.node != "" })
	if len(bound) == 0 {
		t.Fatal("the elected candidate was never seen bound")
	}
	if st := bound[len(bound)-1].state; st.Phase != protocol.PhaseBound || st.Nonce != before.Nonce {
		t.Errorf("the delegate reports %+v, want Bound for the elected reservation %s", st, before.Nonce)
	}
}

// TestRogueBindingNeverAdopted binds a candidate by hand in target b, with
// an allowance the source never gave and a forged report that it bound on
// it (a target binding on its own): the
// source reports it, never binds its pod there, places the pod in a once a
// candidate is elected there, and deletes b's candidate.
func TestRogueBindingNeverAdopted(t *testing.T) {
	t.Parallel()
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{
		{Name: "src", WithoutScheduler: true},
		{Name: "a", Nodes: []sandbox.NodeSpec{{CPU: "4"}}},
		{Name: "b", Nodes: []sandbox.NodeSpec{{CPU: "4"}}},
	}})
	ctx := t.Context()
	for _, c := range s.Clusters {
		createNamespace(t, c.Client(), placementNS)
	}
	src, a, b := s.Cluster("src"), s.Cluster("a"), s.Cluster("b")
	if _, err := sandbox.StartAgent(ctx, src, []*sandbox.Cluster{a, b}); err != nil {
		t.Fatal(err)
	}
	// Nobody reserves: the candidates wait unscheduled.
	for _, c := range []*sandbox.Cluster{a, b} {
		if err := c.Stop(sandbox.CandidateScheduler); err != nil {
			t.Fatal(err)
		}
	}
	seen := watchCandidates(t, []*sandbox.Cluster{a, b}, "rogue")
	srcPods := src.Client().CoreV1().Pods(placementNS)
	pod, err := srcPods.Create(ctx, optedInPod("rogue", "1"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nameIn := func(c *sandbox.Cluster) string {
		return protocol.CandidateName("src", c.Name, placementNS, pod.Name, string(pod.UID))
	}
	for _, c := range []*sandbox.Cluster{a, b} {
		waitPod(t, c.Client(), placementNS, nameIn(c), "created, unbound", func(p *corev1.Pod) bool { return p.Spec.NodeName == "" })
	}

	// b binds its candidate on an allowance of an election the source never
	// held, for a reservation its scheduler never made, and forges the
	// report that it bound on it.
	bPods := b.Client().CoreV1().Pods(placementNS)
	forged := protocol.Allowance{SourceUID: string(pod.UID), Generation: 7, Nonce: "forged"}.Encode()
	state, err := json.Marshal(protocol.State{Phase: protocol.PhaseBound, Nonce: "forged", Node: "b-node-0"})
	if err != nil {
		t.Fatal(err)
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		protocol.AllowedAnnotation: forged, protocol.StateAnnotation: string(state)}}})
	if err != nil {
		t.Fatal(err)
	}
	rogue, err := bPods.Patch(ctx, nameIn(b), types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := bPods.Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: nameIn(b), Namespace: placementNS, UID: rogue.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: "b-node-0"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	waitFor(t, 60*time.Second, "a ProtocolViolation event naming b on the source pod", func() (bool, string) {
		p, err := srcPods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if p.Spec.NodeName != "" {
			// Nothing was elected: any binding is the rogue's adoption.
			t.Fatalf("the source pod was bound to %s, though no candidate was ever allowed", p.Spec.NodeName)
		}
		evs, err := src.Client().CoreV1().Events(placementNS).List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.uid=" + string(pod.UID) + ",reason=ProtocolViolation",
		})
		if err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if strings.Contains(e.Message, "Target b ") {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d ProtocolViolation events, none naming b", len(evs.Items))
	})

	if err := a.Start(ctx, sandbox.CandidateScheduler); err != nil {
		t.Fatal(err)
	}
	want := protocol.VirtualNodeName("", "a")
	sources := waitSourcePods(t, src.Client(), "app=rogue", 1, func(p *corev1.Pod) bool {
		if p.Spec.NodeName != "" && p.Spec.NodeName != want {
			t.Fatalf("the source pod was bound to %s, the rogue target's virtual node", p.Spec.NodeName)
		}
		return p.Spec.NodeName == want && p.Status.Phase == corev1.PodRunning
	})
	waitFor(t, 60*time.Second, "b's rogue candidate deleted", func() (bool, string) {
		p, err := bPods.Get(ctx, nameIn(b), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		if err != nil {
			return false, err.Error()
		}
		return p.UID != rogue.UID, fmt.Sprintf("still there (deleting: %v)", p.DeletionTimestamp != nil)
	})
	waitFor(t, 60*time.Second, "only a's candidate left, as the delegate", func() (bool, string) {
		return checkOneDelegateEach(ctx, s, sources)
	})
	// a's candidate was only ever allowed by an election of a.
	for _, v := range seen.where(func(v candidateVersion) bool { return v.cluster == "a" && v.allowed != "" }) {
		if al, err := protocol.ParseAllowance(v.allowed); err != nil || al.SourceUID != string(pod.UID) || al.Generation == 7 {
			t.Errorf("a's candidate carried allowance %q", v.allowed)
		}
	}
}

// refuseAllowances makes c refuse any update of a pod that leaves it
// carrying an allowance, with a ValidatingAdmissionPolicy, and waits until
// the API server enforces it.
func refuseAllowances(t *testing.T, c *sandbox.Cluster) {
	t.Helper()
	ctx := t.Context()
	arc := c.Client().AdmissionregistrationV1()
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "refuse-allowances"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: fmt.Sprintf("!has(object.metadata.annotations) || !(%q in object.metadata.annotations)", protocol.AllowedAnnotation),
				Message:    "this test refuses allowances",
			}},
		},
	}
	if _, err := arc.ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "refuse-allowances"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        policy.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{corev1.LabelMetadataName: placementNS},
			}},
		},
	}
	if _, err := arc.ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A pod nobody schedules, to try allowances on: a candidate of a
	// cluster no agent here serves, since only a candidate may carry an
	// allowance written by another than this cluster's agent (the chart's
	// pods policy).
	probe := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "allowance-probe", Labels: map[string]string{
			protocol.CandidateLabel: "true", protocol.SourceClusterLabel: "probe-cluster",
		}},
		Spec: corev1.PodSpec{SchedulerName: "nobody", Containers: []corev1.Container{{Name: "c", Image: "probe"}}},
	}
	if _, err := c.Client().CoreV1().Pods(placementNS).Create(ctx, probe, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "allowances refused in "+c.Name, func() (bool, string) {
		err := tryAllowance(t, c)
		return err != nil && strings.Contains(err.Error(), "this test refuses allowances"), fmt.Sprintf("dry-run allowance: %v", err)
	})
}

// acceptAllowances deletes refuseAllowances' binding and waits until the
// API server takes an allowance again.
func acceptAllowances(t *testing.T, c *sandbox.Cluster) {
	t.Helper()
	if err := c.Client().AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(t.Context(), "refuse-allowances", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "allowances accepted in "+c.Name, func() (bool, string) {
		err := tryAllowance(t, c)
		return err == nil, fmt.Sprintf("dry-run allowance: %v", err)
	})
	// The probe looks like a candidate: it goes, so that the test's
	// checks of the candidates left see only the protocol's.
	if err := c.Client().CoreV1().Pods(placementNS).Delete(t.Context(), "allowance-probe", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
}

// tryAllowance writes an allowance on refuseAllowances' probe pod, dry-run.
func tryAllowance(t *testing.T, c *sandbox.Cluster) error {
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"probe/1/probe"}}}`, protocol.AllowedAnnotation)
	_, err := c.Client().CoreV1().Pods(placementNS).Patch(t.Context(), "allowance-probe", types.MergePatchType, []byte(patch),
		metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
	return err
}

// candidateVersion is one version of a candidate as a target's watch
// delivered it.
type candidateVersion struct {
	cluster, name, allowed, node string
	state                        protocol.State
}

func (v candidateVersion) String() string {
	return fmt.Sprintf("%s/%s{allowed %q node %q state %+v}", v.cluster, v.name, v.allowed, v.node, v.state)
}

// candidateWatch holds every version of the candidates of one app that the
// targets' watches delivered, from before the pod was created.
type candidateWatch struct {
	mu       sync.Mutex
	versions []candidateVersion
}

func watchCandidates(t *testing.T, clusters []*sandbox.Cluster, app string) *candidateWatch {
	t.Helper()
	ctx := t.Context()
	w := &candidateWatch{}
	for _, c := range clusters {
		factory := informers.NewSharedInformerFactoryWithOptions(c.Client(), 0, informers.WithNamespace(placementNS),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = protocol.CandidateLabel + "=true" }))
		record := func(obj any) {
			p, ok := obj.(*corev1.Pod)
			if !ok || !ofApp(p, app) {
				return
			}
			v := candidateVersion{cluster: c.Name, name: p.Name, allowed: p.Annotations[protocol.AllowedAnnotation], node: p.Spec.NodeName}
			_ = json.Unmarshal([]byte(p.Annotations[protocol.StateAnnotation]), &v.state)
			w.mu.Lock()
			defer w.mu.Unlock()
			w.versions = append(w.versions, v)
		}
		if _, err := factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    record,
			UpdateFunc: func(_, obj any) { record(obj) },
		}); err != nil {
			t.Fatal(err)
		}
		factory.Start(ctx.Done())
		for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
			if !ok {
				t.Fatalf("watching candidates in %s: %v did not sync", c.Name, typ)
			}
		}
	}
	return w
}

// where returns the versions seen so far that match.
func (w *candidateWatch) where(match func(candidateVersion) bool) []candidateVersion {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []candidateVersion
	for _, v := range w.versions {
		if match(v) {
			out = append(out, v)
		}
	}
	return out
}
