package cli

import (
	"bytes"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// heldBackWhy is what the agent writes in a target's Ready condition when
// it holds the target back (target.HeldBack).
const heldBackWhy = "5 delegates of this cluster's pods vanished in the target within 2m0s without this cluster deleting them; no new pod is sent there until 2030-01-01T00:00:00Z"

// selfTarget is a ClusterTarget of this cluster, Ready or not as ready
// says.
func selfTarget(name string, ready metav1.Condition) *v1alpha1.ClusterTarget {
	ready.Type = v1alpha1.TargetReady
	return &v1alpha1.ClusterTarget{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1alpha1.ClusterTargetSpec{TargetCommon: v1alpha1.TargetCommon{Self: true}},
		Status:     v1alpha1.TargetStatus{Conditions: []metav1.Condition{ready}, VirtualNode: "flotilla-" + name},
	}
}

// reservedCandidate is the candidate of source in the target name (a self
// target's, in this cluster), reserved on a node and waiting in Permit.
func reservedCandidate(source *corev1.Pod, name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: source.Namespace, Name: source.Name + "-" + name,
			Labels: map[string]string{
				protocol.CandidateLabel: "true", protocol.TargetLabel: protocol.TargetLabelValue(name), protocol.SourceUIDLabel: string(source.UID),
			},
			Annotations: map[string]string{protocol.StateAnnotation: `{"phase":"Reserved","nonce":"n-` + name + `","node":"` + name + `-node","score":50}`},
		},
		Spec: corev1.PodSpec{SchedulerName: "flotilla"},
	}
}

// TestExplainSaysATargetIsHeldBack: a target the agent holds back (its
// Ready condition says DelegatesLost, or Cordoned: its virtual node is
// cordoned, the target still Ready) gets no candidate from the agent
// whatever the policy, before any plan. It still holds the pod's
// candidate, sent before it was held back, reserved and waiting in
// Permit: explain must say the target is left out and why, with or
// without a policy, and must not call it selected.
func TestExplainSaysATargetIsHeldBack(t *testing.T) {
	source := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "shop", Name: "web-new", UID: "uid-new",
			Labels:          map[string]string{"app": "web", "pod-template-hash": "5d8f", protocol.ElectLabel: "true"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-5d8f", Controller: ptr.To(true)}},
			Annotations:     map[string]string{protocol.OriginalFieldsAnnotation: `{"schedulerName":"default-scheduler"}`},
		},
		Spec:   corev1.PodSpec{SchedulerName: protocol.SourceSchedulerName, Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	held := selfTarget("held", metav1.Condition{Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonDelegatesLost, Message: heldBackWhy})
	fine := selfTarget("fine", metav1.Condition{Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonConnected})
	cordoned := selfTarget("cordoned", metav1.Condition{Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonCordoned, Message: "Connected, but its virtual node flotilla-cordoned is cordoned"})
	web := &v1alpha1.PlacementPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
		Spec:       v1alpha1.PlacementPolicySpec{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
	}
	for _, tc := range []struct {
		name     string
		policies []*v1alpha1.PlacementPolicy
	}{
		{name: "no policy"},
		{name: "under a policy", policies: []*v1alpha1.PlacementPolicy{web}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			builder := crfake.NewClientBuilder().WithScheme(scheme).WithObjects(held, fine, cordoned).WithStatusSubresource(held, fine, cordoned)
			for _, p := range tc.policies {
				builder = builder.WithObjects(p)
			}
			c := &clients{
				where: "test", namespace: "shop",
				kube: kubefake.NewClientset(source, reservedCandidate(source, "held"), reservedCandidate(source, "fine"), reservedCandidate(source, "cordoned")),
				cr:   builder.Build(),
			}
			e, err := explain(t.Context(), c, &explainOptions{agentNamespace: DefaultAgentNamespace}, source.Name)
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := writeExplanation(&out, e, "text", time.Now()); err != nil {
				t.Fatal(err)
			}
			rows := map[string]string{}
			for _, line := range strings.Split(out.String(), "\n") {
				if name, _, ok := strings.Cut(line, " "); ok && (name == "held" || name == "fine" || name == "cordoned") {
					rows[name] = line
				}
			}
			if !strings.Contains(rows["held"], "vanished in the target") {
				t.Errorf("explain says nothing of the target held back:\n%s", out.String())
			}
			if strings.Contains(rows["held"], "selected") {
				t.Errorf("explain calls the target held back selected:\n%s", out.String())
			}
			if !strings.Contains(rows["cordoned"], "flotilla-cordoned is cordoned") || strings.Contains(rows["cordoned"], "selected") {
				t.Errorf("explain does not leave out the target whose virtual node is cordoned:\n%s", out.String())
			}
			if strings.Contains(rows["fine"], "vanished") || strings.Contains(rows["fine"], "cordoned") || rows["fine"] == "" {
				t.Errorf("the target not held back:\n%s", out.String())
			}
		})
	}
}

