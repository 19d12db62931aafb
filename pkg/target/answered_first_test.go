package target

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// TestAnAnswerBeforeTheCreateReturnsCounts: a target may reserve a
// candidate, and this agent's cache show it, before the call that created
// it returns. That answer must end the candidate's wait: recorded as sent
// only after the call, the candidate waited for ever, its age raising the
// target's Answer until the target was no longer sure for any pod (1.59
// candidates a pod in a burst). A creation that fails leaves nothing
// waiting.
func TestAnAnswerBeforeTheCreateReturnsCounts(t *testing.T) {
	tg := newTestTarget(t, "t1")
	client := fake.NewClientset()
	fail := false
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if fail {
			return true, nil, errors.New("the API server timed out")
		}
		// The informer is faster than the call's return.
		c := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod).DeepCopy()
		c.Annotations = map[string]string{protocol.StateAnnotation: `{"phase":"Bound","nonce":"n"}`}
		tg.outcomes.seen(c)
		return false, nil, nil
	})
	tg.client = client
	cand := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{protocol.SourceUIDLabel: "uid-" + name}}}
	}

	if created, err := tg.Create(t.Context(), cand("quick")); !created || err != nil {
		t.Fatalf("Create = %t, %v", created, err)
	}
	if o := tg.Outcomes(); o.Waiting != 0 || o.Ended != 1 {
		t.Errorf("a candidate answered before its creation returned: waiting %d, ended %d; want 0, 1", o.Waiting, o.Ended)
	}

	fail = true
	if _, err := tg.Create(t.Context(), cand("failed")); err == nil {
		t.Fatal("a failed creation reported no error")
	}
	if o := tg.Outcomes(); o.Waiting != 0 {
		t.Errorf("a candidate whose creation failed waits for an answer (%d waiting)", o.Waiting)
	}
}
