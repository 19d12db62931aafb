package e2e

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// TestSourceOnly runs a release with the chart's scheduler.enabled=false,
// as a cluster that only sends its pods elsewhere would: its pods are still
// placed in a target, and what would need a scheduler here (a self target,
// an invitation) says why it is not Ready instead of leaving candidates
// Pending without a word.
func TestSourceOnly(t *testing.T) {
	t.Parallel()
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{
		{Name: "src", SourceOnly: true, Nodes: []sandbox.NodeSpec{{CPU: "4"}}},
		{Name: "tgt", Nodes: []sandbox.NodeSpec{{CPU: "4"}}},
	}})
	ctx := t.Context()
	src, tgt := s.Cluster("src"), s.Cluster("tgt")
	srcClient := src.Client()
	createNamespace(t, srcClient, placementNS)
	createNamespace(t, tgt.Client(), placementNS)
	if _, err := sandbox.StartAgent(ctx, src, []*sandbox.Cluster{tgt}); err != nil {
		t.Fatal(err)
	}
	if _, err := srcClient.AppsV1().Deployments(sandbox.ReleaseNamespace).Get(ctx, "flotilla-scheduler", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the release renders its scheduler's Deployment with scheduler.enabled=false: %v", err)
	}
	if _, running := src.PIDs()[sandbox.CandidateScheduler]; running {
		t.Fatal("the sandbox runs a flotilla-scheduler in src")
	}

	t.Run("its pods are placed in the target", func(t *testing.T) {
		if _, err := srcClient.CoreV1().Pods(placementNS).Create(ctx, optedInPod("away", "100m"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitPod(t, srcClient, placementNS, "away", "bound to tgt's virtual node", func(p *corev1.Pod) bool {
			return p.Spec.NodeName == "flotilla-tgt"
		})
	})

	t.Run("a self target says no scheduler takes its candidates", func(t *testing.T) {
		if err := src.AddTarget(ctx, src); err != nil {
			t.Fatal(err)
		}
		err := src.WaitTarget(ctx, client.ObjectKey{Name: "src"}, 60*time.Second, func(s *v1alpha1.TargetStatus) bool {
			c := meta.FindStatusCondition(s.Conditions, v1alpha1.TargetReady)
			return c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.ReasonSchedulerDisabled &&
				meta.IsStatusConditionTrue(s.Conditions, v1alpha1.TargetReachable)
		})
		if err != nil {
			t.Fatal(err)
		}
	})

	t.Run("an invitation is granted but not Ready", func(t *testing.T) {
		cr := src.CRClient()
		cs := &v1alpha1.ClusterSource{ObjectMeta: metav1.ObjectMeta{Name: "peer"}}
		cs.Spec.ClusterName = "peer"
		cs.Spec.Identity.ManagedServiceAccount = &v1alpha1.ManagedServiceAccount{}
		cs.Spec.Namespaces = []string{placementNS}
		if err := cr.Create(ctx, cs); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, "the ClusterSource not Ready for want of a scheduler", func() (bool, string) {
			got := &v1alpha1.ClusterSource{}
			if err := cr.Get(ctx, client.ObjectKey{Name: "peer"}, got); err != nil {
				return false, err.Error()
			}
			ready := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.SourceReady)
			return ready != nil && ready.Status == metav1.ConditionFalse && ready.Reason == v1alpha1.ReasonSchedulerDisabled &&
				got.Status.KubeconfigSecret != "", fmt.Sprintf("%+v", got.Status)
		})
	})
}
