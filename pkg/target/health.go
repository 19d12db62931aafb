package target

import (
	"context"
	"fmt"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// Health is what one probe of a target found.
type Health struct {
	// Reachable: the target's API server answered.
	Reachable bool
	// Authorized: it accepted the identity for listing candidates.
	Authorized bool
	// Reason and Message explain the first thing that failed.
	Reason, Message string
	// Cordoned says why a target that is otherwise Ready gets no new pod:
	// its virtual node is cordoned (Target.Cordoned). The target stays
	// Ready, as a cordoned node does.
	Cordoned string
	// Tainted names the taints of its virtual node that keep off the pods
	// that do not tolerate them (Target.Tainted); the Ready condition's
	// message says them.
	Tainted string
}

// probed is a Health and when it was found.
type probed struct {
	Health
	at time.Time
}

// setHealth records what a look at the target found (the controller's, each
// resync).
func (t *Target) setHealth(h Health, at time.Time) { t.health.Store(&probed{Health: h, at: at}) }

// LastHealth is what the last look at the target found, and when; ok is
// false before the first.
func (t *Target) LastHealth() (h Health, at time.Time, ok bool) {
	p := t.health.Load()
	if p == nil {
		return Health{}, time.Time{}, false
	}
	return p.Health, p.at, true
}

// Probe asks the target for what the source needs most, listing its
// candidates, and classifies the answer. It is bounded by probeTimeout.
func (t *Target) Probe(ctx context.Context) Health {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	// A namespaced Target probes its namespace there; an invited source
	// may list pods only in the invited namespaces.
	ns := ""
	if t.Namespace != "" {
		ns = t.NamespaceFor(t.Namespace)
	} else if invited := t.Namespaces(); len(invited) > 0 {
		ns = invited[0]
	}
	_, err := t.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{Limit: 1, LabelSelector: t.selector})
	// The probe is what finds a silent target answering again (see silent).
	_ = t.observe(err)
	return classify(err)
}

// classify turns the outcome of a call to a target into its health.
func classify(err error) Health {
	if err == nil {
		return Health{Reachable: true, Authorized: true, Reason: v1alpha1.ReasonConnected, Message: "The target answers and lists this source's candidates"}
	}
	status, isStatus := err.(apierrors.APIStatus)
	switch {
	case apierrors.IsUnauthorized(err):
		return Health{Reachable: true, Reason: v1alpha1.ReasonUnauthorized,
			Message: fmt.Sprintf("The target does not accept the credential (expired or revoked token?): %v", err)}
	case apierrors.IsForbidden(err):
		return Health{Reachable: true, Reason: v1alpha1.ReasonForbidden,
			Message: fmt.Sprintf("The target refuses this source's identity (is it invited?): %v", err)}
	case isStatus && status.Status().Code >= http.StatusInternalServerError && status.Status().Code != http.StatusGatewayTimeout:
		return Health{Reachable: true, Reason: v1alpha1.ReasonServerError,
			Message: fmt.Sprintf("The target's API server fails: %v", err)}
	case isStatus && status.Status().Code != 0 && status.Status().Code < http.StatusInternalServerError:
		return Health{Reachable: true, Reason: v1alpha1.ReasonServerError,
			Message: fmt.Sprintf("The target refused the request: %v", err)}
	}
	return Health{Reason: v1alpha1.ReasonUnreachable, Message: fmt.Sprintf("The target's API server cannot be reached: %v", err)}
}

// apply writes the probe's outcome and the informer's state into the
// conditions of a target's status.
func (h Health) apply(v view, synced bool) {
	cond := func(ok bool) metav1.ConditionStatus {
		if ok {
			return metav1.ConditionTrue
		}
		return metav1.ConditionFalse
	}
	reachable, authorized := h.Reason, h.Reason
	if h.Reachable {
		reachable = v1alpha1.ReasonConnected
	}
	if h.Authorized {
		authorized = v1alpha1.ReasonConnected
	}
	setCondition(v, v1alpha1.TargetReachable, cond(h.Reachable), reachable, h.Message)
	if h.Reachable {
		setCondition(v, v1alpha1.TargetAuthorized, cond(h.Authorized), authorized, h.Message)
	} else {
		setCondition(v, v1alpha1.TargetAuthorized, metav1.ConditionUnknown, v1alpha1.ReasonUnreachable, "Not known while the target cannot be reached")
	}
	switch {
	case !h.Reachable || !h.Authorized || h.Reason != v1alpha1.ReasonConnected:
		setCondition(v, v1alpha1.TargetReady, metav1.ConditionFalse, h.Reason, h.Message)
	case !synced:
		setCondition(v, v1alpha1.TargetReady, metav1.ConditionFalse, v1alpha1.ReasonConnecting, "Listing this source's candidates in the target")
	case h.Cordoned != "":
		setCondition(v, v1alpha1.TargetReady, metav1.ConditionTrue, v1alpha1.ReasonCordoned, "Connected, but "+h.Cordoned+"; the pods running there are not touched")
	case h.Tainted != "":
		setCondition(v, v1alpha1.TargetReady, metav1.ConditionTrue, v1alpha1.ReasonConnected, "Pods are sent to this target; "+h.Tainted)
	default:
		setCondition(v, v1alpha1.TargetReady, metav1.ConditionTrue, v1alpha1.ReasonConnected, "Pods are sent to this target")
	}
}

// slowNotGone is the health of a target whose look got no answer (a
// timeout) while its other calls or its candidate watch got answers
// within the last notReadyAfter: a busy API server, not a gone one. Its
// virtual node stays Ready, and the condition says it is slow; a source
// would otherwise mark the pods of every saturated target unreachable
// and, after their toleration, have them evicted.
func slowNotGone(h Health, heard bool) Health {
	if h.Reason != v1alpha1.ReasonUnreachable || !heard {
		return h
	}
	return Health{Reachable: true, Authorized: true, Reason: v1alpha1.ReasonConnected,
		Message: "The target answers slowly: its calls and candidate watch get answers, but the last look did not (" + h.Message + ")"}
}
