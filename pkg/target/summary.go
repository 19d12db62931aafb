package target

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/summary"
)

// watchSummary calls onChange with the status of the invitation's
// ClusterSummary each time the target publishes a believable one, until ctx
// is done. It watches that one object (the invited identity may read only
// it), so a change shows within the target's publishing interval.
func (t *Target) watchSummary(ctx context.Context, onChange func(*v1alpha1.ClusterSummaryStatus)) {
	byName := fields.OneTermEqualSelector("metadata.name", t.summaryName).String()
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = byName
			list := &v1alpha1.ClusterSummaryList{}
			err := t.cr.List(ctx, list, &client.ListOptions{Raw: &opts})
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = byName
			return t.cr.Watch(ctx, &v1alpha1.ClusterSummaryList{}, &client.ListOptions{Raw: &opts})
		},
	}
	changed := func(obj any) {
		sum, ok := obj.(*v1alpha1.ClusterSummary)
		if !ok || sum.Name != t.summaryName {
			return
		}
		if err := summary.Validate(&sum.Status); err != nil {
			// The probe reports it in the Target's status.
			klog.FromContext(ctx).V(2).Info("Ignoring a ClusterSummary that is not believable", "target", t.Name, "error", err.Error())
			return
		}
		onChange(&sum.Status)
	}
	_, informer := toolscache.NewInformerWithOptions(toolscache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    &v1alpha1.ClusterSummary{},
		Handler: toolscache.ResourceEventHandlerFuncs{
			AddFunc:    changed,
			UpdateFunc: func(_, obj any) { changed(obj) },
		},
	})
	informer.RunWithContext(ctx)
}

// Capacity is what a target's virtual node shows of its summary: the
// allocatable and free totals, each bounded by the invitation's quota.
func Capacity(s *v1alpha1.ClusterSummaryStatus) (allocatable, free corev1.ResourceList) {
	return bounded(s.Allocatable, s.Quota), bounded(s.Free, s.Quota)
}

// bounded is rl with each resource no more than the quota's, where the
// quota names it.
func bounded(rl, quota corev1.ResourceList) corev1.ResourceList {
	out := make(corev1.ResourceList, len(rl))
	for name, q := range rl {
		if limit, ok := quota[name]; ok && limit.Cmp(q) < 0 {
			q = limit
		}
		out[name] = q.DeepCopy()
	}
	return out
}

// NodeLabels are the labels of a target's nodes that its virtual node
// carries: the labels common to all of them (region, zone, provider,
// capacity type, OS, architecture), except node roles and Flotilla's own.
func NodeLabels(s *v1alpha1.ClusterSummaryStatus) map[string]string {
	out := make(map[string]string, len(s.CommonLabels))
	for k, v := range s.CommonLabels {
		if strings.HasPrefix(k, "node-role.kubernetes.io/") || strings.HasPrefix(k, protocol.Prefix) {
			continue
		}
		out[k] = v
	}
	return out
}

// KeepSourceLabels reports whether the target's invitation lets candidates
// carry their source pods' labels (its ClusterSummary says so). A self
// target never does: its candidates sit beside their source pods, which
// carry the labels already (see candidate.Build).
func (t *Target) KeepSourceLabels() bool {
	s := t.Summary()
	return !t.Self && s != nil && s.KeepSourceLabels
}

// SummaryKey of a kubeconfig Secret names the ClusterSummary of the
// source's invitation in the target, which lists the invited namespaces.
const SummaryKey = "summary"

// readSummary reads the invitation's ClusterSummary from the target and
// watches the namespaces it names. A failed read is reported as the
// target's health; an empty Health means it went well.
func (c *Controller) readSummary(ctx context.Context, v view, t *Target) Health {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	sum := &v1alpha1.ClusterSummary{}
	if err := t.cr.Get(ctx, client.ObjectKey{Name: t.SummaryName()}, sum); err != nil {
		h := classify(err)
		if apierrors.IsNotFound(err) {
			h.Reason = v1alpha1.ReasonForbidden
			h.Message = fmt.Sprintf("The target publishes no ClusterSummary %s for this source (invitation deleted?)", t.SummaryName())
		}
		return h
	}
	if err := summary.Validate(&sum.Status); err != nil {
		return Health{Reachable: true, Authorized: true, Reason: v1alpha1.ReasonSummaryInvalid,
			Message: fmt.Sprintf("The target's ClusterSummary %s is not believable: %v", t.SummaryName(), err)}
	}
	t.SetNamespaces(sum.Status.Namespaces)
	v.status.Namespaces = sum.Status.Namespaces
	if len(sum.Status.Namespaces) == 0 {
		return Health{Reachable: true, Authorized: true, Reason: v1alpha1.ReasonForbidden,
			Message: "The target's invitation covers no namespace yet"}
	}
	return Health{}
}
