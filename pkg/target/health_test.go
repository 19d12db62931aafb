package target

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

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

// TestSlowIsNotGone checks that a target whose look timed out but that
// answers otherwise stays reachable, that a refused identity does not, and
// that a watch event ends a silence (a timed-out call) while a refusal by
// the API server stays.
func TestSlowIsNotGone(t *testing.T) {
	timeout := classify(context.DeadlineExceeded)
	if h := slowNotGone(timeout, false); h.Reachable {
		t.Errorf("a timeout with nothing heard: %+v", h)
	}
	if h := slowNotGone(timeout, true); !h.Reachable || !h.Authorized || !strings.Contains(h.Message, "slowly") {
		t.Errorf("a timeout while calls get answers: %+v", h)
	}
	forbidden := classify(apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("no")))
	if h := slowNotGone(forbidden, true); h != forbidden {
		t.Errorf("a refused identity is not slow: %+v", h)
	}

	tg, err := New(Config{Name: "t", REST: &rest.Config{Host: "https://127.0.0.1:1"}, SourceCluster: "src"})
	if err != nil {
		t.Fatal(err)
	}
	if tg.HeardWithin(time.Hour) {
		t.Error("heard of before any answer")
	}
	_ = tg.observe(&url.Error{Op: "Post", URL: "https://127.0.0.1:1", Err: context.DeadlineExceeded})
	if tg.silent() == nil {
		t.Fatal("a timed-out call does not make the target silent")
	}
	tg.watchDelivered(&corev1.Pod{})
	if err := tg.silent(); err != nil {
		t.Errorf("a watch event did not end the silence: %v", err)
	}
	if !tg.HeardWithin(time.Minute) {
		t.Error("a watch event is not heard")
	}
	_ = tg.observe(apierrors.NewInternalError(errors.New("etcd")))
	tg.watchDelivered(&corev1.Pod{})
	if tg.Err() == nil {
		t.Error("a watch event cleared the API server's own failure")
	}
}
