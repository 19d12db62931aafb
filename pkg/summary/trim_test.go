package summary

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func trimmedPod(t *testing.T, p *corev1.Pod) *PodUsage {
	t.Helper()
	out, err := TrimPod(p.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	return out.(*PodUsage)
}

func trimmedNode(t *testing.T, n *corev1.Node) *corev1.Node {
	t.Helper()
	out, err := TrimNode(n.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	return out.(*corev1.Node)
}

// TestTrimPod checks that the cache keeps of a pod its key, version, node
// and what it takes there, including what only its status or its init
// containers tell, and that it keeps the usage as it is.
func TestTrimPod(t *testing.T) {
	resizing := func(p *corev1.Pod) {
		// Resized down from 2 cpu to 1; the kubelet still holds 2.
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{
			Name:               "app",
			AllocatedResources: requests("2", "1Gi"),
			Resources:          &corev1.ResourceRequirements{Requests: requests("2", "1Gi")},
		}}
	}
	podLevel := func(p *corev1.Pod) {
		p.Spec.Resources = &corev1.ResourceRequirements{Requests: requests("3", "3Gi")}
	}
	tests := []struct {
		name string
		pod  *corev1.Pod
		want Amounts
	}{
		{"plain", pod("n1", "1", "1Gi"), Amounts{cpu: 1000, memory: 1 << 30, pods: 1}},
		{"best effort", pod("n1", "", ""), Amounts{pods: 1}},
		{"init and overhead", pod("n1", "1", "1Gi", withInit("2", "512Mi", false), withOverhead("50m", "64Mi")), Amounts{cpu: 2050, memory: (1024 + 64) << 20, pods: 1}},
		{"sidecar", pod("n1", "1", "1Gi", withInit("250m", "128Mi", true)), Amounts{cpu: 1250, memory: (1024 + 128) << 20, pods: 1}},
		{"resized down, not yet released", pod("n1", "1", "1Gi", resizing), Amounts{cpu: 2000, memory: 1 << 30, pods: 1}},
		{"pod-level requests", pod("n1", "1", "1Gi", podLevel), Amounts{cpu: 3000, memory: 3 << 30, pods: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.pod.ResourceVersion = "7"
			got := trimmedPod(t, tc.pod)
			want := &PodUsage{namespace: "ns", name: tc.pod.Name, resourceVersion: "7", nodeName: "n1", requested: tc.want}
			if *got != *want {
				t.Errorf("TrimPod = %+v, want %+v", *got, *want)
			}
			if again, _ := TrimPod(got); again != got {
				t.Errorf("TrimPod changed a usage: %+v", again)
			}
		})
	}
	if got := trimmedPod(t, pod("n1", "1", "1Gi", withPhase(corev1.PodSucceeded))); !got.ended {
		t.Error("a pod that succeeded is not marked ended")
	}
	if got, _ := TrimPod("not a pod"); got != "not a pod" {
		t.Errorf("TrimPod changed a non-pod: %v", got)
	}
}

// TestPodUsageInAStore checks that the informer can key a usage and tell an
// update from a resync.
func TestPodUsageInAStore(t *testing.T) {
	u := trimmedPod(t, pod("n1", "1", "1Gi", func(p *corev1.Pod) { p.ResourceVersion = "9" }))
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(u)
	if err != nil || key != "ns/"+u.name {
		t.Fatalf("key %q, %v; want ns/%s", key, err, u.name)
	}
	m, err := meta.Accessor(u)
	if err != nil || m.GetResourceVersion() != "9" {
		t.Fatalf("resourceVersion %v, %v; want 9", m, err)
	}
}

func TestTrimNode(t *testing.T) {
	n := node("n1", withTaint(corev1.TaintEffectNoSchedule), withTaint(corev1.TaintEffectPreferNoSchedule))
	n.Annotations = map[string]string{"big": "annotation"}
	n.Status.Allocatable["ephemeral-storage"] = resource.MustParse("100Gi")
	n.Status.Capacity = rl("4", "8Gi", "10")
	n.Status.Conditions[1].LastHeartbeatTime = metav1.Now()
	n.Status.Conditions[1].Message = "kubelet is posting ready status"
	n.Status.Images = []corev1.ContainerImage{{Names: []string{"app:1"}, SizeBytes: 1 << 30}}
	want := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: n.Labels},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: "example.com/t", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{
			Allocatable: rl("4", "8Gi", "10"),
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
	trimmed := trimmedNode(t, n)
	if diff := cmp.Diff(want, trimmed, quantities); diff != "" {
		t.Errorf("trimmed node (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(trimmed, trimmedNode(t, trimmed), quantities); diff != "" {
		t.Errorf("trimming a trimmed node changed it (-once +twice):\n%s", diff)
	}
}

// TestAggregateOfTrimmed checks that the caches' trimmed objects aggregate
// to the same summary as whole ones.
func TestAggregateOfTrimmed(t *testing.T) {
	nodes := []*corev1.Node{
		node("n1"),
		node("n2", withLabel(corev1.LabelTopologyZone, "b"), withTaint(corev1.TaintEffectPreferNoSchedule)),
		node("n3", withTaint(corev1.TaintEffectNoExecute)),
		node("n4", withReady(corev1.ConditionFalse)),
	}
	pods := []*corev1.Pod{
		pod("n1", "1", "1Gi", withInit("2", "512Mi", false), withOverhead("50m", "64Mi")),
		pod("n2", "250m", "", withInit("250m", "128Mi", true)),
		pod("n2", "", ""),
		pod("n3", "1", "1Gi"),
		pod("n1", "3", "3Gi", withPhase(corev1.PodFailed)),
	}
	var trimmedNodes []*corev1.Node
	for _, n := range nodes {
		trimmedNodes = append(trimmedNodes, trimmedNode(t, n))
	}
	var usages []*PodUsage
	for _, p := range pods {
		usages = append(usages, trimmedPod(t, p))
	}
	want := Aggregate(nodes, pods, DefaultTopologyKeys)
	if diff := cmp.Diff(want, aggregate(trimmedNodes, usages, DefaultTopologyKeys), quantities); diff != "" {
		t.Errorf("aggregate of trimmed objects (-whole +trimmed):\n%s", diff)
	}
}

func TestChanged(t *testing.T) {
	base := trimmedPod(t, pod("n1", "1", "1Gi"))
	statusOnly := pod("n1", "1", "1Gi")
	statusOnly.Status.PodIP = "10.0.0.2"
	statusOnly.ResourceVersion = "2"
	if podChanged(base, trimmedPod(t, statusOnly)) {
		t.Error("a pod update that changes no request, node or phase counts as a change")
	}
	for name, p := range map[string]*corev1.Pod{
		"node":     pod("n2", "1", "1Gi"),
		"phase":    pod("n1", "1", "1Gi", withPhase(corev1.PodSucceeded)),
		"requests": pod("n1", "2", "1Gi"),
	} {
		p.Name = base.name
		if !podChanged(base, trimmedPod(t, p)) {
			t.Errorf("a pod update of its %s does not count as a change", name)
		}
	}

	baseNode := trimmedNode(t, node("n1"))
	heartbeat := node("n1")
	heartbeat.ResourceVersion = "2"
	heartbeat.Status.Conditions[1].LastHeartbeatTime = metav1.Now()
	heartbeat.Status.Images = []corev1.ContainerImage{{Names: []string{"app:1"}}}
	if nodeChanged(baseNode, trimmedNode(t, heartbeat)) {
		t.Error("a node heartbeat counts as a change")
	}
	for name, n := range map[string]*corev1.Node{
		"label":       node("n1", withLabel("pool", "x")),
		"taint":       node("n1", withTaint(corev1.TaintEffectNoSchedule)),
		"readiness":   node("n1", withReady(corev1.ConditionFalse)),
		"allocatable": node("n1", withAllocatable("8", "8Gi", "10")),
	} {
		if !nodeChanged(baseNode, trimmedNode(t, n)) {
			t.Errorf("a node update of its %s does not count as a change", name)
		}
	}
}
