package workload

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

func TestOf(t *testing.T) {
	pod := func(hash string, refs ...metav1.OwnerReference) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", OwnerReferences: refs}}
		if hash != "" {
			p.Labels = map[string]string{"pod-template-hash": hash}
		}
		return p
	}
	controller := func(kind, name string) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: "apps/v1", Kind: kind, Name: name, UID: "u", Controller: ptr.To(true)}
	}
	owner := func(kind, name string) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: "apps/v1", Kind: kind, Name: name, UID: "u"}
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want Key
		ok   bool
	}{
		{"a Deployment's pod belongs to the Deployment", pod("5d4f8c", controller("ReplicaSet", "web-5d4f8c")), Key{"Deployment", "web"}, true},
		{"a Deployment whose name has dashes", pod("abc", controller("ReplicaSet", "my-web-app-abc")), Key{"Deployment", "my-web-app"}, true},
		{"a ReplicaSet of its own (no hash label)", pod("", controller("ReplicaSet", "web-5d4f8c")), Key{"ReplicaSet", "web-5d4f8c"}, true},
		{"a hash that is not the ReplicaSet's suffix", pod("zzz", controller("ReplicaSet", "web-5d4f8c")), Key{"ReplicaSet", "web-5d4f8c"}, true},
		{"a ReplicaSet named only by the hash", pod("abc", controller("ReplicaSet", "-abc")), Key{"ReplicaSet", "-abc"}, true},
		{"a StatefulSet's pod", pod("", controller("StatefulSet", "db")), Key{"StatefulSet", "db"}, true},
		{"a StatefulSet's pod with a hash label is still the StatefulSet's", pod("abc", controller("StatefulSet", "db-abc")), Key{"StatefulSet", "db-abc"}, true},
		{"a Job's pod", pod("", controller("Job", "batch-1")), Key{"Job", "batch-1"}, true},
		{"the controller among other owners", pod("", owner("ConfigMap", "x"), controller("StatefulSet", "db")), Key{"StatefulSet", "db"}, true},
		{"owners but no controller", pod("abc", owner("ReplicaSet", "web-abc")), Key{}, false},
		{"no owner", pod(""), Key{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := Of(tc.pod)
			if got != tc.want || ok != tc.ok {
				t.Errorf("Of = %v, %v; want %v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestIndexPod(t *testing.T) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Labels:          map[string]string{"pod-template-hash": "abc"},
		OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "web-abc", Controller: ptr.To(true)}},
	}}
	if got := IndexPod(p); len(got) != 1 || got[0] != "Deployment/web" {
		t.Errorf("IndexPod = %v, want [Deployment/web]", got)
	}
	if got := IndexPod(&corev1.Pod{}); got != nil {
		t.Errorf("IndexPod of a pod without controller = %v, want none", got)
	}
}

// TestSiblings: the pods of one workload in one namespace, none of
// another workload, namespace or of none; indexing twice is no error.
func TestSiblings(t *testing.T) {
	inf := toolscache.NewSharedIndexInformer(&toolscache.ListWatch{}, &corev1.Pod{}, 0, toolscache.Indexers{})
	for range 2 {
		if err := IndexSiblings(inf); err != nil {
			t.Fatal(err)
		}
	}
	of := func(namespace, name, rs string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
		if rs != "" {
			p.OwnerReferences = []metav1.OwnerReference{{Kind: "ReplicaSet", Name: rs, Controller: ptr.To(true)}}
		}
		return p
	}
	for _, p := range []*corev1.Pod{of("a", "web-1", "web"), of("a", "web-2", "web"), of("b", "web-1", "web"), of("a", "db-1", "db"), of("a", "bare", "")} {
		if err := inf.GetStore().Add(p); err != nil {
			t.Fatal(err)
		}
	}
	pods, err := Siblings(inf.GetIndexer(), "a", Key{Kind: "ReplicaSet", Name: "web"}.String())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pods {
		names = append(names, p.Namespace+"/"+p.Name)
	}
	slices.Sort(names)
	if want := []string{"a/web-1", "a/web-2"}; !slices.Equal(names, want) {
		t.Fatalf("Siblings = %v, want %v", names, want)
	}
}
