package target

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

// TestObserveKeepsOnePodsRefusalToItself checks that a target's refusal of
// one request (a pod whose PriorityClass is missing there, one a policy
// refuses) does not mark the target unhealthy for every other pod, while a
// target that does not answer, fails or stops accepting the credential does.
func TestObserveKeepsOnePodsRefusalToItself(t *testing.T) {
	pods := schema.GroupResource{Resource: "pods"}
	for _, tt := range []struct {
		name      string
		err       error
		unhealthy bool
	}{
		{"success", nil, false},
		{"missing PriorityClass (admission)", apierrors.NewForbidden(pods, "p", errors.New("no PriorityClass with name high was found")), false},
		{"invalid pod", apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "p", nil), false},
		{"bad request", apierrors.NewBadRequest("bad"), false},
		{"already exists", apierrors.NewAlreadyExists(pods, "p"), false},
		{"gone", apierrors.NewNotFound(pods, "p"), false},
		{"conflict", apierrors.NewConflict(pods, "p", errors.New("uid")), false},
		{"unreachable", errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), true},
		{"server error", apierrors.NewInternalError(errors.New("etcd")), true},
		{"credential refused", apierrors.NewUnauthorized("token expired"), true},
		{"throttled", apierrors.NewTooManyRequests("slow down", 1), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tg, err := New(Config{Name: "t", REST: &rest.Config{Host: "https://127.0.0.1:1"}, SourceCluster: "src"})
			if err != nil {
				t.Fatal(err)
			}
			tg.setErr(errors.New("an earlier failure"))
			_ = tg.observe(tt.err)
			if got := tg.Err() != nil; got != tt.unhealthy {
				t.Errorf("unhealthy = %v, want %v (Err %v)", got, tt.unhealthy, tg.Err())
			}
		})
	}
}

// TestSilentTargetIsNotCalled checks that a target whose last call got no
// answer is not called again until a probe reaches it: a blackholed target
// would otherwise cost every placement a call timeout.
func TestSilentTargetIsNotCalled(t *testing.T) {
	var calls atomic.Int32
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodGet {
			_, _ = w.Write([]byte(`{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[]}`))
			return
		}
		_, _ = w.Write([]byte(`{"kind":"Pod","apiVersion":"v1","metadata":{"name":"c","namespace":"ns"}}`))
	}))
	defer server.Close()
	tg, err := New(Config{Name: "t", REST: &rest.Config{Host: server.URL}, SourceCluster: "src"})
	if err != nil {
		t.Fatal(err)
	}
	candidate := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns"}}

	_ = tg.observe(&url.Error{Op: "Post", URL: server.URL, Err: context.DeadlineExceeded})
	if _, err := tg.Create(t.Context(), candidate); !errors.Is(err, ErrSilent) {
		t.Fatalf("Create on a silent target: err = %v, want ErrSilent", err)
	}
	if err := tg.Delete(t.Context(), "ns", "c", ""); !errors.Is(err, ErrSilent) {
		t.Fatalf("Delete on a silent target: err = %v, want ErrSilent", err)
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("a silent target was called %d times", n)
	}

	if h := tg.Probe(t.Context()); !h.Reachable {
		t.Fatalf("probe: %+v", h)
	}
	if _, err := tg.Create(t.Context(), candidate); err != nil {
		t.Fatalf("Create once the probe found the target answering: %v", err)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("%d calls, want the probe's and the create's", n)
	}

	// A target that answers with an error is not silent.
	_ = tg.observe(apierrors.NewInternalError(errors.New("etcd")))
	if err := tg.silent(); err != nil {
		t.Errorf("a target that answered 500 is taken for silent: %v", err)
	}
}
