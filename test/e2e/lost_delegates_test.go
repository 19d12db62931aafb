package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/target"
	"github.com/flotilla-dev/flotilla/pkg/vnode"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// TestLostDelegatesHoldTheTargetBack: away's admin deletes every delegate
// of home's pods as soon as it is bound. Each loss fails its source pod
// (DelegateLost) and the ReplicaSet makes another, which would go to away
// again, for ever. After target.LostThreshold losses, away is held back:
// its ClusterTarget says Ready=False, reason DelegatesLost, its virtual
// node stays Ready, and the next pods wait Pending with
// PodScheduled=False, reason Unschedulable, naming why, instead of
// failing. Without the hold-back the failures go on and no pod waits.
func TestLostDelegatesHoldTheTargetBack(t *testing.T) {
	t.Parallel()
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{
		{Name: "home", Nodes: []sandbox.NodeSpec{{CPU: "4"}}},
		{Name: "away", Nodes: []sandbox.NodeSpec{{CPU: "8"}}},
	}})
	ctx := t.Context()
	home, away := s.Cluster("home"), s.Cluster("away")
	for _, c := range []*sandbox.Cluster{home, away} {
		createNamespace(t, c.Client(), placementNS)
	}
	if _, err := sandbox.StartAgent(ctx, home, []*sandbox.Cluster{away}); err != nil {
		t.Fatal(err)
	}

	// The target's admin: every delegate of home's goes as soon as it is
	// bound.
	deleterCtx, stopDeleting := context.WithCancel(ctx)
	var deleted sync.WaitGroup
	deleted.Add(1)
	go func() {
		defer deleted.Done()
		_ = wait.PollUntilContextCancel(deleterCtx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			list, err := away.Client().CoreV1().Pods(placementNS).List(ctx, metav1.ListOptions{LabelSelector: protocol.CandidateLabel + "=true"})
			if err != nil {
				return false, nil
			}
			for _, p := range list.Items {
				if p.Spec.NodeName != "" && p.DeletionTimestamp == nil {
					_ = away.Client().CoreV1().Pods(placementNS).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
				}
			}
			return false, nil
		})
	}()
	defer func() { stopDeleting(); deleted.Wait() }()

	if _, err := home.Client().AppsV1().Deployments(placementNS).Create(ctx, optedInDeployment("lost", 2, "100m"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	lost := func() (n int, pending []corev1.Pod, err error) {
		list, err := home.Client().CoreV1().Pods(placementNS).List(ctx, metav1.ListOptions{LabelSelector: "app=lost"})
		if err != nil {
			return 0, nil, err
		}
		for _, p := range list.Items {
			switch {
			case p.Status.Phase == corev1.PodFailed && p.Status.Reason == vnode.ReasonDelegateLost:
				n++
			case p.Status.Phase == corev1.PodPending && p.Spec.NodeName == "":
				pending = append(pending, p)
			}
		}
		return n, pending, nil
	}

	t.Run("away is held back after the threshold of losses", func(t *testing.T) {
		if err := home.WaitTarget(ctx, client.ObjectKey{Name: "away"}, 3*time.Minute, func(st *v1alpha1.TargetStatus) bool {
			c := meta.FindStatusCondition(st.Conditions, v1alpha1.TargetReady)
			return c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.ReasonDelegatesLost && strings.Contains(c.Message, "vanished")
		}); err != nil {
			n, _, _ := lost()
			t.Fatalf("away not held back after %d lost delegates: %v", n, err)
		}
		node, err := home.Client().CoreV1().Nodes().Get(ctx, "flotilla-away", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
				t.Errorf("virtual node flotilla-away is %s (%s): a held-back target's running pods must not be evicted", c.Status, c.Message)
			}
		}
	})

	t.Run("the next pods wait, Unschedulable, instead of failing", func(t *testing.T) {
		var n int
		waitFor(t, 2*time.Minute, "both replicas Pending with PodScheduled=False Unschedulable naming the hold-back", func() (bool, string) {
			var pending []corev1.Pod
			var err error
			n, pending, err = lost()
			if err != nil {
				return false, err.Error()
			}
			waiting := 0
			for _, p := range pending {
				for _, c := range p.Status.Conditions {
					if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable && strings.Contains(c.Message, "vanished") {
						waiting++
					}
				}
			}
			return waiting == 2, fmt.Sprintf("%d lost, %d of %d pending pods waiting", n, waiting, len(pending))
		})
		// The losses stopped at about the threshold: each replica may have
		// had one in flight when away was held back.
		if max := target.LostThreshold + 2; n > max {
			t.Errorf("%d pods failed for a lost delegate, want at most %d", n, max)
		}
		t.Logf("%d pods failed for a lost delegate before away was held back", n)
	})
}
