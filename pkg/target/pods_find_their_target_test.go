package target

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// TestOfPodByElection: ClusterTarget a-b and Target b of namespace a had
// one node, flotilla-a-b, before names were one-to-one. A pod on it is
// found in the target its election names, every time; a pod elected for a
// target is never found in another, whichever node it is on.
func TestOfPodByElection(t *testing.T) {
	tenant := &Target{Name: "a/b", Namespace: "a", NodeName: protocol.VirtualNodeName("a", "b"), LegacyNodeName: protocol.LegacyVirtualNodeName("a", "b")}
	cluster := &Target{Name: "a-b", NodeName: protocol.VirtualNodeName("", "a-b")}
	if tenant.LegacyNodeName != cluster.NodeName || tenant.NodeName == cluster.NodeName {
		t.Fatalf("premise: %s shares %s with %s and not %s", tenant.Name, tenant.LegacyNodeName, cluster.Name, tenant.NodeName)
	}
	s := NewSet(tenant, cluster)
	pod := func(node, elected string) *corev1.Pod {
		p := &corev1.Pod{Spec: corev1.PodSpec{NodeName: node}}
		if elected != "" {
			p.ObjectMeta = metav1.ObjectMeta{Annotations: map[string]string{
				protocol.ElectionAnnotation: protocol.Election{Generation: 1, Target: elected, Nonce: "n"}.Encode(),
			}}
		}
		return p
	}
	for _, tt := range []struct {
		name string
		pod  *corev1.Pod
		want *Target
	}{
		{"the Target's pod on the shared old node", pod("flotilla-a-b", "a/b"), tenant},
		{"the ClusterTarget's pod on its node", pod("flotilla-a-b", "a-b"), cluster},
		{"the Target's pod on its node", pod("flotilla.a.b", "a/b"), tenant},
		{"a pod with no election on the ClusterTarget's node", pod("flotilla-a-b", ""), cluster},
		{"a pod elected for the ClusterTarget on the Target's node", pod("flotilla.a.b", "a-b"), nil},
		{"a pod elected for a target that is not here", pod("flotilla-a-b", "c"), nil},
		{"a pod not bound", pod("", "a/b"), nil},
	} {
		for range 20 { // the set is a map: no answer may depend on its order
			got, ok := s.OfPod(tt.pod)
			if ok != (tt.want != nil) || got != tt.want {
				t.Fatalf("%s: OfPod = %v, %v; want %v", tt.name, got, ok, tt.want)
			}
		}
	}
}
