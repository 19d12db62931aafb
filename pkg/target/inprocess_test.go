package target

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	clientfeatures "k8s.io/client-go/features"
	clientfeaturestesting "k8s.io/client-go/features/testing"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// TestNewWithClientGoesThroughItsClient: a target given a clientset
// creates, caches, annotates and probes its candidates through it alone.
func TestNewWithClientGoesThroughItsClient(t *testing.T) {
	// The fake clientset does not stream a watch's initial list.
	clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.WatchListClient, false)
	api := fake.NewClientset()
	tg, err := NewWithClient(Config{Name: "t1", SourceCluster: "src"}, api)
	if err != nil {
		t.Fatal(err)
	}
	if tg.Client() != api {
		t.Fatal("the target does not use the clientset it was given")
	}
	tg.Start(t.Context())
	defer tg.Shutdown()

	cand := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Namespace: "default", Name: "web-0-abc",
		Labels: map[string]string{
			protocol.CandidateLabel: "true", protocol.SourceClusterLabel: "src",
			protocol.TargetLabel: protocol.TargetLabelValue("t1"), protocol.SourceUIDLabel: "uid-web-0",
		},
		Annotations: map[string]string{protocol.SourceNamespaceAnnotation: "default", protocol.SourceNameAnnotation: "web-0"},
	}}
	if created, err := tg.Create(t.Context(), cand); err != nil || !created {
		t.Fatalf("Create: created %v, %v", created, err)
	}
	if err := tg.Annotate(t.Context(), "default", "web-0-abc", map[string]*string{protocol.AllowedAnnotation: ptr.To("uid-web-0/1/n")}); err != nil {
		t.Fatalf("Annotate: %v", err)
	}
	if err := wait.PollUntilContextTimeout(t.Context(), time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		c, ok := tg.Candidate("default", "web-0-abc")
		return tg.HasSynced() && ok && c.Annotations[protocol.AllowedAnnotation] != "", nil
	}); err != nil {
		t.Fatalf("the cache never showed the annotated candidate: %v", err)
	}
	if h := tg.Probe(t.Context()); !h.Reachable || !h.Authorized {
		t.Errorf("probe of the fake: %+v", h)
	}
	if _, err := NewWithClient(Config{Name: "t2"}, nil); err == nil {
		t.Error("a target without a client was made")
	}
}
