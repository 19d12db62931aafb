package e2e

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// TestGangsOfTwoSourcesMeetThroughNamespacedTargets: as
// TestGangsOfTwoSourcesMeetInOneTarget, two sources make a gang of four
// one-CPU members each for one target of six CPUs, but they come in by
// different kinds of invitation: the first through a namespaced Target of
// its namespace, backed by a Source of that namespace in the target (the
// namespace owners' own invitation, with its managed ServiceAccount), the
// second through the admin's ClusterSource and ClusterTarget. The first
// three members of each are made first and left to reserve, so that the
// target holds three places of each gang and has no room left; then the
// fourth members come. The order must hold whatever kind of invitation
// brought a share: the first source's share, seen first, runs whole well
// within one Permit timeout (30 s: without the order both shares would
// wait for it and be let go together), the second's binds nothing
// meanwhile, and it runs whole once the first is deleted. A namespaced
// Target acts only for its own namespace: the first gang runs on that
// Target's own virtual node, the second on the ClusterTarget's. Watches
// of both sources check that no member binds before its whole gang
// stands elected.
func TestGangsOfTwoSourcesMeetThroughNamespacedTargets(t *testing.T) {
	ctx := t.Context()
	s1, s2, tg := twoSourcesAndATarget(t)
	node1 := joinThroughSource(t, s1, tg, placementNS)
	if err := s2.Invite(ctx, tg, placementNS); err != nil {
		t.Fatal(err)
	}
	if err := s2.WaitTargetReady(ctx, tg.Name, time.Minute); err != nil {
		t.Fatal(err)
	}
	node2 := protocol.VirtualNodeName("", tg.Name)

	gangsOfTwoSourcesMeet(t, s1, s2, tg, node1, node2)
}

// joinThroughSource lets namespace of src reach tgt as that namespace's
// owners would, with no cluster-wide object in either cluster: a Source
// of the namespace in tgt invites src with a managed ServiceAccount, and a
// Target of the namespace in src, named tgt.Name, names a copy of the
// invitation's kubeconfig Secret (both its keys, the kubeconfig and the
// summary's name). Both agents must run. It returns the Target's virtual
// node once the Target is Ready with it.
func joinThroughSource(t *testing.T, src, tgt *sandbox.Cluster, namespace string) string {
	t.Helper()
	ctx := t.Context()
	tcl := tgt.CRClient()
	createNamespace(t, tgt.Client(), namespace)
	inv := &v1alpha1.Source{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: src.Name}}
	inv.Spec.ClusterName = src.Name
	inv.Spec.Identity.ManagedServiceAccount = &v1alpha1.ManagedServiceAccount{}
	if err := tcl.Create(ctx, inv); err != nil {
		t.Fatal(err)
	}
	var status v1alpha1.SourceStatus
	waitFor(t, 60*time.Second, "the Source of "+src.Name+" Ready in "+tgt.Name, func() (bool, string) {
		got := &v1alpha1.Source{}
		if err := tcl.Get(ctx, client.ObjectKeyFromObject(inv), got); err != nil {
			return false, err.Error()
		}
		status = got.Status
		return meta.IsStatusConditionTrue(status.Conditions, v1alpha1.SourceReady) && status.KubeconfigSecret != "",
			fmt.Sprintf("kubeconfigSecret %q, conditions %+v", status.KubeconfigSecret, status.Conditions)
	})
	secret, err := tgt.Client().CoreV1().Secrets(namespace).Get(ctx, status.KubeconfigSecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	copied := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "flotilla-target-" + tgt.Name}, Data: secret.Data}
	if _, err := src.Client().CoreV1().Secrets(namespace).Create(ctx, copied, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	target := &v1alpha1.Target{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: tgt.Name}}
	target.Spec.KubeconfigSecretRef = &v1alpha1.LocalSecretKeyRef{Name: copied.Name}
	if err := src.CRClient().Create(ctx, target); err != nil {
		t.Fatal(err)
	}
	node := protocol.VirtualNodeName(namespace, tgt.Name)
	if err := src.WaitTarget(ctx, client.ObjectKeyFromObject(target), time.Minute, func(st *v1alpha1.TargetStatus) bool {
		return meta.IsStatusConditionTrue(st.Conditions, v1alpha1.TargetReady) && st.VirtualNode == node
	}); err != nil {
		t.Fatal(err)
	}
	return node
}
