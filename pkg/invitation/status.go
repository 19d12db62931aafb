package invitation

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// statusConflictRetry is how soon an invitation whose status write lost a
// race with a newer version is looked at again.
const statusConflictRetry = time.Second

func (c *Controller) report(ctx context.Context, obj client.Object, before, status *v1alpha1.SourceStatus) (reconcile.Result, error) {
	status.ObservedGeneration = obj.GetGeneration()
	if !equality.Semantic.DeepEqual(before, status) {
		if err := c.Client.Status().Update(ctx, obj); err != nil {
			if apierrors.IsConflict(err) {
				// The newer version brings it back; this look is in case
				// that was missed.
				return reconcile.Result{RequeueAfter: statusConflictRetry}, nil
			}
			return reconcile.Result{}, err
		}
		was := meta.FindStatusCondition(before.Conditions, v1alpha1.SourceReady)
		now := meta.FindStatusCondition(status.Conditions, v1alpha1.SourceReady)
		if c.Recorder != nil && now != nil && (was == nil || was.Status != now.Status || was.Reason != now.Reason) {
			kind := corev1.EventTypeNormal
			if now.Status != metav1.ConditionTrue {
				kind = corev1.EventTypeWarning
			}
			c.Recorder.Eventf(obj, nil, kind, now.Reason, "Invite", "%s", now.Message)
		}
	}
	return reconcile.Result{RequeueAfter: resync}, nil
}
