package e2e

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// acrossNS is the namespace of TestCapacitySplitAcrossTargets, opted in to
// multi-cluster scheduling in every cluster.
const acrossNS = "fleet"

// TestCapacitySplitAcrossTargets runs the on-demand/spot split on
// multi-cluster pods, where the capacity type is a property of the targets'
// nodes: the source "src" is its own target with one on-demand and one spot
// node, target "od" has on-demand nodes only and target "spot" spot nodes
// only. A Deployment of 5 opted-in replicas with max-on-demand 3 runs, as
// seen through each pod's delegate, 3 pods on on-demand nodes and 2 on spot
// nodes, each source pod labelled with the capacity type of its delegate's
// node; scaled to 3 it keeps the on-demand pods (the spot ones go first by
// their deletion cost); after the source agent is killed (SIGKILL) and
// restarted, scaled to 5 again the 2 new pods go to spot and none of the 3
// on-demand pods is replaced.
//
// It catches a split that does not reach the targets: a webhook that does
// not place multi-cluster pods, or places them after their spec is saved
// for the candidates (src's scheduler may then put a delegate on a node of
// the other capacity type than its source pod's label says), a deletion
// cost that does not rank spot pods first, and a restarted agent that
// forgets the slots its pods hold.
func TestCapacitySplitAcrossTargets(t *testing.T) {
	t.Parallel()
	onDemand := map[string]string{protocol.DefaultCapacityNodeLabel: protocol.CapacityOnDemand}
	spot := map[string]string{protocol.DefaultCapacityNodeLabel: protocol.CapacitySpot}
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{
		{Name: "src", Nodes: []sandbox.NodeSpec{{Name: "src-od", Labels: onDemand}, {Name: "src-spot", Labels: spot}}},
		{Name: "od", Nodes: []sandbox.NodeSpec{{Name: "od-1", Labels: onDemand}}},
		{Name: "spot", Nodes: []sandbox.NodeSpec{{Name: "spot-1", Labels: spot}}},
	}})
	ctx := t.Context()
	for _, c := range s.Clusters {
		createNamespace(t, c.Client(), acrossNS)
	}
	agent, err := sandbox.StartAgent(ctx, s.Cluster("src"), s.Clusters)
	if err != nil {
		t.Fatal(err)
	}
	src := s.Cluster("src").Client()
	dep := optedInDeployment("web", 5, "100m")
	dep.Annotations = map[string]string{protocol.MaxOnDemandAnnotation: "3"}
	if _, err := src.AppsV1().Deployments(acrossNS).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	var onDemandPods []string
	t.Run("5 replicas with max-on-demand 3: 3 delegates on on-demand nodes, 2 on spot", func(t *testing.T) {
		placed := waitSplitAcross(t, s, "web", 5, 3)
		onDemandPods = podsOf(placed, protocol.CapacityOnDemand)
	})

	t.Run("scaled to 3: the spot pods are the ones removed", func(t *testing.T) {
		if onDemandPods == nil {
			t.Skip("no split to scale down")
		}
		scaleAcross(t, src, "web", 3)
		placed := waitSplitAcross(t, s, "web", 3, 3)
		if left := slices.Sorted(maps.Keys(placed)); !slices.Equal(left, onDemandPods) {
			t.Errorf("pods left %v, want the on-demand ones %v", left, onDemandPods)
		}
	})

	t.Run("the agent killed and restarted: scaled to 5, the 2 new pods go to spot", func(t *testing.T) {
		if onDemandPods == nil {
			t.Skip("no split to scale up")
		}
		crashAgent(t, agent)
		// The restarted agent's webhook, not its rebalancer, places the
		// new pods: no pod of the workload is deleted on the way.
		deletions := watchDeletions(t, src, "web")
		scaleAcross(t, src, "web", 5)
		placed := waitSplitAcross(t, s, "web", 5, 3)
		if deleted := deletions.stop(); len(deleted) != 0 {
			t.Errorf("pods %v were deleted: the restarted agent did not place the new pods where its split wanted them", deleted)
		}
		if kept := podsOf(placed, protocol.CapacityOnDemand); !slices.Equal(kept, onDemandPods) {
			t.Errorf("on-demand pods %v, want the 3 that were there before the restart %v", kept, onDemandPods)
		}
	})
}

