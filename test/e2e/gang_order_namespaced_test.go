package e2e

import (
	"testing"
	"time"

	"k8s.io/client-go/util/retry"
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
	t.Parallel()
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

// joinLabelled joins tgt through its namespace's owners (joinThroughSource)
// and gives the namespaced Target in src the labels, for a policy to select
// it; it returns the Target and its virtual node.
func joinLabelled(t *testing.T, src, tgt *sandbox.Cluster, namespace string, labels map[string]v1alpha1.LabelValue) (*v1alpha1.Target, string) {
	t.Helper()
	node := joinThroughSource(t, src, tgt, namespace)
	joined := &v1alpha1.Target{}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := src.CRClient().Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: tgt.Name}, joined); err != nil {
			return err
		}
		joined.Spec.Labels = labels
		return src.CRClient().Update(t.Context(), joined)
	})
	if err != nil {
		t.Fatal(err)
	}
	return joined, node
}

// joinThroughSource is sandbox's JoinThroughSource for a test, the
// namespace made in tgt first.
func joinThroughSource(t *testing.T, src, tgt *sandbox.Cluster, namespace string) string {
	t.Helper()
	createNamespace(t, tgt.Client(), namespace)
	node, err := src.JoinThroughSource(t.Context(), tgt, namespace, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return node
}
