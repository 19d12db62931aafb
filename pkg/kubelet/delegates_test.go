package kubelet

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/flotilla-dev/flotilla/pkg/target"
)

// TestResolve covers what can be missing between a source pod and its
// delegate; each is an error that names it, never a panic.
func TestResolve(t *testing.T) {
	pods := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{})
	for _, p := range []*corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pending", UID: "u0"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "on-real-node", UID: "u1"}, Spec: corev1.PodSpec{NodeName: "node-1"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "on-gone-target", UID: "u2"}, Spec: corev1.PodSpec{NodeName: "flotilla-gone"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "u3"}, Spec: corev1.PodSpec{NodeName: "flotilla-t1"}},
	} {
		_ = pods.Add(p)
	}
	// A pod the cache holds as something else must not crash the lookup.
	_ = pods.Add(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "odd"}})
	tgt, err := target.New(target.Config{Name: "t1", REST: &rest.Config{Host: "https://t1.invalid"}, SourceCluster: "src"})
	if err != nil {
		t.Fatal(err)
	}
	d := &delegates{pods: pods, targets: target.NewSet(tgt), sourceCluster: "src"}
	for _, tc := range []struct {
		name, pod   string
		unavailable bool
		wantMsg     string
	}{
		{name: "unknown pod", pod: "nope", wantMsg: "not a Flotilla source pod"},
		{name: "not a pod in the cache", pod: "odd", wantMsg: "not a Flotilla source pod"},
		{name: "not bound", pod: "pending", wantMsg: "not bound to a virtual node"},
		{name: "bound to a real node", pod: "on-real-node", wantMsg: "node node-1, and no running target of this agent runs it there"},
		{name: "bound to a target that is gone", pod: "on-gone-target", wantMsg: "node flotilla-gone, and no running target of this agent runs it there"},
		{name: "target not listed yet", pod: "web", unavailable: true, wantMsg: "target t1: its pods are not listed yet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := d.resolve("ns", tc.pod)
			var nf errNotFound
			var un errUnavailable
			switch {
			case err == nil:
				t.Fatal("resolved")
			case tc.unavailable && !errors.As(err, &un), !tc.unavailable && !errors.As(err, &nf):
				t.Fatalf("error %T %v of the wrong kind", err, err)
			case !strings.Contains(err.Error(), tc.wantMsg):
				t.Fatalf("error %q does not say %q", err, tc.wantMsg)
			}
		})
	}
	if got := d.nodeOf("ns", "web"); got != "flotilla-t1" {
		t.Errorf("nodeOf(web) = %q, want flotilla-t1", got)
	}
	if got := d.nodeOf("ns", "on-real-node"); got != "" {
		t.Errorf("nodeOf(on-real-node) = %q, want none", got)
	}
}