// waitSplitAcross waits until Deployment app of the source cluster src has
// want source pods, all ready on virtual nodes, each with exactly one bound
// delegate (and the workload no other), in the target its virtual node
// names; onDemand of the delegates on nodes labelled on-demand and the
// others on spot nodes; each source pod labelled with the capacity type of
// its delegate's node. It returns the capacity type of each source pod by
// name.
func waitSplitAcross(t *testing.T, s *sandbox.Sandbox, app string, want, onDemand int) map[string]string {
	t.Helper()
	ctx := t.Context()
	src := s.Cluster("src").Client()
	var placed map[string]string
	var byNode map[string]int
	waitFor(t, 120*time.Second, fmt.Sprintf("%d pods of %s, %d of their delegates on on-demand nodes and the others on spot", want, app, onDemand), func() (bool, string) {
		list, err := src.CoreV1().Pods(acrossNS).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app + ",!" + protocol.CandidateLabel})
		if err != nil {
			return false, err.Error()
		}
		// Where each source pod's bound delegates are: cluster/node.
		delegates, capacity, bound := map[string][]string{}, map[string]string{}, 0
		for _, c := range s.Clusters {
			nodes, err := c.Client().CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err.Error()
			}
			for _, n := range nodes.Items {
				capacity[c.Name+"/"+n.Name] = n.Labels[protocol.DefaultCapacityNodeLabel]
			}
			cands, err := c.Client().CoreV1().Pods(acrossNS).List(ctx, metav1.ListOptions{LabelSelector: protocol.CandidateLabel + "=true"})
			if err != nil {
				return false, err.Error()
			}
			for _, p := range cands.Items {
				if p.DeletionTimestamp != nil || p.Spec.NodeName == "" || !ofApp(&p, app) {
					continue
				}
				bound++
				uid := p.Labels[protocol.SourceUIDLabel]
				delegates[uid] = append(delegates[uid], c.Name+"/"+p.Spec.NodeName)
			}
		}
		placed = map[string]string{}
		byCapacity := map[string]int{}
		byNode = map[string]int{}
		var wrong []string
		for i := range list.Items {
			p := &list.Items[i]
			target, onVirtual := strings.CutPrefix(p.Spec.NodeName, "flotilla-")
			switch where := delegates[string(p.UID)]; {
			case !onVirtual || !podReady(p):
				wrong = append(wrong, fmt.Sprintf("%s not ready on a virtual node (node %q, phase %s)", p.Name, p.Spec.NodeName, p.Status.Phase))
			case len(where) != 1:
				wrong = append(wrong, fmt.Sprintf("%s has bound delegates %v", p.Name, where))
			case !strings.HasPrefix(where[0], target+"/"):
				wrong = append(wrong, fmt.Sprintf("%s is on %s but its delegate on %s", p.Name, p.Spec.NodeName, where[0]))
			case p.Labels[protocol.CapacityTypeLabel] != capacity[where[0]]:
				wrong = append(wrong, fmt.Sprintf("%s labelled %q, its delegate on %s, a %q node", p.Name, p.Labels[protocol.CapacityTypeLabel], where[0], capacity[where[0]]))
			default:
				placed[p.Name] = capacity[where[0]]
				byCapacity[capacity[where[0]]]++
				byNode[where[0]]++
			}
		}
		ok := len(list.Items) == want && len(placed) == want && bound == want &&
			byCapacity[protocol.CapacityOnDemand] == onDemand && byCapacity[protocol.CapacitySpot] == want-onDemand
		return ok, fmt.Sprintf("%d source pods, %d bound delegates, by delegate node capacity %v, not placed: %v", len(list.Items), bound, byCapacity, wrong)
	})
	t.Logf("delegates of %s by target/node: %v", app, byNode)
	return placed
}

// podsOf returns the sorted names of the pods placed on capacity type kind.
func podsOf(placed map[string]string, kind string) []string {
	var names []string
	for name, c := range placed {
		if c == kind {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

func scaleAcross(t *testing.T, client kubernetes.Interface, name string, replicas int32) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
	if _, err := client.AppsV1().Deployments(acrossNS).Patch(t.Context(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("scaling %s to %d: %v", name, replicas, err)
	}
}

// deletionWatch remembers every source pod of a workload that it sees
// being deleted.
type deletionWatch struct {
	mu      sync.Mutex
	deleted map[string]bool
	stopped chan struct{}
}

func watchDeletions(t *testing.T, client kubernetes.Interface, app string) *deletionWatch {
	t.Helper()
	w := &deletionWatch{deleted: map[string]bool{}, stopped: make(chan struct{})}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(acrossNS),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = "app=" + app + ",!" + protocol.CandidateLabel }))
	informer := factory.Core().V1().Pods().Informer()
	seen := func(obj any, gone bool) {
		if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj, gone = tomb.Obj, true
		}
		p, ok := obj.(*corev1.Pod)
		if !ok || (!gone && p.DeletionTimestamp == nil) {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		w.deleted[p.Name] = true
	}
	if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { seen(obj, false) },
		UpdateFunc: func(_, obj any) { seen(obj, false) },
		DeleteFunc: func(obj any) { seen(obj, true) },
	}); err != nil {
		t.Fatal(err)
	}
	go informer.Run(w.stopped)
	if !toolscache.WaitForCacheSync(t.Context().Done(), informer.HasSynced) {
		t.Fatal("the pod watch did not sync")
	}
	return w
}

// stop ends the watch and returns the sorted names of the pods it saw
// being deleted.
func (w *deletionWatch) stop() []string {
	close(w.stopped)
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Sorted(maps.Keys(w.deleted))
}
