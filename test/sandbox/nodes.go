package sandbox

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

const kwokNodeAnnotation = "kwok.x-k8s.io/node"

// NodeSpec describes one fake node that kwok keeps Ready.
type NodeSpec struct {
	// Name defaults to <cluster>-node-<index>.
	Name string
	// Labels are added to the node, e.g. topology.kubernetes.io/zone.
	Labels map[string]string
	// CPU, Memory and Pods are the node's capacity and allocatable;
	// defaults 32, 128Gi and 110.
	CPU, Memory string
	Pods        int
	// Taints are set on the node.
	Taints []corev1.Taint
}

// AddNode creates a fake node that kwok will keep Ready.
func (c *Cluster) AddNode(ctx context.Context, spec NodeSpec) error {
	node, err := spec.node()
	if err != nil {
		return fmt.Errorf("node %s: %w", spec.Name, err)
	}
	if _, err := c.Client().CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating node %s in cluster %s: %w", spec.Name, c.Name, err)
	}
	return nil
}

func (spec NodeSpec) node() (*corev1.Node, error) {
	cpu, memory, pods := spec.CPU, spec.Memory, spec.Pods
	if cpu == "" {
		cpu = "32"
	}
	if memory == "" {
		memory = "128Gi"
	}
	if pods == 0 {
		pods = 110
	}
	resources := corev1.ResourceList{}
	for name, value := range map[corev1.ResourceName]string{corev1.ResourceCPU: cpu, corev1.ResourceMemory: memory} {
		q, err := resource.ParseQuantity(value)
		if err != nil {
			return nil, fmt.Errorf("%s %q: %w", name, value, err)
		}
		resources[name] = q
	}
	resources[corev1.ResourcePods] = *resource.NewQuantity(int64(pods), resource.DecimalSI)
	labels := map[string]string{
		"type":                   "kwok",
		"kubernetes.io/hostname": spec.Name,
		"kubernetes.io/os":       "linux",
		"kubernetes.io/arch":     "amd64",
	}
	for k, v := range spec.Labels {
		labels[k] = v
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        spec.Name,
			Labels:      labels,
			Annotations: map[string]string{kwokNodeAnnotation: "fake", "node.alpha.kubernetes.io/ttl": "0"},
		},
		Spec: corev1.NodeSpec{Taints: spec.Taints},
		Status: corev1.NodeStatus{
			Capacity:    resources,
			Allocatable: resources.DeepCopy(),
			NodeInfo:    corev1.NodeSystemInfo{Architecture: "amd64", OperatingSystem: "linux", KubeletVersion: "fake"},
		},
	}, nil
}

// DemoCluster is a cluster as `make demo` makes it: nodes nodes of 4 CPUs,
// node i in region name and zone <name>-z<i%3>, a spot node when i%3 is 2,
// else on-demand. The demo's journey test starts the same clusters.
func DemoCluster(name string, nodes int) ClusterSpec {
	spec := ClusterSpec{Name: name}
	for i := range nodes {
		// Small nodes: a Deployment soon outgrows one cluster.
		capacity := protocol.CapacityOnDemand
		if i%3 == 2 {
			capacity = protocol.CapacitySpot
		}
		spec.Nodes = append(spec.Nodes, NodeSpec{CPU: "4", Labels: map[string]string{
			"topology.kubernetes.io/region":   name,
			"topology.kubernetes.io/zone":     fmt.Sprintf("%s-z%d", name, i%3),
			protocol.DefaultCapacityNodeLabel: capacity,
		}})
	}
	return spec
}
