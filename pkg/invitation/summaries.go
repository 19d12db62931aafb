package invitation

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// quotaOf is an invitation's quota as a resource list; nil when it sets none.
func quotaOf(q *v1alpha1.SourceQuota) corev1.ResourceList {
	if q == nil {
		return nil
	}
	out := corev1.ResourceList{}
	if q.CPU != nil {
		out[corev1.ResourceCPU] = q.CPU.DeepCopy()
	}
	if q.Memory != nil {
		out[corev1.ResourceMemory] = q.Memory.DeepCopy()
	}
	if q.Pods != nil {
		out[corev1.ResourcePods] = *resource.NewQuantity(int64(*q.Pods), resource.DecimalSI)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// sweeper deletes, once the agent leads, the ClusterSummaries of
// invitations that are gone: an agent stopped between revoking an
// invitation and deleting its summary would leave one behind.
type sweeper struct{ c *Controller }

func (s sweeper) NeedLeaderElection() bool { return true }

func (s sweeper) Start(ctx context.Context) error {
	if err := s.sweep(ctx); err != nil {
		klog.FromContext(ctx).Error(err, "Deleting the summaries of deleted invitations")
	}
	return nil
}

func (s sweeper) sweep(ctx context.Context) error {
	live := map[string]bool{}
	sources := &v1alpha1.SourceList{}
	if err := s.c.Client.List(ctx, sources); err != nil {
		return err
	}
	for _, src := range sources.Items {
		live[Invitation{Kind: "Source", Namespace: src.Namespace, Name: src.Name}.ID()] = true
	}
	clusterSources := &v1alpha1.ClusterSourceList{}
	if err := s.c.Client.List(ctx, clusterSources); err != nil {
		return err
	}
	for _, cs := range clusterSources.Items {
		live[Invitation{Kind: "ClusterSource", Name: cs.Name}.ID()] = true
	}
	summaries := &v1alpha1.ClusterSummaryList{}
	if err := s.c.Client.List(ctx, summaries, client.HasLabels{protocol.InvitationLabel}); err != nil {
		return err
	}
	var errs []error
	for i := range summaries.Items {
		sum := &summaries.Items[i]
		if !live[sum.Labels[protocol.InvitationLabel]] {
			if err := s.c.Client.Delete(ctx, sum); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
