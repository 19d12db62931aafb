package summary

import (
	"encoding/json"
	"math/rand"
	"runtime"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// quantities compare by value: "1Gi" and "1024Mi" are the same memory.
var quantities = cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })

func rl(cpu, memory, pods string) corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse(cpu),
		corev1.ResourceMemory: resource.MustParse(memory),
		corev1.ResourcePods:   resource.MustParse(pods),
	}
}

// node is a Ready node with 4 cpu, 8Gi and 10 pods in zone a, region r.
func node(name string, mutate ...func(*corev1.Node)) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			corev1.LabelHostname:                 name,
			corev1.LabelTopologyRegion:           "r",
			corev1.LabelTopologyZone:             "a",
			"node.k8s.amazonaws.com/instance-id": "i-" + name,
		}},
		Status: corev1.NodeStatus{
			Allocatable: rl("4", "8Gi", "10"),
			Conditions: []corev1.NodeCondition{
				{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse},
				{Type: corev1.NodeReady, Status: corev1.ConditionTrue},
			},
		},
	}
	for _, m := range mutate {
		m(n)
	}
	return n
}

func withLabel(k, v string) func(*corev1.Node) {
	return func(n *corev1.Node) { n.Labels[k] = v }
}

func withoutLabel(k string) func(*corev1.Node) {
	return func(n *corev1.Node) { delete(n.Labels, k) }
}

func withTaint(effect corev1.TaintEffect) func(*corev1.Node) {
	return func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "example.com/t", Effect: effect})
	}
}

func withReady(s corev1.ConditionStatus) func(*corev1.Node) {
	return func(n *corev1.Node) { n.Status.Conditions[1].Status = s }
}

func withAllocatable(cpu, memory, pods string) func(*corev1.Node) {
	return func(n *corev1.Node) { n.Status.Allocatable = rl(cpu, memory, pods) }
}

// pod is a running pod on a node with one container requesting cpu and
// memory ("" for none).
func pod(nodeName, cpu, memory string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p-" + nodeName + "-" + cpu + "-" + memory},
		Spec: corev1.PodSpec{
			NodeName:   nodeName,
			Containers: []corev1.Container{{Name: "app", Resources: corev1.ResourceRequirements{Requests: requests(cpu, memory)}}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

func requests(cpu, memory string) corev1.ResourceList {
	r := corev1.ResourceList{}
	if cpu != "" {
		r[corev1.ResourceCPU] = resource.MustParse(cpu)
	}
	if memory != "" {
		r[corev1.ResourceMemory] = resource.MustParse(memory)
	}
	return r
}

func withPhase(phase corev1.PodPhase) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Status.Phase = phase }
}

func withInit(cpu, memory string, sidecar bool) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		c := corev1.Container{Name: "init", Resources: corev1.ResourceRequirements{Requests: requests(cpu, memory)}}
		if sidecar {
			always := corev1.ContainerRestartPolicyAlways
			c.RestartPolicy = &always
		}
		p.Spec.InitContainers = append(p.Spec.InitContainers, c)
	}
}

func withOverhead(cpu, memory string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Spec.Overhead = requests(cpu, memory) }
}

func withContainer(cpu, memory string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "more", Resources: corev1.ResourceRequirements{Requests: requests(cpu, memory)}})
	}
}

func zone(values ...v1alpha1.TopologyValue) v1alpha1.TopologySummary {
	return v1alpha1.TopologySummary{Key: corev1.LabelTopologyZone, Values: values}
}

func region(values ...v1alpha1.TopologyValue) v1alpha1.TopologySummary {
	return v1alpha1.TopologySummary{Key: corev1.LabelTopologyRegion, Values: values}
}

var commonRA = map[string]string{corev1.LabelTopologyRegion: "r", corev1.LabelTopologyZone: "a"}

