package core

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	schedframework "k8s.io/kubernetes/pkg/scheduler/framework"
)

const gi = 1 << 30

func TestScore(t *testing.T) {
	tests := []struct {
		name                      string
		allocatable, used, podReq Resources
		want                      int64
	}{
		{name: "empty node, empty pod", allocatable: Resources{4000, 8 * gi}, want: 100},
		{name: "pod takes half of each", allocatable: Resources{4000, 8 * gi}, podReq: Resources{2000, 4 * gi}, want: 50},
		{name: "cpu full, memory free", allocatable: Resources{4000, 8 * gi}, used: Resources{3000, 0}, podReq: Resources{1000, 0}, want: 50},
		{name: "quarter used before, quarter by pod", allocatable: Resources{4000, 8 * gi}, used: Resources{1000, 2 * gi}, podReq: Resources{1000, 2 * gi}, want: 50},
		{name: "over-committed clamps at zero", allocatable: Resources{1000, gi}, used: Resources{1000, gi}, podReq: Resources{500, gi}, want: 0},
		{name: "rounds", allocatable: Resources{3000, 0}, podReq: Resources{1000, 0}, want: 67},
		{name: "node without memory reported", allocatable: Resources{4000, 0}, podReq: Resources{1000, gi}, want: 75},
		{name: "node reporting nothing", want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Score(tt.allocatable, tt.used, tt.podReq); got != tt.want {
				t.Errorf("Score = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestScoreOf(t *testing.T) {
	requests := func(cpu, memory string) v1.PodSpec {
		return v1.PodSpec{Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{Requests: v1.ResourceList{
			v1.ResourceCPU: resource.MustParse(cpu), v1.ResourceMemory: resource.MustParse(memory),
		}}}}}
	}
	running := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "running", UID: "r"}, Spec: requests("1", "2Gi")}
	node := schedframework.NewNodeInfo(running)
	node.SetNode(&v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: v1.NodeStatus{Allocatable: v1.ResourceList{
			v1.ResourceCPU: resource.MustParse("4"), v1.ResourceMemory: resource.MustParse("8Gi"), v1.ResourcePods: resource.MustParse("110"),
		}},
	})
	candidate := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "candidate", UID: "c"}, Spec: requests("1", "2Gi")}
	if got := ScoreOf(node, candidate); got != 50 {
		t.Errorf("ScoreOf = %d, want 50 (half of CPU and memory free after the pod)", got)
	}
}
