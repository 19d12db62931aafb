package target

import (
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

func TestClassify(t *testing.T) {
	pods := schema.GroupResource{Resource: "pods"}
	for _, tc := range []struct {
		name                  string
		err                   error
		reachable, authorized bool
		reason                string
	}{
		{"ok", nil, true, true, v1alpha1.ReasonConnected},
		{"401", apierrors.NewUnauthorized("token expired"), true, false, v1alpha1.ReasonUnauthorized},
		{"403", apierrors.NewForbidden(pods, "", errors.New("no")), true, false, v1alpha1.ReasonForbidden},
		{"500", apierrors.NewInternalError(errors.New("etcd")), true, false, v1alpha1.ReasonServerError},
		{"503", apierrors.NewServiceUnavailable("down"), true, false, v1alpha1.ReasonServerError},
		{"504 is a timeout", apierrors.NewTimeoutError("slow", 1), false, false, v1alpha1.ReasonUnreachable},
		{"connection refused", errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), false, false, v1alpha1.ReasonUnreachable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := classify(tc.err)
			if h.Reachable != tc.reachable || h.Authorized != tc.authorized || h.Reason != tc.reason {
				t.Fatalf("got %+v", h)
			}
		})
	}
}