// TestExplainSaysWhichTargetsCannotRunThePod: as the agent does, explain
// reads the targets' ClusterSummaries and leaves out, whatever the policy,
// a target none of whose nodes meets the pod's required node affinity,
// and one none of whose nodes has room for its requests while another may
// have; a target the pod's namespace is not invited to is not weighed.
func TestExplainSaysWhichTargetsCannotRunThePod(t *testing.T) {
	pod := replica("me", "", "")
	saved := corev1.PodSpec{
		Containers: []corev1.Container{{Name: "app", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")}}}},
		Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
				{Key: protocol.DefaultCapacityNodeLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{protocol.CapacitySpot}},
			}}},
		}}},
	}
	raw, err := json.Marshal(saved)
	if err != nil {
		t.Fatal(err)
	}
	delete(pod.Annotations, protocol.OriginalFieldsAnnotation)
	pod.Annotations[protocol.SourceSpecAnnotation] = string(raw)
	summary := func(largestCPU string, capacities ...string) *v1alpha1.ClusterSummaryStatus {
		s := &v1alpha1.ClusterSummaryStatus{LargestFree: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(largestCPU), corev1.ResourcePods: resource.MustParse("10")}}
		ts := v1alpha1.TopologySummary{Key: protocol.DefaultCapacityNodeLabel}
		for _, c := range capacities {
			ts.Values = append(ts.Values, v1alpha1.TopologyValue{Value: c, Nodes: 1})
		}
		s.Topology = []v1alpha1.TopologySummary{ts}
		return s
	}
	for _, tc := range []struct {
		name    string
		targets []PolicyTarget
		// leftOut are the beginnings of the reasons, per target.
		leftOut map[string]string
	}{
		{
			name: "on-demand nodes only, and too small while another has room",
			targets: []PolicyTarget{
				{Name: "od", Summary: summary("8", protocol.CapacityOnDemand)},
				{Name: "small", Summary: summary("2", protocol.CapacitySpot)},
				{Name: "big", Summary: summary("8", protocol.CapacitySpot)},
				{Name: "self"},
			},
			leftOut: map[string]string{
				"od":    "no node with " + protocol.DefaultCapacityNodeLabel + " in [spot] (its nodes have on-demand)",
				"small": "no node has 4 cpu free (the most on one node: 2)",
			},
		},
		{
			name: "none has room: each keeps its chance",
			targets: []PolicyTarget{
				{Name: "small", Summary: summary("2", protocol.CapacitySpot)},
				{Name: "smaller", Summary: summary("1", protocol.CapacitySpot)},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			answers := make([]Answer, len(tc.targets))
			for i, tg := range tc.targets {
				answers[i] = Answer{Target: tg.Name, Answer: AnswerNoCandidate, Reason: "the agent has not sent a candidate there (yet)"}
			}
			if pe := ExplainPolicy(&pod, nil, tc.targets, nil, answers); pe != nil {
				t.Fatalf("no policy: %+v", pe)
			}
			var out bytes.Buffer
			writeAnswers(&out, &Explanation{Targets: answers})
			for _, a := range answers {
				want := tc.leftOut[a.Target]
				if a.LeftOut != want {
					t.Errorf("%s left out %q, want %q", a.Target, a.LeftOut, want)
				}
				if want != "" && !strings.Contains(out.String(), "no candidate: "+want) {
					t.Errorf("output does not say why %s gets no candidate:\n%s", a.Target, out.String())
				}
			}
		})
	}

	// Not invited to the pod's namespace: the agent does not weigh it,
	// so the small target is the only one, and keeps its chance.
	answers := []Answer{{Target: "small"}, {Target: "elsewhere"}}
	views := []policyView{
		{target: targetInfo{name: "small", summary: summary("2", protocol.CapacitySpot)}},
		{target: targetInfo{name: "elsewhere", namespaces: []string{"other"}, summary: summary("8", protocol.CapacitySpot)}},
	}
	if got := leaveOut(&pod, views, answers); len(got) != 0 {
		t.Errorf("left out %v: a target not invited to namespace shop was weighed", got)
	}
}

