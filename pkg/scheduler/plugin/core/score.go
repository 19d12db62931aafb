package core

import (
	"math"

	v1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	fwk "k8s.io/kube-scheduler/framework"
)

// Resources are the amounts a reservation's score weighs.
type Resources struct {
	MilliCPU int64
	Memory   int64
}

// Score rates a reservation from 0 to 100: the mean, over CPU and memory, of
// the share of the node's allocatable that is still free once the pod is
// placed. Higher is better for the source when it compares targets.
// Dimensions the node does not report are left out; a node that reports
// neither scores 0.
func Score(allocatable, requested, pod Resources) int64 {
	var sum float64
	var dims int
	for _, d := range [][3]int64{
		{allocatable.MilliCPU, requested.MilliCPU, pod.MilliCPU},
		{allocatable.Memory, requested.Memory, pod.Memory},
	} {
		alloc, used := d[0], d[1]+d[2]
		if alloc <= 0 {
			continue
		}
		free := max(alloc-used, 0)
		sum += float64(free) / float64(alloc)
		dims++
	}
	if dims == 0 {
		return 0
	}
	return int64(math.Round(100 * sum / float64(dims)))
}

// ScoreOf scores placing pod on the node described by a scheduling snapshot,
// whose requested amounts do not include the pod yet.
func ScoreOf(node fwk.NodeInfo, pod *v1.Pod) int64 {
	return Score(resourcesOf(node.GetAllocatable()), resourcesOf(node.GetRequested()), PodRequests(pod))
}

// PodRequests is what the pod asks of a node, with init containers,
// sidecars and overhead counted the way the scheduler counts them.
func PodRequests(pod *v1.Pod) Resources {
	reqs := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	return Resources{MilliCPU: reqs.Cpu().MilliValue(), Memory: reqs.Memory().Value()}
}

func resourcesOf(r fwk.Resource) Resources {
	return Resources{MilliCPU: r.GetMilliCPU(), Memory: r.GetMemory()}
}
