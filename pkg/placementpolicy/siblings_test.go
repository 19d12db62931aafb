package placementpolicy

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/placement"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

const regionKey = "topology.kubernetes.io/region"

// webPod is a source pod of Deployment web (its ReplicaSet web-5d8f), as
// the webhook admits it.
func webPod(uid string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "shop", Name: "web-" + uid, UID: types.UID(uid),
			Labels:          map[string]string{"app": "web", "pod-template-hash": "5d8f", protocol.ElectLabel: "true"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-5d8f", Controller: ptr.To(true)}},
			Annotations:     map[string]string{protocol.OriginalFieldsAnnotation: `{"schedulerName":"default-scheduler"}`},
		},
		Spec: corev1.PodSpec{SchedulerName: protocol.SourceSchedulerName},
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

// TestCounts: which pods a spread counts among a pod's siblings.
func TestCounts(t *testing.T) {
	pod := webPod("me")
	now := metav1.Now()
	for _, tc := range []struct {
		name    string
		sibling *corev1.Pod
		want    bool
	}{
		{"a source pod of the workload", webPod("a"), true},
		{"of another ReplicaSet of the Deployment", webPod("a", func(p *corev1.Pod) {
			p.Labels["pod-template-hash"], p.OwnerReferences[0].Name = "77aa", "web-77aa"
		}), true},
		{"running", webPod("a", func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning }), true},
		// explain listed only the pods labelled elect=true; the agent
		// never read the label after admission.
		{"its elect label removed after admission", webPod("a", func(p *corev1.Pod) { delete(p.Labels, protocol.ElectLabel) }), true},
		{"the pod itself", webPod("me"), false},
		{"being deleted", webPod("a", func(p *corev1.Pod) { p.DeletionTimestamp = &now }), false},
		{"succeeded", webPod("a", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }), false},
		{"failed", webPod("a", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }), false},
		{"another workload", webPod("a", func(p *corev1.Pod) { p.OwnerReferences[0].Name = "db-5d8f" }), false},
		{"no workload", webPod("a", func(p *corev1.Pod) { p.OwnerReferences = nil }), false},
		{"a candidate beside its source pod (a self target's)", webPod("a", func(p *corev1.Pod) { p.Spec.SchedulerName = "flotilla" }), false},
		// explain counted any pod of the source scheduler's name; the
		// agent only those the webhook admitted.
		{"the source scheduler's name, not admitted by the webhook", webPod("a", func(p *corev1.Pod) {
			delete(p.Annotations, protocol.OriginalFieldsAnnotation)
		}), false},
		{"admitted before original fields (a whole saved spec)", webPod("a", func(p *corev1.Pod) {
			delete(p.Annotations, protocol.OriginalFieldsAnnotation)
			p.Annotations[protocol.SourceSpecAnnotation] = `{"containers":[]}`
		}), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Counts(pod, tc.sibling); got != tc.want {
				t.Errorf("counts: %v, want %v", got, tc.want)
			}
		})
	}
	if Counts(webPod("me", func(p *corev1.Pod) { p.OwnerReferences = nil }), webPod("a")) {
		t.Error("a pod of no workload has no siblings, but one was counted")
	}
}

func summaryOf(keys ...string) *v1alpha1.ClusterSummaryStatus {
	s := &v1alpha1.ClusterSummaryStatus{}
	for _, k := range keys {
		s.Topology = append(s.Topology, v1alpha1.TopologySummary{Key: k})
	}
	return s
}

// TestNodeDomain: the domain of a node its target reported, key by key.
func TestNodeDomain(t *testing.T) {
	const rack = "example.com/rack"
	keys := []string{regionKey, zoneKey, rack}
	summarized := summaryOf(regionKey, zoneKey)
	for _, tc := range []struct {
		name     string
		own      map[string]string
		common   map[string]string
		summary  *v1alpha1.ClusterSummaryStatus
		reported map[string]string
		want     placement.Domain
	}{
		{
			name:     "the node's values of the keys the target reports, the common value of the others",
			common:   map[string]string{rack: "r7", zoneKey: "common-zone"},
			summary:  summarized,
			reported: map[string]string{regionKey: "eu", zoneKey: "eu-1b"},
			want:     placement.Domain{"eu", "eu-1b", "r7"},
		},
		{
			name:     "a node without the zone label is in no zone, whatever its neighbours have",
			common:   map[string]string{zoneKey: "eu-1a"},
			summary:  summarized,
			reported: map[string]string{regionKey: "eu"},
			want:     placement.Domain{"eu", "", ""},
		},
		{
			name:     "the Target's own labels win, as on its virtual node",
			own:      map[string]string{regionKey: "on-prem"},
			common:   map[string]string{regionKey: "on-prem"},
			summary:  summarized,
			reported: map[string]string{regionKey: "eu", zoneKey: "eu-1b"},
			want:     placement.Domain{"on-prem", "eu-1b", ""},
		},
		{
			// explain took any label of the virtual node before the
			// report; the agent only the Target's own.
			name:     "a label common to the nodes that the report contradicts: the report",
			common:   map[string]string{zoneKey: "eu-1a", rack: "r7"},
			summary:  summaryOf(regionKey),
			reported: map[string]string{zoneKey: "eu-1b", rack: "r9"},
			want:     placement.Domain{"", "eu-1b", "r9"},
		},
		{
			name:     "no summary (a self target): what the scheduler left out the node lacks",
			common:   map[string]string{rack: "r7"},
			reported: map[string]string{zoneKey: "a"},
			want:     placement.Domain{"", "a", ""},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := PlaceOf(placement.Cluster{Name: "t", Labels: tc.common}, tc.own, tc.summary, keys)
			if got := p.NodeDomain(tc.reported); !slices.Equal(got, tc.want) {
				t.Errorf("domain %q, want %q", got, tc.want)
			}
		})
	}
}

