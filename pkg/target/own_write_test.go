package target

import (
	"context"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientfeatures "k8s.io/client-go/features"
	clientfeaturestesting "k8s.io/client-go/features/testing"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// TestOwnWrite: the cache's event of the very object this process's
// creation or annotation of a candidate returned is told apart (its round
// may wait for the next change), once; an object someone else wrote since,
// or one the cache has moved past, is not (its round runs at once: the
// target's reservation or binding must never wait).
func TestOwnWrite(t *testing.T) {
	clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.WatchListClient, false)
	api := fake.NewClientset()
	// The fake keeps no resourceVersions: the API server's are played here,
	// one more for every write.
	rv := 0
	api.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		rv++
		p := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		p.UID, p.ResourceVersion = "uid-cand", strconv.Itoa(rv)
		return false, nil, nil
	})
	api.PrependReactor("update", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		rv++
		a.(k8stesting.UpdateAction).GetObject().(*corev1.Pod).ResourceVersion = strconv.Itoa(rv)
		return false, nil, nil
	})
	api.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		// Bump the stored object's version first, as the server's write
		// does; the patch itself then applies to it.
		rv++
		p, err := api.Tracker().Get(corev1.SchemeGroupVersion.WithResource("pods"), "default", a.(k8stesting.PatchAction).GetName())
		if err != nil {
			return true, nil, err
		}
		pod := p.(*corev1.Pod).DeepCopy()
		pod.ResourceVersion = strconv.Itoa(rv)
		if err := api.Tracker().Update(corev1.SchemeGroupVersion.WithResource("pods"), pod, "default"); err != nil {
			return true, nil, err
		}
		return false, nil, nil
	})
	tg, err := NewWithClient(Config{Name: "t1", SourceCluster: "src"}, api)
	if err != nil {
		t.Fatal(err)
	}
	tg.Start(t.Context())
	defer tg.Shutdown()
	cached := func(want func(*corev1.Pod) bool) *corev1.Pod {
		t.Helper()
		var got *corev1.Pod
		if err := wait.PollUntilContextTimeout(t.Context(), time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
			c, ok := tg.Candidate("default", "web-0-abc")
			got = c
			return tg.HasSynced() && ok && want(c), nil
		}); err != nil {
			t.Fatalf("the cache never showed the candidate as wanted (last %v): %v", got, err)
		}
		return got
	}
	atVersion := func(v string) func(*corev1.Pod) bool {
		return func(p *corev1.Pod) bool { return p.ResourceVersion == v }
	}

	cand := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Namespace: "default", Name: "web-0-abc",
		Labels: map[string]string{
			protocol.CandidateLabel: "true", protocol.SourceClusterLabel: "src",
			protocol.TargetLabel: protocol.TargetLabelValue("t1"), protocol.SourceUIDLabel: "uid-web-0",
		},
	}}
	if created, err := tg.Create(t.Context(), cand); err != nil || !created {
		t.Fatalf("Create: created %v, %v", created, err)
	}
	made := cached(atVersion("1"))
	if !tg.OwnWrite(made) {
		t.Error("the cache's copy of the candidate this process created is not told as its own write")
	}
	if tg.OwnWrite(made) {
		t.Error("an own write is told twice")
	}

	// Someone else (the target's scheduler) writes: not this process's.
	theirs := made.DeepCopy()
	theirs.Annotations = map[string]string{protocol.StateAnnotation: `{"phase":"Reserved","nonce":"n"}`}
	if _, err := api.CoreV1().Pods("default").Update(t.Context(), theirs, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if tg.OwnWrite(cached(atVersion("2"))) {
		t.Error("a candidate the target's scheduler wrote is told as this process's write")
	}

	// This process annotates: its own again.
	if err := tg.Annotate(t.Context(), "default", "web-0-abc", map[string]*string{protocol.AllowedAnnotation: ptr.To("uid-web-0/1/n")}); err != nil {
		t.Fatal(err)
	}
	allowed := cached(func(p *corev1.Pod) bool { return p.Annotations[protocol.AllowedAnnotation] != "" })
	if !tg.OwnWrite(allowed) {
		t.Error("the cache's copy of the candidate this process annotated is not told as its own write")
	}

	// Someone else (the target's scheduler) binds: not this process's.
	bound := allowed.DeepCopy()
	bound.Spec.NodeName = "n1"
	if _, err := api.CoreV1().Pods("default").Update(t.Context(), bound, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if tg.OwnWrite(cached(func(p *corev1.Pod) bool { return p.Spec.NodeName == "n1" })) {
		t.Error("a candidate the target bound is told as this process's write")
	}

	// This process writes, and the target writes again before the echo is
	// told: the cache has moved past this process's write, and the round
	// must run at once.
	if err := tg.Annotate(t.Context(), "default", "web-0-abc", map[string]*string{protocol.DeniedAnnotation: ptr.To("no")}); err != nil {
		t.Fatal(err)
	}
	denied := cached(func(p *corev1.Pod) bool { return p.Annotations[protocol.DeniedAnnotation] != "" })
	later := denied.DeepCopy()
	later.Annotations[protocol.StateAnnotation] = `{"phase":"Unreserved","nonce":"n"}`
	if _, err := api.CoreV1().Pods("default").Update(t.Context(), later, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	cached(func(p *corev1.Pod) bool { return p.ResourceVersion == strconv.Itoa(rv) })
	if tg.OwnWrite(denied) {
		t.Error("an own write is told while the cache holds a newer object that someone else wrote")
	}
}
