package target

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// statusConflictRetry is how soon a target whose status write lost a race
// with a newer version is looked at again.
const statusConflictRetry = time.Second

// report writes the status if it changed, with an Event when Ready flips.
func (c *Controller) report(ctx context.Context, v view, before *v1alpha1.TargetStatus, resync time.Duration) (reconcile.Result, error) {
	v.status.ObservedGeneration = v.obj.GetGeneration()
	if equality.Semantic.DeepEqual(before, v.status) {
		return reconcile.Result{RequeueAfter: resync}, nil
	}
	if err := c.Client.Status().Update(ctx, v.obj); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			// A newer version (or its deletion) brings the target back;
			// this look is in case that was missed.
			return reconcile.Result{RequeueAfter: statusConflictRetry}, nil
		}
		return reconcile.Result{}, fmt.Errorf("updating the status of target %s: %w", v.name, err)
	}
	was := meta.FindStatusCondition(before.Conditions, v1alpha1.TargetReady)
	now := meta.FindStatusCondition(v.status.Conditions, v1alpha1.TargetReady)
	if c.Recorder != nil && now != nil && (was == nil || was.Status != now.Status || was.Reason != now.Reason) {
		kind := corev1.EventTypeNormal
		if now.Status != metav1.ConditionTrue {
			kind = corev1.EventTypeWarning
		}
		c.Recorder.Eventf(v.obj, nil, kind, now.Reason, "Connect", "%s", now.Message)
	}
	return reconcile.Result{RequeueAfter: resync}, nil
}

func setCondition(v view, typ string, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&v.status.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: message, ObservedGeneration: v.obj.GetGeneration(),
	})
}
