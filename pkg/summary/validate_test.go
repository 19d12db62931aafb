package summary

import (
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// validSummary is a summary of two nodes in two zones, as a healthy target
// writes it.
func validSummary() *v1alpha1.ClusterSummaryStatus {
	return &v1alpha1.ClusterSummaryStatus{
		Invitation:  "team-a/source-1",
		Namespaces:  []string{"team-a", "team-b"},
		Nodes:       2,
		Allocatable: rl("8", "16Gi", "20"),
		Free:        rl("6", "12Gi", "15"),
		LargestFree: rl("4", "8Gi", "10"),
		CommonLabels: map[string]string{
			corev1.LabelTopologyRegion: "eu-west-1",
			"example.com/pool":         "general",
		},
		Topology: []v1alpha1.TopologySummary{
			{Key: corev1.LabelTopologyZone, Values: []v1alpha1.TopologyValue{
				{Value: "eu-west-1a", Nodes: 1, Free: rl("2", "4Gi", "5")},
				{Value: "eu-west-1b", Nodes: 1, Free: rl("4", "8Gi", "10")},
			}},
		},
		Domains: []v1alpha1.TopologyDomain{
			{Values: map[string]string{corev1.LabelTopologyZone: "eu-west-1a"}, Nodes: 1, Free: rl("2", "4Gi", "5")},
			{Values: map[string]string{corev1.LabelTopologyZone: "eu-west-1b"}, Nodes: 1, Free: rl("4", "8Gi", "10")},
			{Values: map[string]string{corev1.LabelTopologyZone: "eu-west-1c"}},
		},
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*v1alpha1.ClusterSummaryStatus)
		// wantErr are substrings of the error; none: valid.
		wantErr []string
	}{
		{name: "valid", mutate: func(*v1alpha1.ClusterSummaryStatus) {}},
		{name: "empty summary of a cluster with no nodes", mutate: func(s *v1alpha1.ClusterSummaryStatus) { *s = v1alpha1.ClusterSummaryStatus{} }},
		{
			name: "a resource a newer target adds is accepted",
			mutate: func(s *v1alpha1.ClusterSummaryStatus) {
				s.Allocatable["nvidia.com/gpu"] = resource.MustParse("8")
				s.Free["nvidia.com/gpu"] = resource.MustParse("2")
			},
		},
		{
			name: "domains: more than the bound",
			mutate: func(s *v1alpha1.ClusterSummaryStatus) {
				for i := range MaxDomains {
					s.Domains = append(s.Domains, v1alpha1.TopologyDomain{Values: map[string]string{"k": strconv.Itoa(i)}})
				}
			},
			wantErr: []string{"status.domains", "must have at most 256 items"},
		},
		{
			name: "domains: a key that is no label key, a value that is no label value",
			mutate: func(s *v1alpha1.ClusterSummaryStatus) {
				s.Domains[2].Values = map[string]string{"not a key!": "x", corev1.LabelTopologyRegion: "no/slash"}
			},
			wantErr: []string{"status.domains[2].values[not a key!]", "status.domains[2].values[topology.kubernetes.io/region]"},
		},
		{
			name: "domains: one combination twice",
			mutate: func(s *v1alpha1.ClusterSummaryStatus) {
				s.Domains[2].Values = map[string]string{corev1.LabelTopologyZone: "eu-west-1a"}
			},
			wantErr: []string{"status.domains[2].values", "Duplicate value"},
		},
		{
			name: "domains: more nodes than the summary's",
			mutate: func(s *v1alpha1.ClusterSummaryStatus) {
				s.Domains[2].Nodes = 1
			},
			wantErr: []string{"status.domains", "nodes add up to more than status.nodes (2)"},
		},
		{
			name: "domains: more free than the summary's",
			mutate: func(s *v1alpha1.ClusterSummaryStatus) {
				s.Domains[2].Free = rl("1", "0", "0")
			},
			wantErr: []string{"status.domains", "free cpu adds up to more than status.free[cpu] (6)"},
		},
		{
			name: "domains: too many keys in one",
			mutate: func(s *v1alpha1.ClusterSummaryStatus) {
				s.Domains[2].Values = map[string]string{}
				for i := range MaxTopologyKeys + 1 {
					s.Domains[2].Values["k"+strconv.Itoa(i)] = "v"
				}
			},
			wantErr: []string{"status.domains[2].values", "must have at most 16 items"},
		},
		{
			name:    "negative node count",
			mutate:  func(s *v1alpha1.ClusterSummaryStatus) { s.Nodes = -1 },
			wantErr: []string{"status.nodes"},
		},
		{
			name:    "absurd node count",
			mutate:  func(s *v1alpha1.ClusterSummaryStatus) { s.Nodes = MaxNodes + 1 },
			wantErr: []string{"status.nodes"},
		},
		{
			name: "negative quantity",
			mutate: func(s *v1alpha1.ClusterSummaryStatus) {
				s.Free[corev1.ResourceMemory] = resource.MustParse("-1Gi")
			},
			wantErr: []string{"status.free[memory]", "must not be negative"},
		},
		{
			name: "absurd cpu",
			mutate: func(s *v1alpha1.ClusterSummaryStatus) {
				s.Allocatable[corev1.ResourceCPU] = resource.MustParse("2G")
			},
			wantErr: []string{"status.allocatable[cpu]", "must not be more than 1G"},
		},
		{
			name: "absurd memory, written as an exponent",
			mutate: func(s *v1alpha1.ClusterSummaryStatus) {
				s.Allocatable[corev1.ResourceMemory] = resource.MustParse("1e40")
			},
			wantErr: []string{"status.allocatable[memory]"},
		},
		{
			name: "absurd pods",
			mutate: func(s *v1alpha1.ClusterSummaryStatus) {
				s.LargestFree[corev1.ResourcePods] = resource.MustParse("2G")
			},
			wantErr: []string{"status.largestFree[pods]"},
		},
		{
			name: "free above allocatable",
			mutate: func(s *v1alpha1.ClusterSummaryStatus) {
				s.Free[corev1.ResourceCPU] = resource.MustParse("9")
			},
			wantErr: []string{"status.free[cpu]", "status.allocatable[cpu] (8)"},
		},
		{
			name: "free of a resource with no allocatable",
			mutate: func(s *v1alpha1.ClusterSummaryStatus) {
				s.Free["nvidia.com/gpu"] = resource.MustParse("1")
			},
			wantErr: []string{"status.free[nvidia.com/gpu]"},
		},
		{
			name: "largest free node above the total",
			mutate: func(s *v1alpha1.ClusterSummaryStatus) {
				s.LargestFree[corev1.ResourceMemory] = resource.MustParse("13Gi")
			},
			wantErr: []string{"status.largestFree[memory]", "status.free[memory]"},
		},
		{
			name: "too many resources",
			mutate: func(s *v1alpha1.ClusterSummaryStatus) {
				for i := range MaxResources {
					s.Allocatable[corev1.ResourceName("example.com/r"+strconv.Itoa(i))] = resource.MustParse("1")
				}
			},
			wantErr: []string{"status.allocatable", "must have at most 32 items"},
		},
		{
			name: "invalid resource name",
			mutate: func(s *v1alpha1.ClusterSummaryStatus) {
				s.Allocatable["not a name"] = resource.MustParse("1")
			},
			wantErr: []string{"status.allocatable[not a name]"},
		},
		{
			name:    "namespace that is not a DNS label",
			mutate:  func(s *v1alpha1.ClusterSummaryStatus) { s.Namespaces = []string{"team-a", "Team_B"} },
			wantErr: []string{"status.namespaces[1]", "Team_B"},
		},
		{
			name:    "namespace with a slash (a path, not a name)",
			mutate:  func(s *v1alpha1.ClusterSummaryStatus) { s.Namespaces = []string{"../kube-system"} },
			wantErr: []string{"status.namespaces[0]"},
		},
		{
			name:    "duplicate namespace",
			mutate:  func(s *v1alpha1.ClusterSummaryStatus) { s.Namespaces = []string{"team-a", "team-a"} },
			wantErr: []string{"status.namespaces[1]", "Duplicate"},
		},
		{
			name: "too many namespaces",
			mutate: func(s *v1alpha1.ClusterSummaryStatus) {
				s.Namespaces = make([]string, MaxNamespaces+1)
				for i := range s.Namespaces {
					s.Namespaces[i] = "ns-" + strconv.Itoa(i)
				}
			},
			wantErr: []string{"status.namespaces", "must have at most 4096 items"},
		},
		{
			name:    "invitation too long",
			mutate:  func(s *v1alpha1.ClusterSummaryStatus) { s.Invitation = strings.Repeat("a", 1000) },
			wantErr: []string{"status.invitation"},
		},
		{
			name: "invalid common label",
			mutate: func(s *v1alpha1.ClusterSummaryStatus) {
				s.CommonLabels["example.com/pool"] = strings.Repeat("x", 64)
			},
			wantErr: []string{"status.commonLabels[example.com/pool]"},
		},
		{
			name: "too many common labels",
			mutate: func(s *v1alpha1.ClusterSummaryStatus) {
				for i := range MaxCommonLabels {
					s.CommonLabels["example.com/l"+strconv.Itoa(i)] = "v"
				}
			},
			wantErr: []string{"status.commonLabels", "must have at most 256 items"},
		},
		{
			name: "too many topology keys",
			mutate: func(s *v1alpha1.ClusterSummaryStatus) {
				for i := range MaxTopologyKeys {
					s.Topology = append(s.Topology, v1alpha1.TopologySummary{Key: "example.com/k" + strconv.Itoa(i)})
				}
			},
			wantErr: []string{"status.topology", "must have at most 16 items"},
		},
		{
			name: "too many values of a topology key",
			mutate: func(s *v1alpha1.ClusterSummaryStatus) {
				for i := range MaxTopologyValues {
					s.Topology[0].Values = append(s.Topology[0].Values, v1alpha1.TopologyValue{Value: "v" + strconv.Itoa(i)})
				}
			},
			wantErr: []string{"status.topology[0].values", "must have at most 1024 items"},
		},
		{
			name: "duplicate topology key and value",
			mutate: func(s *v1alpha1.ClusterSummaryStatus) {
				s.Topology[0].Values[1].Value = "eu-west-1a"
				s.Topology = append(s.Topology, v1alpha1.TopologySummary{Key: corev1.LabelTopologyZone})
			},
			wantErr: []string{"status.topology[0].values[1].value", "status.topology[1].key"},
		},
		{
			name:    "invalid topology key",
			mutate:  func(s *v1alpha1.ClusterSummaryStatus) { s.Topology[0].Key = "-zone" },
			wantErr: []string{"status.topology[0].key"},
		},
		{
			name:    "topology value with more nodes than the cluster",
			mutate:  func(s *v1alpha1.ClusterSummaryStatus) { s.Topology[0].Values[0].Nodes = 3 },
			wantErr: []string{"status.topology[0].values[0].nodes", "status.topology[0].values: Invalid value: 4"},
		},
		{
			name:    "topology values whose nodes add up to more than the cluster's",
			mutate:  func(s *v1alpha1.ClusterSummaryStatus) { s.Topology[0].Values[0].Nodes = 2 },
			wantErr: []string{"status.topology[0].values", "more than status.nodes (2)"},
		},
		{
			name: "topology free adding up to more than the total free",
			mutate: func(s *v1alpha1.ClusterSummaryStatus) {
				s.Topology[0].Values[0].Free[corev1.ResourceCPU] = resource.MustParse("3")
			},
			wantErr: []string{"status.topology[0].values", "free cpu adds up to more than status.free[cpu] (6)"},
		},
		{
			name: "topology free of a resource the total lacks",
			mutate: func(s *v1alpha1.ClusterSummaryStatus) {
				s.Topology[0].Values[0].Free["nvidia.com/gpu"] = resource.MustParse("1")
			},
			wantErr: []string{"status.topology[0].values[0].free[nvidia.com/gpu]"},
		},
		{
			name: "negative topology free",
			mutate: func(s *v1alpha1.ClusterSummaryStatus) {
				s.Topology[0].Values[1].Free[corev1.ResourcePods] = resource.MustParse("-1")
			},
			wantErr: []string{"status.topology[0].values[1].free[pods]"},
		},
		{
			name: "many problems: the error is bounded",
			mutate: func(s *v1alpha1.ClusterSummaryStatus) {
				s.Namespaces = nil
				for i := range 100 {
					s.Namespaces = append(s.Namespaces, "BAD"+strconv.Itoa(i))
				}
			},
			wantErr: []string{"status.namespaces[0]", "and 80 more"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := validSummary()
			tc.mutate(s)
			err := Validate(s)
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v, want no error", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate: no error, want one mentioning %q", tc.wantErr)
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Validate: %v\nwant it to mention %q", err, want)
				}
			}
		})
	}
}

func TestValidateNil(t *testing.T) {
	if err := Validate(nil); err == nil {
		t.Fatal("Validate(nil): no error")
	}
}
