package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// TestQuota checks a ClusterSource's quota in its target: with cpu=2 and
// pods of 500m, four of the source's pods are bound there and the others
// wait, told so at the source; a restart of the target's scheduler (once
// during the burst, once at rest) never lets more in; a candidate of
// another source is not held back; raising the quota lets exactly what
// fits schedule, without a restart. One source cluster only: a second
// source's candidate is created by hand in the target, which is what the
// plugin sees of any source.
func TestQuota(t *testing.T) {
	t.Parallel()
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{
		{Name: "src", Nodes: []sandbox.NodeSpec{{CPU: "4"}}},
		{Name: "tgt", Nodes: []sandbox.NodeSpec{{CPU: "16"}}},
	}})
	ctx := t.Context()
	src, tgt := s.Cluster("src"), s.Cluster("tgt")
	srcClient, tgtClient := src.Client(), tgt.Client()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: placementNS, Labels: map[string]string{protocol.NamespaceEnabledLabel: "true"}}}
	if _, err := srcClient.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := sandbox.StartAgent(ctx, tgt, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := sandbox.StartAgent(ctx, src, nil); err != nil {
		t.Fatal(err)
	}
	invite(t, src, tgt)
	setQuota(t, tgt, src.Name, "2")

	const pods = 6
	for i := range pods {
		if _, err := srcClient.CoreV1().Pods(placementNS).Create(ctx, optedInPod(fmt.Sprintf("q%d", i), "500m"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Mid-way: the candidates are being reserved and allowed.
	if err := tgt.Restart(ctx, sandbox.CandidateScheduler); err != nil {
		t.Fatal(err)
	}

	t.Run("four are bound, the others wait on the quota, told at the source", func(t *testing.T) {
		waitSourcePods(t, srcClient, "app", pods, func(p *corev1.Pod) bool { return true })
		waitFor(t, 120*time.Second, "4 candidates bound and 2 refused for the quota", func() (bool, string) {
			bound, refused := quotaCandidates(t, tgtClient, src.Name)
			return len(bound) == 4 && len(refused) == 2, fmt.Sprintf("bound %v, refused %v", bound, refused)
		})
		checkBound(t, tgtClient, src.Name, 4)
		_, refused := quotaCandidates(t, tgtClient, src.Name)
		source, err := srcClient.CoreV1().Pods(placementNS).Get(ctx, sourceNameOf(t, tgtClient, refused[0]), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		waitEvent(t, srcClient, source, "NoTargetAvailable", "quota")
	})

	t.Run("another source is not held back", func(t *testing.T) {
		other := candidatePod("other-1", "other")
		other.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}
		if _, err := tgtClient.CoreV1().Pods(placementNS).Create(ctx, other, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitPod(t, tgtClient, placementNS, other.Name, "Reserved", func(p *corev1.Pod) bool {
			var st protocol.State
			return json.Unmarshal([]byte(p.Annotations[protocol.StateAnnotation]), &st) == nil && st.Phase == protocol.PhaseReserved
		})
	})

	t.Run("a restarted scheduler keeps to the quota", func(t *testing.T) {
		restarted := time.Now()
		if err := tgt.Restart(ctx, sandbox.CandidateScheduler); err != nil {
			t.Fatal(err)
		}
		_, refused := quotaCandidates(t, tgtClient, src.Name)
		for _, name := range refused {
			waitRefusedSince(t, tgtClient, name, restarted)
		}
		checkBound(t, tgtClient, src.Name, 4)
	})

	t.Run("raising the quota lets in what fits", func(t *testing.T) {
		raised := time.Now()
		setQuota(t, tgt, src.Name, "2500m")
		waitFor(t, 60*time.Second, "5 candidates bound", func() (bool, string) {
			bound, refused := quotaCandidates(t, tgtClient, src.Name)
			return len(bound) == 5, fmt.Sprintf("bound %v, refused %v", bound, refused)
		})
		_, refused := quotaCandidates(t, tgtClient, src.Name)
		if len(refused) != 1 {
			t.Fatalf("after raising the quota by one pod's worth, %d candidates are refused, want 1", len(refused))
		}
		waitRefusedSince(t, tgtClient, refused[0], raised)
		checkBound(t, tgtClient, src.Name, 5)
	})
}

// setQuota sets the cpu quota of ClusterSource name in c.
func setQuota(t *testing.T, c *sandbox.Cluster, name, cpu string) {
	t.Helper()
	cs := &v1alpha1.ClusterSource{ObjectMeta: metav1.ObjectMeta{Name: name}}
	patch := fmt.Sprintf(`{"spec":{"quota":{"cpu":%q}}}`, cpu)
	if err := c.CRClient().Patch(t.Context(), cs, client.RawPatch("application/merge-patch+json", []byte(patch))); err != nil {
		t.Fatalf("setting the quota of ClusterSource %s: %v", name, err)
	}
}

// quotaCandidates lists cluster's candidates in the target: the bound ones,
// and the pending ones whose scheduler names the quota.
func quotaCandidates(t *testing.T, c kubernetes.Interface, cluster string) (bound, refused []string) {
	t.Helper()
	list, err := c.CoreV1().Pods(placementNS).List(t.Context(), metav1.ListOptions{
		LabelSelector: protocol.CandidateLabel + "=true," + protocol.SourceClusterLabel + "=" + cluster,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		switch {
		case p.Spec.NodeName != "":
			bound = append(bound, p.Name)
		case strings.Contains(unschedulable(&p), "quota"):
			refused = append(refused, p.Name)
		}
	}
	return bound, refused
}

func unschedulable(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return c.Message
		}
	}
	return ""
}

// checkBound fails unless at most want of cluster's candidates are bound. Bound candidates are not deleted in this
// test, so the count now is the most there ever were.
func checkBound(t *testing.T, c kubernetes.Interface, cluster string, want int) {
	t.Helper()
	bound, _ := quotaCandidates(t, c, cluster)
	if len(bound) > want {
		t.Fatalf("%d candidates of %s are bound (%v), more than the quota allows (%d)", len(bound), cluster, bound, want)
	}
}

func sourceNameOf(t *testing.T, c kubernetes.Interface, candidate string) string {
	t.Helper()
	p, err := c.CoreV1().Pods(placementNS).Get(t.Context(), candidate, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p.Annotations[protocol.SourceNameAnnotation]
}

// waitRefusedSince waits until the scheduler has refused candidate for the
// quota after since: proof that the scheduler running now looked at it.
func waitRefusedSince(t *testing.T, c kubernetes.Interface, candidate string, since time.Time) {
	t.Helper()
	selector := fields.Set{"involvedObject.name": candidate}.AsSelector().String()
	waitFor(t, 60*time.Second, "a quota refusal of "+candidate+" after "+since.Format(time.RFC3339Nano), func() (bool, string) {
		list, err := c.CoreV1().Events(placementNS).List(t.Context(), metav1.ListOptions{FieldSelector: selector})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range list.Items {
			last := e.LastTimestamp.Time
			if e.Series != nil {
				last = e.Series.LastObservedTime.Time
			} else if !e.EventTime.IsZero() {
				last = e.EventTime.Time
			}
			if e.Reason == "FailedScheduling" && strings.Contains(e.Message, "quota") && last.After(since) {
				return true, ""
			}
			seen = append(seen, fmt.Sprintf("%s %s: %s", last.Format(time.RFC3339Nano), e.Reason, e.Message))
		}
		return false, fmt.Sprintf("events %v", seen)
	})
}
