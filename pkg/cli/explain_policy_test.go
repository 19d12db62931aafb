package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/placementpolicy"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

const (
	testRegion = "topology.kubernetes.io/region"
	testZone   = "topology.kubernetes.io/zone"
)

// replica is a source pod of the ReplicaSet web-5d8f of Deployment web,
// placed on node (a virtual node) or elected into target.
func replica(uid, node, elected string) corev1.Pod {
	p := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "shop", Name: "web-" + uid, UID: types.UID(uid),
			Labels:          map[string]string{"app": "web", "pod-template-hash": "5d8f", protocol.ElectLabel: "true"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-5d8f", Controller: ptr.To(true)}},
			// Admitted by the webhook: what its candidates run is saved.
			Annotations: map[string]string{protocol.OriginalFieldsAnnotation: `{"schedulerName":"default-scheduler"}`},
		},
		Spec: corev1.PodSpec{SchedulerName: protocol.SourceSchedulerName, NodeName: node},
	}
	if elected != "" {
		p.Annotations[protocol.ElectionAnnotation] = protocol.Election{Generation: 1, Target: elected, Nonce: "n"}.Encode()
	}
	return p
}

// view is a target that publishes no summary, its labels its own (as its
// virtual node's).
func view(name, region, zone string, extra map[string]string) policyView {
	labels := map[string]string{testRegion: region, testZone: zone}
	for k, v := range extra {
		labels[k] = v
	}
	return policyView{target: targetInfo{name: name, virtualNode: "flotilla-" + name, labels: labels}, labels: labels}
}

// TestExplainPolicy judges the targets of a pending pod as the agent's
// fan-out would: c5 is not selected, c4 is in a fallback group not needed,
// and the zone spread (two siblings in us-east-1a, one elected in
// us-west-1a) excludes c1 under DoNotSchedule, and the region spread
// favours c3.
func TestExplainPolicy(t *testing.T) {
	pol := v1alpha1.PlacementPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
		Spec: v1alpha1.PlacementPolicySpec{
			PodSelector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			ClusterSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "provider", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"retired"}}}},
			ClusterAffinity: &v1alpha1.ClusterAffinity{FallbackGroups: []metav1.LabelSelector{
				{MatchLabels: map[string]string{"site": "campus"}},
				{},
			}},
			SpreadConstraints: []v1alpha1.SpreadConstraint{
				{TopologyKey: testRegion, MaxSkew: 1, WhenUnsatisfiable: v1alpha1.ScheduleAnyway},
				{TopologyKey: testZone, MaxSkew: 1, WhenUnsatisfiable: v1alpha1.DoNotSchedule},
			},
		},
	}
	campus := map[string]string{"site": "campus"}
	views := []policyView{
		view("c1", "us-east", "us-east-1a", campus),
		view("c2", "us-east", "us-east-1b", campus),
		view("c3", "us-west", "us-west-1a", campus),
		view("c4", "us-west", "us-west-1b", nil),
		view("c5", "us-west", "us-west-1b", map[string]string{"provider": "retired"}),
	}
	pod := replica("me", "", "")
	siblings := []corev1.Pod{
		replica("a", "flotilla-c1", ""),
		replica("b", "flotilla-c1", ""),
		replica("c", "", "c3"),
		pod,                  // itself: not counted
		replica("d", "", ""), // not placed: not counted
		func() corev1.Pod {
			p := replica("e", "flotilla-c2", "")
			p.OwnerReferences[0].Name = "other-5d8f"
			return p
		}(), // another workload
	}
	answers := []Answer{{Target: "c1"}, {Target: "c2"}, {Target: "c3"}, {Target: "c4"}, {Target: "c5"}}
	pe := explainPolicy(&pod, placementpolicy.Resolved{Policy: &pol}, views, nil, siblings, answers)

	wantPolicy := &PolicyExplanation{
		Name:     "web",
		Spread:   []string{testRegion + " maxSkew 1 ScheduleAnyway", testZone + " maxSkew 1 DoNotSchedule"},
		Siblings: map[string]int{"us-east/us-east-1a": 2, "us-west/us-west-1a": 1},
	}
	if diff := cmp.Diff(wantPolicy, pe); diff != "" {
		t.Errorf("policy (-want +got):\n%s", diff)
	}
	verdicts := map[string]string{}
	for _, a := range answers {
		verdicts[a.Target] = a.Policy
	}
	for name, want := range map[string]string{
		"c1": "excluded: spread: ",
		"c2": "selected",
		"c3": "selected",
		"c4": "excluded: in fallback group 2",
		"c5": "excluded: ",
	} {
		if !strings.HasPrefix(verdicts[name], want) {
			t.Errorf("%s: %q, want it to start with %q", name, verdicts[name], want)
		}
	}
	if !strings.Contains(verdicts["c1"], "maxSkew 1") {
		t.Errorf("c1's exclusion %q does not give the skew", verdicts["c1"])
	}
	// Region first: us-west has one sibling against us-east's two, so
	// c3 (us-west-1a) outranks c2 (us-east-1b) though its zone is not empty.
	if answers[1].Bonus == nil || answers[2].Bonus == nil || *answers[2].Bonus <= *answers[1].Bonus {
		t.Errorf("bonus c2 %v, c3 %v: want c3's higher", ptr.Deref(answers[1].Bonus, -999), ptr.Deref(answers[2].Bonus, -999))
	}
	if answers[1].Domain != "us-east/us-east-1b" || answers[0].Domain != "us-east/us-east-1a" {
		t.Errorf("c1 counts in %q, c2 in %q", answers[0].Domain, answers[1].Domain)
	}

	// The earlier group all unschedulable: the fallback group is used.
	answers = []Answer{{Target: "c1", Answer: AnswerUnschedulable}, {Target: "c2", Answer: AnswerUnschedulable}, {Target: "c3", Answer: AnswerUnschedulable}, {Target: "c4"}, {Target: "c5"}}
	explainPolicy(&pod, placementpolicy.Resolved{Policy: &pol}, views, nil, siblings, answers)
	if answers[3].Policy != "selected" {
		t.Errorf("c4 with the first group unschedulable: %q, want selected", answers[3].Policy)
	}

	// One target of the earlier group silent (its candidate overdue), the
	// others unschedulable: the fallback group is used, as the agent does;
	// not while the silent target's candidate is within its time.
	for _, overdue := range []bool{true, false} {
		answers = []Answer{{Target: "c1", Answer: AnswerUnschedulable}, {Target: "c2", Answer: AnswerWaiting, Overdue: overdue}, {Target: "c3", Answer: AnswerUnschedulable}, {Target: "c4"}, {Target: "c5"}}
		explainPolicy(&pod, placementpolicy.Resolved{Policy: &pol}, views, nil, siblings, answers)
		if got := answers[3].Policy == "selected"; got != overdue {
			t.Errorf("c4 with c2's candidate overdue %t: %q", overdue, answers[3].Policy)
		}
	}

	// A problem: the pod is placed as if no policy applied.
	pe = explainPolicy(&pod, placementpolicy.Resolved{Problem: "two policies"}, views, nil, siblings, answers)
	if pe == nil || pe.Problem != "two policies" {
		t.Errorf("problem: %+v", pe)
	}
	if explainPolicy(&pod, placementpolicy.Resolved{}, views, nil, siblings, answers) != nil {
		t.Error("no policy: want nil")
	}
}