// TestTally: where each sibling counts, and which count nowhere.
func TestTally(t *testing.T) {
	keys := []string{zoneKey}
	places := map[string]Place{
		// one zone, from its labels.
		"one": PlaceOf(placement.Cluster{Name: "one", Labels: map[string]string{zoneKey: "a"}}, nil, nil, keys),
		// two zones, from its summary.
		"wide": PlaceOf(placement.Cluster{Name: "wide", Labels: map[string]string{}, Topology: map[string][]string{zoneKey: {"b", "c"}}}, nil, summaryOf(zoneKey), keys),
		// no zone label, but a summary whose nodes are all in zone d:
		// explain, which read no summary, counted its pods in no zone.
		"summarized": PlaceOf(placement.Cluster{Name: "summarized", Labels: map[string]string{}, Topology: map[string][]string{zoneKey: {"d"}}}, nil, summaryOf(zoneKey), keys),
	}
	for _, tc := range []struct {
		name    string
		sibling Sibling
		want    placement.Domain // nil: counted nowhere
		unknown bool
	}{
		{name: "reported", sibling: Sibling{Target: "wide", Reported: map[string]string{zoneKey: "c"}}, want: placement.Domain{"c"}},
		{name: "reported, the pin aside", sibling: Sibling{Target: "wide", Reported: map[string]string{zoneKey: "c"}, Pinned: []string{"b"}}, want: placement.Domain{"c"}},
		{name: "not reported, the target's only zone", sibling: Sibling{Target: "one"}, want: placement.Domain{"a"}},
		{name: "not reported, the only zone its summary lists", sibling: Sibling{Target: "summarized"}, want: placement.Domain{"d"}},
		{name: "not reported, the only zone before the pin", sibling: Sibling{Target: "one", Pinned: []string{"x"}}, want: placement.Domain{"a"}},
		// explain counted such a sibling nowhere (it reads no sibling's
		// candidate); the agent counts it where it was pinned.
		{name: "not reported, several zones: the pin", sibling: Sibling{Target: "wide", Pinned: []string{"b"}}, want: placement.Domain{"b"}},
		{name: "not reported, several zones, no pin", sibling: Sibling{Target: "wide"}, unknown: true},
		{name: "a pin of other keys", sibling: Sibling{Target: "wide", Pinned: []string{"eu", "b"}}, unknown: true},
		{name: "in a target the count does not know", sibling: Sibling{Target: "gone", Reported: map[string]string{zoneKey: "a"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			placed, unknown := Tally([]Sibling{tc.sibling}, places)
			var got placement.Domain
			if len(placed) == 1 {
				got = placed[0]
			}
			if len(placed) > 1 || !slices.Equal(got, tc.want) || (got == nil) != (tc.want == nil) {
				t.Errorf("counted in %q, want %q", placed, tc.want)
			}
			if (unknown == 1) != tc.unknown || unknown > 1 {
				t.Errorf("unknown %d, want %v", unknown, tc.unknown)
			}
		})
	}
}

func TestReportedDomain(t *testing.T) {
	if d := ReportedDomain(""); d != nil {
		t.Errorf("nothing recorded: %v, want nil", d)
	}
	if d := ReportedDomain(`{"zone":`); d != nil {
		t.Errorf("unreadable: %v, want nil", d)
	}
	if d := ReportedDomain("{}"); d != nil {
		t.Errorf("an empty report: %v, want nil (none)", d)
	}
	if d := ReportedDomain(protocol.EncodeDomain(map[string]string{zoneKey: "a"})); d[zoneKey] != "a" {
		t.Errorf("zone a: %v", d)
	}
}