// TestExplainReadsTheTargetsSummary: explain reads the ClusterSummary a
// target publishes for this cluster, named in the target's kubeconfig
// Secret, with that kubeconfig, as the agent does: a target whose nodes
// are all on-demand is left out for a pod the split sent to spot.
func TestExplainReadsTheTargetsSummary(t *testing.T) {
	summary := v1alpha1.ClusterSummary{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "ClusterSummary"},
		ObjectMeta: metav1.ObjectMeta{Name: "for-src"},
		Status: v1alpha1.ClusterSummaryStatus{Topology: []v1alpha1.TopologySummary{{
			Key: protocol.DefaultCapacityNodeLabel, Values: []v1alpha1.TopologyValue{{Value: protocol.CapacityOnDemand, Nodes: 3}},
		}}},
	}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/apis/multicluster.flotilla.dev/v1alpha1/clustersummaries/for-src":
			_ = json.NewEncoder(w).Encode(summary)
		case "/api/v1/namespaces/shop/pods":
			_ = json.NewEncoder(w).Encode(corev1.PodList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PodList"}})
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["away"] = &clientcmdapi.Cluster{Server: srv.URL, CertificateAuthorityData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})}
	kc.AuthInfos["src"] = &clientcmdapi.AuthInfo{Token: "token"}
	kc.Contexts["away"] = &clientcmdapi.Context{Cluster: "away", AuthInfo: "src"}
	kc.CurrentContext = "away"
	kubeconfigData, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: DefaultAgentNamespace, Name: "away"},
		Data:       map[string][]byte{"kubeconfig": kubeconfigData, protocol.InvitationSummaryKey: []byte("for-src")},
	}
	away := &v1alpha1.ClusterTarget{
		ObjectMeta: metav1.ObjectMeta{Name: "away"},
		Spec:       v1alpha1.ClusterTargetSpec{KubeconfigSecretRef: &v1alpha1.SecretKeyRef{LocalSecretKeyRef: v1alpha1.LocalSecretKeyRef{Name: "away"}}},
		Status:     v1alpha1.TargetStatus{Conditions: []metav1.Condition{{Type: v1alpha1.TargetReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonConnected}}},
	}

	saved, err := json.Marshal(corev1.PodSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
			{Key: protocol.DefaultCapacityNodeLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{protocol.CapacitySpot}},
		}}},
	}}}})
	if err != nil {
		t.Fatal(err)
	}
	source := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-new", UID: "uid-new", Annotations: map[string]string{protocol.SourceSpecAnnotation: string(saved)}},
		Spec:       corev1.PodSpec{SchedulerName: protocol.SourceSchedulerName},
	}
	c := &clients{
		where: "test", namespace: "shop",
		kube: kubefake.NewClientset(source, secret),
		cr:   crfake.NewClientBuilder().WithScheme(scheme).WithObjects(away).WithStatusSubresource(away).Build(),
	}
	e, err := explain(t.Context(), c, &explainOptions{agentNamespace: DefaultAgentNamespace}, source.Name)
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Targets) != 1 {
		t.Fatalf("answers %+v, want one", e.Targets)
	}
	a := e.Targets[0]
	if want := "no node with " + protocol.DefaultCapacityNodeLabel + " in [spot] (its nodes have on-demand)"; a.LeftOut != want {
		t.Errorf("away left out %q (answer %s: %s), want %q", a.LeftOut, a.Answer, a.Reason, want)
	}
}