func TestCapacityPlace(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{protocol.CapacityTypeLabel: protocol.CapacityOnDemand, protocol.OnDemandSlotLabel: "2"}},
		Spec: corev1.PodSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{
				{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "example.com/lifecycle", Operator: corev1.NodeSelectorOpIn, Values: []string{"normal"}}, {Key: "disk", Operator: corev1.NodeSelectorOpIn, Values: []string{"ssd"}}}},
				{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "example.com/lifecycle", Operator: corev1.NodeSelectorOpIn, Values: []string{"normal"}}}},
			},
		}}}},
	}
	got := capacityPlace(pod, protocol.DefaultCapacityNodeLabel, "example.com/lifecycle")
	want := &CapacityPlace{Type: protocol.CapacityOnDemand, Slot: "2", Requires: "example.com/lifecycle In [normal]"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if capacityPlace(&corev1.Pod{}) != nil {
		t.Error("a pod the split did not place: want nil")
	}
}

func TestWriteExplanationPolicy(t *testing.T) {
	bonus := int64(120)
	e := &Explanation{
		Pod: "shop/web-1", UID: "u", Phase: "Pending", SourcePod: true,
		Policy:   &PolicyExplanation{Name: "web", Spread: []string{testZone + " maxSkew 1 DoNotSchedule"}, Siblings: map[string]int{"us-east-1a": 2}},
		Capacity: &CapacityPlace{Type: "spot", Requires: "node.kubernetes.io/capacity In [spot]"},
		Targets: []Answer{
			{Target: "c1", Answer: AnswerNoCandidate, Policy: "excluded: spread: would have 3 pods against 0 (maxSkew 1)", Domain: "us-east-1a"},
			{Target: "c2", Answer: AnswerReserved, Node: "n", Policy: "selected", Bonus: &bonus, Domain: "us-east-1b"},
		},
		Events: []EventSummary{},
	}
	var b bytes.Buffer
	if err := writeExplanation(&b, e, "text", time.Now()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"Policy:    PlacementPolicy web, spread by " + testZone + " maxSkew 1 DoNotSchedule",
		"Siblings:  us-east-1a: 2",
		"Capacity:  spot, requires node.kubernetes.io/capacity In [spot]",
		"DOMAIN", "excluded: spread: would have 3 pods", "selected (+120)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestExplainCountsSiblingsWhereTheyRun: in a target spanning several
// zones, a sibling counts in the zone of the node its target reported at
// the election, not as unknown.
func TestExplainCountsSiblingsWhereTheyRun(t *testing.T) {
	pol := v1alpha1.PlacementPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
		Spec: v1alpha1.PlacementPolicySpec{
			PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			SpreadConstraints: []v1alpha1.SpreadConstraint{
				{TopologyKey: testRegion, MaxSkew: 1, WhenUnsatisfiable: v1alpha1.DoNotSchedule},
				{TopologyKey: testZone, MaxSkew: 1, WhenUnsatisfiable: v1alpha1.DoNotSchedule},
			},
		},
	}
	wide := policyView{target: targetInfo{name: "wide", virtualNode: "flotilla-wide"}, labels: map[string]string{testRegion: "eu"}}
	in := func(p corev1.Pod, zone string) corev1.Pod {
		p.Annotations[protocol.ElectedDomainAnnotation] = protocol.EncodeDomain(map[string]string{testRegion: "eu", testZone: zone})
		return p
	}
	pod := replica("me", "", "")
	siblings := []corev1.Pod{
		in(replica("a", "flotilla-wide", ""), "eu-1a"),
		in(replica("b", "", "wide"), "eu-1b"),
		in(replica("c", "flotilla-wide", ""), "eu-1b"),
		replica("d", "flotilla-wide", ""), // no node reported: the target's labels only
	}
	pe := explainPolicy(&pod, placementpolicy.Resolved{Policy: &pol}, []policyView{wide}, nil, siblings, []Answer{{Target: "wide"}})
	if want := map[string]int{"eu/eu-1a": 1, "eu/eu-1b": 2, "eu/(none)": 1}; !cmp.Equal(pe.Siblings, want) {
		t.Errorf("siblings %v, want %v", pe.Siblings, want)
	}
}

// TestExplainShowsWhereTheElectedPodRuns: the elected target's DOMAIN is
// that of the node its target reported at the election (the pod's
// elected-domain annotation), before the domain its candidate was pinned
// to or the target's labels; without a readable report, those stand.
func TestExplainShowsWhereTheElectedPodRuns(t *testing.T) {
	pol := v1alpha1.PlacementPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
		Spec: v1alpha1.PlacementPolicySpec{
			PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			SpreadConstraints: []v1alpha1.SpreadConstraint{
				{TopologyKey: testRegion, MaxSkew: 1, WhenUnsatisfiable: v1alpha1.ScheduleAnyway},
				{TopologyKey: testZone, MaxSkew: 1, WhenUnsatisfiable: v1alpha1.ScheduleAnyway},
			},
		},
	}
	// wide spans two zones of eu; one is in us-east-1a only.
	wide := policyView{target: targetInfo{name: "wide", virtualNode: "flotilla-wide", labels: map[string]string{testRegion: "eu"}}, labels: map[string]string{testRegion: "eu"}}
	one := view("one", "us-east", "us-east-1a", nil)
	reportedIn := func(zone string) string {
		return protocol.EncodeDomain(map[string]string{testRegion: "elsewhere", testZone: zone})
	}
	for _, tc := range []struct {
		name     string
		elected  string
		reported string // the pod's elected-domain annotation
		answers  []Answer
		want     map[string]string // target: DOMAIN
	}{
		{
			name: "reported zone, not the pinned one", elected: "wide", reported: reportedIn("eu-1b"),
			answers: []Answer{{Target: "wide", Elected: true, Domain: "eu/eu-1a"}, {Target: "one"}},
			want:    map[string]string{"wide": "eu/eu-1b", "one": "us-east/us-east-1a"},
		},
		{
			name: "reported, no candidate pinned", elected: "wide", reported: reportedIn("eu-1a"),
			answers: []Answer{{Target: "wide", Elected: true}, {Target: "one"}},
			want:    map[string]string{"wide": "eu/eu-1a", "one": "us-east/us-east-1a"},
		},
		{
			name: "the target's own labels win over the report", elected: "one", reported: reportedIn("us-east-1c"),
			answers: []Answer{{Target: "wide", Domain: "eu/eu-1a"}, {Target: "one", Elected: true}},
			want:    map[string]string{"wide": "eu/eu-1a", "one": "us-east/us-east-1a"},
		},
		{
			name: "nothing reported: the pin", elected: "wide",
			answers: []Answer{{Target: "wide", Elected: true, Domain: "eu/eu-1a"}, {Target: "one"}},
			want:    map[string]string{"wide": "eu/eu-1a", "one": "us-east/us-east-1a"},
		},
		{
			name: "an unreadable report: the pin", elected: "wide", reported: `{"zone":`,
			answers: []Answer{{Target: "wide", Elected: true, Domain: "eu/eu-1a"}, {Target: "one"}},
			want:    map[string]string{"wide": "eu/eu-1a", "one": "us-east/us-east-1a"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := replica("me", "", tc.elected)
			if tc.reported != "" {
				pod.Annotations[protocol.ElectedDomainAnnotation] = tc.reported
			}
			explainPolicy(&pod, placementpolicy.Resolved{Policy: &pol}, []policyView{wide, one}, nil, nil, tc.answers)
			got := map[string]string{}
			for _, a := range tc.answers {
				got[a.Target] = a.Domain
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("DOMAIN (-want +got):\n%s", diff)
			}
		})
	}
}
