package reservation_test

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metadatafake "k8s.io/client-go/metadata/fake"

	"github.com/flotilla-dev/flotilla/pkg/objects"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/reservation"
	"github.com/flotilla-dev/flotilla/pkg/target"
)

// TestABoundCandidateTheCacheMissedOwnsItsCopies: a pre-elected pod's
// candidate may bind before its target's cache shows it at all; the round
// that binds the source pod sees it bound only by reading it live. That
// round ties the copies of the objects the pod references to the bound
// candidate all the same (no later round looks at a bound pod's copies):
// a copy without an owner would outlive its pod in the target. It once
// did, one run in three of e2e TestObjects.
func TestABoundCandidateTheCacheMissedOwnsItsCopies(t *testing.T) {
	h := newHarness(t, []target.Config{{Name: "t1"}})
	h.c.MaxCandidates = 2
	reservation.PublishFree(t, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100"), corev1.ResourceMemory: resource.MustParse("100Gi"), corev1.ResourcePods: resource.MustParse("1000")})
	watcher, err := objects.NewWatcher(metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme()))
	if err != nil {
		t.Fatal(err)
	}
	h.c.Objects = objects.NewCopier(sourceCluster, h.source, watcher)
	if _, err := h.source.CoreV1().ConfigMaps(namespace).Create(h.ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "settings"}, Data: map[string]string{"mode": "fast"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	usesSettings := func(p *corev1.Pod) {
		p.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}}}
	}

	// t1 answers a first pod: it is sure of the next.
	first := h.newSourcePod("web-0", usesSettings)
	h.reconcile(first)
	h.bindThere(first, "t1", onNode{name: "n1"})

	pod := h.newSourcePod("web-1", usesSettings)
	h.hideCandidate(pod, "t1")
	h.reconcile(pod)
	if e := h.election(pod); e.Nonce != protocol.AnyReservation {
		t.Fatalf("election %s, want t1 pre-elected", e.Encode())
	}
	h.bindCandidate(pod, "t1")
	h.reconcile(pod)
	if node := h.sourcePod(pod).Spec.NodeName; node != h.targets["t1"].NodeName {
		t.Fatalf("source pod on %q, want t1's virtual node %q: its bound candidate was not seen", node, h.targets["t1"].NodeName)
	}
	cand := h.candidate(pod, "t1")
	copied, err := h.targets["t1"].api.CoreV1().ConfigMaps(namespace).Get(h.ctx, protocol.CopyName(sourceCluster, "settings"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(copied.OwnerReferences, func(o metav1.OwnerReference) bool { return o.Kind == "Pod" && o.Name == cand.Name }) {
		t.Errorf("the copy of settings is owned by %+v, not by the bound candidate %s", copied.OwnerReferences, cand.Name)
	}
}
