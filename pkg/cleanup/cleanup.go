// Package cleanup removes, when Flotilla is uninstalled, what the agent made
// that the Helm chart does not own: virtual nodes, the finalizers of
// Targets, ClusterTargets, Sources and ClusterSources, the access granted to
// invited sources, ClusterSummaries and the leader-election Leases. The
// chart runs it as a pre-delete hook, with the agent's ServiceAccount,
// after scaling the agent and the scheduler to zero so that nothing makes
// them again.
package cleanup

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/pkg/invitation"
	"github.com/flotilla-dev/flotilla/pkg/target"
)

// Options says what belongs to the release being uninstalled.
type Options struct {
	// Namespace is the release's.
	Namespace string
	// Deployments are scaled to zero first (the agent's and the scheduler's).
	Deployments []string
	// Leases are the leader-election Leases to delete.
	Leases []string
	// Timeout bounds the wait for the Deployments' pods to end.
	Timeout time.Duration
}

// The hook scales the release's Deployments and deletes its Leases.
// +kubebuilder:rbac:groups=apps,namespace=flotilla-system,resources=deployments,verbs=get;patch
// +kubebuilder:rbac:groups="",namespace=flotilla-system,resources=pods,verbs=list

// Run cleans up; it may be run again after a partial failure.
func Run(ctx context.Context, cl client.Client, reader client.Reader, kube kubernetes.Interface, opts Options) error {
	log := klog.FromContext(ctx)
	if opts.Timeout == 0 {
		opts.Timeout = 2 * time.Minute
	}
	for _, d := range opts.Deployments {
		_, err := kube.AppsV1().Deployments(opts.Namespace).Patch(ctx, d, types.MergePatchType, []byte(`{"spec":{"replicas":0}}`), metav1.PatchOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("scaling Deployment %s/%s to zero: %w", opts.Namespace, d, err)
		}
	}
	err := wait.PollUntilContextTimeout(ctx, time.Second, opts.Timeout, true, func(ctx context.Context) (bool, error) {
		for _, d := range opts.Deployments {
			dep, err := kube.AppsV1().Deployments(opts.Namespace).Get(ctx, d, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				continue
			}
			if err != nil {
				return false, nil
			}
			sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
			if err != nil {
				return false, err
			}
			pods, err := kube.CoreV1().Pods(opts.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
			if err != nil || len(pods.Items) > 0 {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the agent and the scheduler to stop: %w", err)
	}
	log.Info("Agent and scheduler stopped; removing what they made")
	var errs []error
	errs = append(errs, target.ReleaseAll(ctx, cl, kube))
	inv := &invitation.Controller{Client: cl, Reader: reader, Kube: kube, AgentNamespace: opts.Namespace}
	errs = append(errs, inv.RevokeAll(ctx))
	for _, l := range opts.Leases {
		if err := kube.CoordinationV1().Leases(opts.Namespace).Delete(ctx, l, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting Lease %s/%s: %w", opts.Namespace, l, err))
		}
	}
	return errors.Join(errs...)
}
