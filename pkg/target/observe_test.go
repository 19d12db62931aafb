package target

import (
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
