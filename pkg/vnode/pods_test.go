package vnode

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
)

// TestNodePodsLister checks that a virtual node's view of the shared source
// pod cache shows only its own pods: another node's pod, or one not bound
// yet, must look absent, or the virtual node would mirror it.
func TestNodePodsLister(t *testing.T) {
	informer := cache.NewSharedIndexInformer(&cache.ListWatch{}, &corev1.Pod{}, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for name, node := range map[string]string{"mine": "flotilla-a", "other": "flotilla-b", "pending": ""} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: corev1.PodSpec{NodeName: node}}
		if err := informer.GetIndexer().Add(pod); err != nil {
			t.Fatal(err)
		}
	}
	lister := nodePods{informer: informer, node: "flotilla-a"}.Lister()

	if _, err := lister.Pods("ns").Get("mine"); err != nil {
		t.Errorf("own pod: %v", err)
	}
	for _, name := range []string{"other", "pending"} {
		if pod, err := lister.Pods("ns").Get(name); !apierrors.IsNotFound(err) {
			t.Errorf("pod %s of another node: got %v, %v; want NotFound", name, pod, err)
		}
	}
	for what, list := range map[string]func() ([]*corev1.Pod, error){
		"List":          func() ([]*corev1.Pod, error) { return lister.List(labels.Everything()) },
		"Pods(ns).List": func() ([]*corev1.Pod, error) { return lister.Pods("ns").List(labels.Everything()) },
	} {
		pods, err := list()
		if err != nil || len(pods) != 1 || pods[0].Name != "mine" {
			t.Errorf("%s: got %d pods (%v), want only mine", what, len(pods), err)
		}
	}
	for obj, want := range map[any]bool{
		&corev1.Pod{Spec: corev1.PodSpec{NodeName: "flotilla-a"}}:                                      true,
		&corev1.Pod{Spec: corev1.PodSpec{NodeName: "flotilla-b"}}:                                      false,
		cache.DeletedFinalStateUnknown{Obj: &corev1.Pod{Spec: corev1.PodSpec{NodeName: "flotilla-a"}}}: true,
		"not a pod": false,
	} {
		if got := onNode(obj, "flotilla-a", nil); got != want {
			t.Errorf("onNode(%v) = %v, want %v", obj, got, want)
		}
	}
}

// TestNodePodsAccept: a node's view narrowed by Accept shows none of the
// pods bound to it that Accept refuses (another target's, on a node whose
// name two targets once shared), to its lister or its handlers.
func TestNodePodsAccept(t *testing.T) {
	informer := cache.NewSharedIndexInformer(&cache.ListWatch{}, &corev1.Pod{}, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, name := range []string{"mine", "theirs"} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: corev1.PodSpec{NodeName: "flotilla-a"}}
		if err := informer.GetIndexer().Add(pod); err != nil {
			t.Fatal(err)
		}
	}
	accept := func(p *corev1.Pod) bool { return p.Name == "mine" }
	view := nodePods{informer: informer, node: "flotilla-a", accept: accept}
	if _, err := view.Lister().Pods("ns").Get("theirs"); !apierrors.IsNotFound(err) {
		t.Errorf("a refused pod: %v, want NotFound", err)
	}
	if pods, err := view.Lister().List(labels.Everything()); err != nil || len(pods) != 1 || pods[0].Name != "mine" {
		t.Errorf("List: %d pods (%v), want only mine", len(pods), err)
	}
	theirs := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "theirs"}, Spec: corev1.PodSpec{NodeName: "flotilla-a"}}
	if onNode(theirs, "flotilla-a", accept) || onNode(cache.DeletedFinalStateUnknown{Obj: theirs}, "flotilla-a", accept) {
		t.Error("the handlers see a refused pod")
	}
}
