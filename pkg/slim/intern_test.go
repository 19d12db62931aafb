package slim

import (
	"fmt"
	"strings"
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// decoded returns a pod whose strings are all its own, as a pod decoded
// from a watch event has.
func decoded(name string) *corev1.Pod {
	own := func(s string) string { return strings.Clone(s) }
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: own("web"), Name: own(name), UID: types.UID("uid-" + name),
			Labels: map[string]string{own("app"): own("web"), own(protocol.ElectLabel): own("true")},
			Annotations: map[string]string{
				own(protocol.SourceSpecAnnotation): own(`{"containers":[{"name":"app","image":"app:1"}]}`),
				own(protocol.StateAnnotation):      own(`{"phase":"Reserved","nonce":"` + name + `"}`),
			},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: own("app"), Image: own("app:1")}}},
		Status: corev1.PodStatus{
			Phase:      corev1.PodPhase(own("Running")),
			Conditions: []corev1.PodCondition{{Type: corev1.PodConditionType(own("Ready")), Status: corev1.ConditionStatus(own("True"))}},
		},
	}
}

func same(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }

func keyOf(m map[string]string, key string) string {
	for k := range m {
		if k == key {
			return k
		}
	}
	return ""
}

// TestInternShares: after the transforms, two cached pods share one copy of
// every string that repeats (the saved spec of one workload's pods most of
// all), and nothing changes in what they say. A transform that stopped
// interning, or interned into a new copy each time, fails here.
func TestInternShares(t *testing.T) {
	for _, tc := range []struct {
		name      string
		transform func(any) (any, error)
	}{{"source pods", SourcePod}, {"candidates", Candidate}} {
		t.Run(tc.name, func(t *testing.T) {
			objA, _ := tc.transform(decoded("a"))
			objB, _ := tc.transform(decoded("b"))
			a, b := objA.(*corev1.Pod), objB.(*corev1.Pod)
			for what, pair := range map[string][2]string{
				"namespace":       {a.Namespace, b.Namespace},
				"label key":       {keyOf(a.Labels, "app"), keyOf(b.Labels, "app")},
				"label value":     {a.Labels["app"], b.Labels["app"]},
				"annotation key":  {keyOf(a.Annotations, protocol.StateAnnotation), keyOf(b.Annotations, protocol.StateAnnotation)},
				"saved spec":      {a.Annotations[protocol.SourceSpecAnnotation], b.Annotations[protocol.SourceSpecAnnotation]},
				"phase":           {string(a.Status.Phase), string(b.Status.Phase)},
				"condition type":  {string(a.Status.Conditions[0].Type), string(b.Status.Conditions[0].Type)},
				"condition state": {string(a.Status.Conditions[0].Status), string(b.Status.Conditions[0].Status)},
			} {
				if pair[0] == "" || !same(pair[0], pair[1]) {
					t.Errorf("%s %q: two copies", what, pair[0])
				}
			}
			if a.Labels["app"] != "web" || a.Annotations[protocol.StateAnnotation] != `{"phase":"Reserved","nonce":"a"}` || b.Name != "b" {
				t.Errorf("interning changed what the pod says: %v %v %s", a.Labels, a.Annotations, b.Name)
			}
		})
	}
}

// TestInternPoolBounded: values that never repeat must not grow the pool
// without end, and the protocol's per-pod values never enter it.
func TestInternPoolBounded(t *testing.T) {
	p := &pool{max: 8, strings: map[string]string{}}
	for i := range 100 {
		p.intern(fmt.Sprintf("value-%d", i))
		if len(p.strings) > p.max {
			t.Fatalf("pool holds %d strings, bound %d", len(p.strings), p.max)
		}
	}
	p = &pool{max: 8, strings: map[string]string{}}
	p.internMap(map[string]string{protocol.StateAnnotation: "per-pod", protocol.SourceUIDLabel: "uid"})
	for _, v := range []string{"per-pod", "uid"} {
		if _, ok := p.strings[v]; ok {
			t.Errorf("per-pod value %q entered the pool", v)
		}
	}
}