func TestAggregate(t *testing.T) {
	tests := []struct {
		name  string
		nodes []*corev1.Node
		pods  []*corev1.Pod
		keys  []string
		want  v1alpha1.ClusterSummaryStatus
		// ignoreTopology leaves Topology out of the comparison.
		ignoreTopology bool
	}{
		{
			name: "no nodes: an empty summary",
			pods: []*corev1.Pod{pod("n1", "1", "1Gi")},
		},
		{
			name:  "one idle node: everything free; its hostname and instance id are not common labels",
			nodes: []*corev1.Node{node("n1")},
			want: v1alpha1.ClusterSummaryStatus{
				Nodes: 1, Allocatable: rl("4", "8Gi", "10"), Free: rl("4", "8Gi", "10"), LargestFree: rl("4", "8Gi", "10"),
				CommonLabels: commonRA,
				Topology: []v1alpha1.TopologySummary{
					region(v1alpha1.TopologyValue{Value: "r", Nodes: 1, Free: rl("4", "8Gi", "10")}),
					zone(v1alpha1.TopologyValue{Value: "a", Nodes: 1, Free: rl("4", "8Gi", "10")}),
				},
				Domains: []v1alpha1.TopologyDomain{{Values: commonRA, Nodes: 1, Free: rl("4", "8Gi", "10")}},
			},
		},
		{
			name: "nodes that are not Ready, cordoned, tainted NoSchedule or NoExecute, or virtual do not count, nor their pods",
			nodes: []*corev1.Node{
				node("ok"),
				node("prefer", withTaint(corev1.TaintEffectPreferNoSchedule)),
				node("notready", withReady(corev1.ConditionFalse)),
				node("unknown", withReady(corev1.ConditionUnknown)),
				node("noready", func(n *corev1.Node) { n.Status.Conditions = n.Status.Conditions[:1] }),
				node("cordoned", func(n *corev1.Node) { n.Spec.Unschedulable = true }),
				node("noschedule", withTaint(corev1.TaintEffectNoSchedule)),
				node("noexecute", withTaint(corev1.TaintEffectNoExecute)),
				node("virtual", withLabel("type", "virtual-kubelet")),
			},
			pods: []*corev1.Pod{pod("notready", "1", "1Gi"), pod("virtual", "1", "1Gi")},
			keys: []string{},
			want: v1alpha1.ClusterSummaryStatus{
				Nodes: 2, Allocatable: rl("8", "16Gi", "20"), Free: rl("8", "16Gi", "20"), LargestFree: rl("4", "8Gi", "10"),
				CommonLabels: commonRA,
			},
		},
		{
			name:  "pods take their requests and one pod each; ended, unbound and foreign pods take nothing",
			nodes: []*corev1.Node{node("n1"), node("n2")},
			pods: []*corev1.Pod{
				pod("n1", "1500m", "1Gi"),
				pod("n1", "", ""), // BestEffort: still one pod
				pod("n2", "500m", "512Mi", withPhase(corev1.PodPending)),
				pod("n2", "2", "2Gi", withPhase(corev1.PodSucceeded)),
				pod("n2", "2", "2Gi", withPhase(corev1.PodFailed)),
				pod("", "2", "2Gi", withPhase(corev1.PodPending)),
				pod("elsewhere", "2", "2Gi"),
			},
			keys: []string{},
			want: v1alpha1.ClusterSummaryStatus{
				Nodes: 2, Allocatable: rl("8", "16Gi", "20"), Free: rl("6", "14848Mi", "17"), LargestFree: rl("3500m", "7680Mi", "9"),
				CommonLabels: commonRA,
			},
		},
		{
			name:  "effective request: max(sum of containers, any init container) plus overhead, as kube-scheduler",
			nodes: []*corev1.Node{node("n1")},
			pods: []*corev1.Pod{
				// containers 1+0.5 cpu, 1Gi; init 1 cpu, 3Gi: max is 1.5 cpu, 3Gi; overhead 100m, 100Mi.
				pod("n1", "1", "1Gi", withContainer("500m", ""), withInit("1", "3Gi", false), withOverhead("100m", "100Mi")),
			},
			keys: []string{},
			want: v1alpha1.ClusterSummaryStatus{
				Nodes: 1, Allocatable: rl("4", "8Gi", "10"),
				Free:         rl("2400m", "5020Mi", "9"),
				LargestFree:  rl("2400m", "5020Mi", "9"),
				CommonLabels: commonRA,
			},
		},
		{
			name:  "a sidecar (restartable init container) adds to the containers",
			nodes: []*corev1.Node{node("n1")},
			pods:  []*corev1.Pod{pod("n1", "1", "1Gi", withInit("500m", "512Mi", true))},
			keys:  []string{},
			want: v1alpha1.ClusterSummaryStatus{
				Nodes: 1, Allocatable: rl("4", "8Gi", "10"), Free: rl("2500m", "6656Mi", "9"), LargestFree: rl("2500m", "6656Mi", "9"),
				CommonLabels: commonRA,
			},
		},
		{
			name:  "an overcommitted node is free of nothing, and does not eat into another node's free",
			nodes: []*corev1.Node{node("n1"), node("n2")},
			pods:  []*corev1.Pod{pod("n1", "6", "10Gi"), pod("n1", "1", "1Gi")},
			keys:  []string{corev1.LabelTopologyZone},
			want: v1alpha1.ClusterSummaryStatus{
				Nodes: 2, Allocatable: rl("8", "16Gi", "20"), Free: rl("4", "8Gi", "18"), LargestFree: rl("4", "8Gi", "10"),
				CommonLabels: commonRA,
				Topology:     []v1alpha1.TopologySummary{zone(v1alpha1.TopologyValue{Value: "a", Nodes: 2, Free: rl("4", "8Gi", "18")})},
				Domains:      []v1alpha1.TopologyDomain{{Values: map[string]string{corev1.LabelTopologyZone: "a"}, Nodes: 2, Free: rl("4", "8Gi", "18")}},
			},
		},
		{
			name: "largest free is taken per resource, from different nodes",
			nodes: []*corev1.Node{
				node("cpu", withAllocatable("16", "4Gi", "10")),
				node("mem", withAllocatable("2", "64Gi", "10")),
				node("pods", withAllocatable("1", "1Gi", "250")),
			},
			keys: []string{},
			want: v1alpha1.ClusterSummaryStatus{
				Nodes: 3, Allocatable: rl("19", "69Gi", "270"), Free: rl("19", "69Gi", "270"), LargestFree: rl("16", "64Gi", "250"),
				CommonLabels: commonRA,
			},
		},
		{
			name: "common labels: a label one node lacks or has another value of is not common",
			nodes: []*corev1.Node{
				node("n1", withLabel("pool", "x"), withLabel("gpu", "no"), withLabel("only", "n1")),
				node("n2", withLabel("pool", "x"), withLabel("gpu", "yes"), withLabel(corev1.LabelTopologyZone, "b")),
			},
			keys: []string{},
			want: v1alpha1.ClusterSummaryStatus{
				Nodes: 2, Allocatable: rl("8", "16Gi", "20"), Free: rl("8", "16Gi", "20"), LargestFree: rl("4", "8Gi", "10"),
				CommonLabels: map[string]string{corev1.LabelTopologyRegion: "r", "pool": "x"},
			},
		},
		{
			name: "topology: keys in the order given (duplicates once), values sorted, nodes without the key left out, absent keys omitted",
			nodes: []*corev1.Node{
				node("n1", withLabel(corev1.LabelTopologyZone, "c"), withLabel(protocol.DefaultCapacityNodeLabel, "spot")),
				node("n2", withLabel(corev1.LabelTopologyZone, "b"), withLabel(protocol.DefaultCapacityNodeLabel, "on-demand")),
				node("n3", withLabel(corev1.LabelTopologyZone, "b"), withoutLabel(corev1.LabelTopologyRegion)),
			},
			pods: []*corev1.Pod{pod("n2", "1", "1Gi")},
			keys: []string{protocol.DefaultCapacityNodeLabel, corev1.LabelTopologyZone, "", "example.com/absent", corev1.LabelTopologyRegion, protocol.DefaultCapacityNodeLabel},
			want: v1alpha1.ClusterSummaryStatus{
				Nodes: 3, Allocatable: rl("12", "24Gi", "30"), Free: rl("11", "23Gi", "29"), LargestFree: rl("4", "8Gi", "10"),
				Topology: []v1alpha1.TopologySummary{
					{Key: protocol.DefaultCapacityNodeLabel, Values: []v1alpha1.TopologyValue{
						{Value: "on-demand", Nodes: 1, Free: rl("3", "7Gi", "9")},
						{Value: "spot", Nodes: 1, Free: rl("4", "8Gi", "10")},
					}},
					zone(
						v1alpha1.TopologyValue{Value: "b", Nodes: 2, Free: rl("7", "15Gi", "19")},
						v1alpha1.TopologyValue{Value: "c", Nodes: 1, Free: rl("4", "8Gi", "10")},
					),
					region(v1alpha1.TopologyValue{Value: "r", Nodes: 2, Free: rl("7", "15Gi", "19")}),
				},
				// In the keys' order: capacity, zone, region; a node
				// without a key's label sorts first.
				Domains: []v1alpha1.TopologyDomain{
					{Values: map[string]string{corev1.LabelTopologyZone: "b"}, Nodes: 1, Free: rl("4", "8Gi", "10")},
					{Values: map[string]string{protocol.DefaultCapacityNodeLabel: "on-demand", corev1.LabelTopologyZone: "b", corev1.LabelTopologyRegion: "r"}, Nodes: 1, Free: rl("3", "7Gi", "9")},
					{Values: map[string]string{protocol.DefaultCapacityNodeLabel: "spot", corev1.LabelTopologyZone: "c", corev1.LabelTopologyRegion: "r"}, Nodes: 1, Free: rl("4", "8Gi", "10")},
				},
			},
		},
		{
			name: "domains: the combinations nodes carry, not every pair of values; a node that takes no pods gives its own with none counted; virtual nodes none",
			nodes: []*corev1.Node{
				node("a-od", withLabel(protocol.DefaultCapacityNodeLabel, "on-demand")),
				node("a-od2", withLabel(protocol.DefaultCapacityNodeLabel, "on-demand")),
				node("b-spot", withLabel(corev1.LabelTopologyZone, "b"), withLabel(protocol.DefaultCapacityNodeLabel, "spot")),
				node("c-cordoned", withLabel(corev1.LabelTopologyZone, "c"), withLabel(protocol.DefaultCapacityNodeLabel, "spot"), func(n *corev1.Node) { n.Spec.Unschedulable = true }),
				node("b-notready", withLabel(corev1.LabelTopologyZone, "b"), withLabel(protocol.DefaultCapacityNodeLabel, "on-demand"), withReady(corev1.ConditionFalse)),
				node("d-virtual", withLabel(corev1.LabelTopologyZone, "d"), withLabel(protocol.DefaultCapacityNodeLabel, "spot"), withLabel("type", "virtual-kubelet")),
			},
			keys: []string{corev1.LabelTopologyZone, protocol.DefaultCapacityNodeLabel},
			want: v1alpha1.ClusterSummaryStatus{
				Nodes: 3, Allocatable: rl("12", "24Gi", "30"), Free: rl("12", "24Gi", "30"), LargestFree: rl("4", "8Gi", "10"),
				CommonLabels: map[string]string{corev1.LabelTopologyRegion: "r"},
				Topology: []v1alpha1.TopologySummary{
					zone(
						v1alpha1.TopologyValue{Value: "a", Nodes: 2, Free: rl("8", "16Gi", "20")},
						v1alpha1.TopologyValue{Value: "b", Nodes: 1, Free: rl("4", "8Gi", "10")},
					),
					{Key: protocol.DefaultCapacityNodeLabel, Values: []v1alpha1.TopologyValue{
						{Value: "on-demand", Nodes: 2, Free: rl("8", "16Gi", "20")},
						{Value: "spot", Nodes: 1, Free: rl("4", "8Gi", "10")},
					}},
				},
				Domains: []v1alpha1.TopologyDomain{
					{Values: map[string]string{corev1.LabelTopologyZone: "a", protocol.DefaultCapacityNodeLabel: "on-demand"}, Nodes: 2, Free: rl("8", "16Gi", "20")},
					{Values: map[string]string{corev1.LabelTopologyZone: "b", protocol.DefaultCapacityNodeLabel: "on-demand"}},
					{Values: map[string]string{corev1.LabelTopologyZone: "b", protocol.DefaultCapacityNodeLabel: "spot"}, Nodes: 1, Free: rl("4", "8Gi", "10")},
					{Values: map[string]string{corev1.LabelTopologyZone: "c", protocol.DefaultCapacityNodeLabel: "spot"}},
				},
			},
		},
		{
			name: "domains: more combinations than the bound give none",
			nodes: func() []*corev1.Node {
				var nodes []*corev1.Node
				for i := range MaxDomains + 1 {
					nodes = append(nodes, node("n"+itoa(i), withLabel(corev1.LabelTopologyZone, "z"+itoa(i%(MaxDomains/2+1))), withLabel(protocol.DefaultCapacityNodeLabel, []string{"spot", "on-demand"}[i%2])))
				}
				return nodes
			}(),
			keys: []string{corev1.LabelTopologyZone, protocol.DefaultCapacityNodeLabel},
			want: v1alpha1.ClusterSummaryStatus{
				Nodes:        MaxDomains + 1,
				Allocatable:  rl(itoa(4*(MaxDomains+1)), itoa(8*(MaxDomains+1))+"Gi", itoa(10*(MaxDomains+1))),
				Free:         rl(itoa(4*(MaxDomains+1)), itoa(8*(MaxDomains+1))+"Gi", itoa(10*(MaxDomains+1))),
				LargestFree:  rl("4", "8Gi", "10"),
				CommonLabels: map[string]string{corev1.LabelTopologyRegion: "r"},
			},
			ignoreTopology: true,
		},
		{
			name: "a topology key with a value per node beyond the bound is left out",
			nodes: func() []*corev1.Node {
				var nodes []*corev1.Node
				for i := range MaxTopologyValues + 1 {
					name := "n" + itoa(i)
					nodes = append(nodes, node(name, withLabel("example.com/rack", name)))
				}
				return nodes
			}(),
			keys: []string{"example.com/rack"},
			want: v1alpha1.ClusterSummaryStatus{
				Nodes:        MaxTopologyValues + 1,
				Allocatable:  rl(itoa(4*(MaxTopologyValues+1)), itoa(8*(MaxTopologyValues+1))+"Gi", itoa(10*(MaxTopologyValues+1))),
				Free:         rl(itoa(4*(MaxTopologyValues+1)), itoa(8*(MaxTopologyValues+1))+"Gi", itoa(10*(MaxTopologyValues+1))),
				LargestFree:  rl("4", "8Gi", "10"),
				CommonLabels: commonRA,
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			keys := tc.keys
			if keys == nil {
				keys = DefaultTopologyKeys
			}
			got := Aggregate(tc.nodes, tc.pods, keys)
			if tc.ignoreTopology {
				got.Topology = nil
			}
			if diff := cmp.Diff(tc.want, got, quantities); diff != "" {
				t.Errorf("Aggregate (-want +got):\n%s", diff)
			}
			if err := Validate(&got); err != nil {
				t.Errorf("Aggregate's own summary does not validate: %v", err)
			}
		})
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestAggregateDeterministic checks that the order of nodes and pods, which
// an informer's List does not keep, changes nothing in the rendered summary.
func TestAggregateDeterministic(t *testing.T) {
	var nodes []*corev1.Node
	var pods []*corev1.Pod
	zones := []string{"a", "b", "c"}
	for i := range 30 {
		name := "n" + itoa(i)
		nodes = append(nodes, node(name, withLabel(corev1.LabelTopologyZone, zones[i%3]), withLabel(protocol.DefaultCapacityNodeLabel, []string{"spot", "on-demand"}[i%2])))
		for j := range i % 4 {
			pods = append(pods, pod(name, itoa(100*(j+1))+"m", itoa(j+1)+"00Mi"))
		}
	}
	render := func(nodes []*corev1.Node, pods []*corev1.Pod) string {
		s := Aggregate(nodes, pods, DefaultTopologyKeys)
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	want := render(nodes, pods)
	rng := rand.New(rand.NewSource(1))
	for range 20 {
		rng.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
		rng.Shuffle(len(pods), func(i, j int) { pods[i], pods[j] = pods[j], pods[i] })
		if got := render(nodes, pods); got != want {
			t.Fatalf("another order renders another summary:\n%s\n%s", want, got)
		}
	}
}

// BenchmarkAggregate is one recomputation of a summary of 5,000 nodes in 10
// zones holding 20 pods each, as the publisher makes it at most once a
// summary interval while nodes or pods change. It reports the live heap its
// caches take for them (MiB-cached): the trimmed nodes and pods in stores,
// as its informers keep them.
func BenchmarkAggregate(b *testing.B) {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	nodeStore := cache.NewStore(cache.MetaNamespaceKeyFunc)
	podStore := cache.NewStore(cache.MetaNamespaceKeyFunc)
	for i := range 5000 {
		name := "ip-10-0-" + strconv.Itoa(i) + ".eu-west-1.compute.internal"
		n, _ := TrimNode(node(name, func(n *corev1.Node) {
			n.Labels[corev1.LabelTopologyZone] = "z" + strconv.Itoa(i%10)
			n.Status.Allocatable = rl("64", "256Gi", "110")
		}))
		if err := nodeStore.Add(n); err != nil {
			b.Fatal(err)
		}
		for j := range 20 {
			u, _ := TrimPod(pod(name, "100m", "128Mi", func(p *corev1.Pod) {
				p.Namespace = "team-" + strconv.Itoa(j)
				p.Name = "app-" + strconv.Itoa(i) + "-7d9f8c6b5-" + strconv.Itoa(j)
				p.ResourceVersion = strconv.Itoa(1_000_000 + i*20 + j)
			}))
			if err := podStore.Add(u); err != nil {
				b.Fatal(err)
			}
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	cached := float64(after.HeapAlloc-before.HeapAlloc) / (1 << 20)
	var nodes []*corev1.Node
	for _, o := range nodeStore.List() {
		nodes = append(nodes, o.(*corev1.Node))
	}
	var pods []*PodUsage
	for _, o := range podStore.List() {
		pods = append(pods, o.(*PodUsage))
	}
	for b.Loop() {
		aggregate(nodes, pods, DefaultTopologyKeys)
	}
	b.ReportMetric(cached, "MiB-cached")
}
