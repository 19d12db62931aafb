package vnode

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

func TestCheckOwner(t *testing.T) {
	tenant := protocol.NodeOwner{Namespace: "a", Name: "b"}
	cluster := protocol.NodeOwner{Name: "a-b"}
	node := func(annotations, labels map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "flotilla-a-b", Annotations: annotations, Labels: labels}}
	}
	owned := func(o protocol.NodeOwner) map[string]string {
		return map[string]string{protocol.VirtualNodeOwnerAnnotation: o.String()}
	}
	// A node written before owners were recorded names its target in
	// its labels.
	oldTenant := map[string]string{TypeLabel: TypeValue, TargetLabel: "b", protocol.TargetNamespaceLabel: "a"}
	oldCluster := map[string]string{TypeLabel: TypeValue, TargetLabel: "a-b"}
	for _, tt := range []struct {
		name      string
		node      *corev1.Node
		me        protocol.NodeOwner
		wantOwner string // "" with taken: no virtual node
		taken     bool
	}{
		{"missing", nil, cluster, "", false},
		{"mine", node(owned(cluster), oldCluster), cluster, "", false},
		{"another target's", node(owned(tenant), oldCluster), cluster, "Target/a/b", true},
		{"the ClusterTarget's, for the Target", node(owned(cluster), nil), tenant, "ClusterTarget/a-b", true},
		{"mine before owners", node(nil, oldCluster), cluster, "", false},
		{"a Target's before owners, for the ClusterTarget of its name", node(nil, oldTenant), cluster, "Target/a/b", true},
		{"a real node", node(nil, map[string]string{corev1.LabelHostname: "flotilla-a-b"}), cluster, "", true},
		{"a bad owner", node(map[string]string{protocol.VirtualNodeOwnerAnnotation: "x"}, oldCluster), cluster, "", true},
	} {
		err := CheckOwner(tt.node, tt.me)
		taken, ok := IsTaken(err)
		if ok != tt.taken || (err != nil) != tt.taken {
			t.Errorf("%s: CheckOwner = %v, want taken %v", tt.name, err, tt.taken)
			continue
		}
		if ok && taken.Owner != tt.wantOwner {
			t.Errorf("%s: owner %q, want %q", tt.name, taken.Owner, tt.wantOwner)
		}
	}
}

// TestClaimNode: of two targets that want one node, the first to claim it
// owns it and the second is refused, naming the owner, leaving the node as
// it was; the owner claims it again freely; a node of the old form gets
// its owner recorded and, retiring, turns unschedulable.
func TestClaimNode(t *testing.T) {
	ctx := t.Context()
	kube := fake.NewClientset()
	first := Config{NodeName: "flotilla-x", Target: "x", Client: kube}
	second := Config{NodeName: "flotilla-x", Target: "y", Namespace: "team", Client: kube}
	if err := ClaimNode(ctx, first); err != nil {
		t.Fatal(err)
	}
	err := ClaimNode(ctx, second)
	if taken, ok := IsTaken(err); !ok || taken.Owner != "ClusterTarget/x" {
		t.Fatalf("second claim: %v, want taken by ClusterTarget/x", err)
	}
	n, err := kube.CoreV1().Nodes().Get(ctx, "flotilla-x", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := n.Annotations[protocol.VirtualNodeOwnerAnnotation]; got != "ClusterTarget/x" || n.Labels[TargetLabel] != "x" || n.Labels[protocol.TargetNamespaceLabel] != "" {
		t.Errorf("node after the refused claim: owner %q, labels %v", got, n.Labels)
	}
	if err := ClaimNode(ctx, first); err != nil {
		t.Errorf("the owner's claim again: %v", err)
	}

	old := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "flotilla-team-y", Labels: map[string]string{
		TypeLabel: TypeValue, TargetLabel: "y", protocol.TargetNamespaceLabel: "team",
	}}}
	if _, err := kube.CoreV1().Nodes().Create(ctx, old, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := ClaimNode(ctx, Config{NodeName: "flotilla-team-y", Target: "team-y", Client: kube}); err == nil {
		t.Error("ClusterTarget team-y took the old node of Target team/y")
	}
	retiring := second
	retiring.NodeName, retiring.Retiring = "flotilla-team-y", true
	if err := ClaimNode(ctx, retiring); err != nil {
		t.Fatal(err)
	}
	n, err = kube.CoreV1().Nodes().Get(ctx, "flotilla-team-y", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Annotations[protocol.VirtualNodeOwnerAnnotation] != "Target/team/y" || !n.Spec.Unschedulable || len(n.Spec.Taints) != 1 {
		t.Errorf("old node adopted: annotations %v, unschedulable %v, taints %v", n.Annotations, n.Spec.Unschedulable, n.Spec.Taints)
	}
}
