package target

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// TestAsCreated: the cache's addition of a candidate is told as this
// process's creation only when it is the very object the creation returned
// (its UID and resource version), and only once: a candidate the target
// changed before the watch delivered it (reserved at once, a relist that
// skipped the creation's event), another pod's of the same name, and one
// this process did not create are news to the round.
func TestAsCreated(t *testing.T) {
	tg := newTestTarget(t, "t1")
	client := fake.NewClientset()
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		c := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod).DeepCopy()
		c.UID, c.ResourceVersion = types.UID("c-"+c.Name), "10"
		return true, c, nil
	})
	tg.client = client
	cand := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", Labels: map[string]string{protocol.SourceUIDLabel: "u1"}}}
	if created, err := tg.Create(t.Context(), cand); !created || err != nil {
		t.Fatalf("Create = %t, %v", created, err)
	}
	seen := func(uid, rv string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: types.UID(uid), ResourceVersion: rv}}
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"changed before the watch delivered it", seen("c-p", "11"), false},
		{"another pod of the name", seen("other", "10"), false},
		{"no UID", seen("", "10"), false},
		{"as created", seen("c-p", "10"), true},
		{"as created, told again", seen("c-p", "10"), false},
	} {
		if got := tg.AsCreated(tc.pod); got != tc.want {
			t.Errorf("%s: AsCreated = %t, want %t", tc.name, got, tc.want)
		}
	}
}
