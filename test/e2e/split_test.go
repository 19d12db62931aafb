package e2e

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/sourcespec"
	"github.com/flotilla-dev/flotilla/pkg/split"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

const splitNS = "split"

// splitMinReady is the Deployment's minReadySeconds: a replacement is not
// available at once, so a rebalancer that did not wait for it would leave
// two pods unavailable, which the test sees.
const splitMinReady = 3

// TestCapacitySplit runs the on-demand/spot split in one cluster with no
// target, the webhook splitting the cluster's own pods and nothing else of
// Flotilla in their path: two on-demand and two spot nodes, a Deployment
// with max-on-demand 3 and 5 replicas gets 3 pods on on-demand nodes and 2
// on spot; scaled to 3 it keeps the on-demand ones; after the agent is
// killed and restarted, scaled to 5 again it still has 3 on-demand, placed
// by the webhook; with the annotation lowered to 1 the rebalancer replaces
// pods one at a time, never two unavailable at once, to 1 on-demand and 4
// spot; a bad annotation is told on the Deployment and its pods still run.
func TestCapacitySplit(t *testing.T) {
	t.Parallel()
	onDemand := map[string]string{protocol.DefaultCapacityNodeLabel: protocol.CapacityOnDemand}
	spot := map[string]string{protocol.DefaultCapacityNodeLabel: protocol.CapacitySpot}
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{{Name: "solo", Nodes: []sandbox.NodeSpec{
		{Name: "od-1", Labels: onDemand}, {Name: "od-2", Labels: onDemand},
		{Name: "spot-1", Labels: spot}, {Name: "spot-2", Labels: spot},
	}}}})
	ctx := t.Context()
	c := s.Cluster("solo")
	client := c.Client()
	release, err := c.InstallRelease(ctx, sandbox.ReleaseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A namespace of its own, not opted in to multi-cluster scheduling.
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: splitNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dep := splitDeployment("web", 5, "3")
	if _, err := client.AppsV1().Deployments(splitNS).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	var onDemandPods []string
	t.Run("5 replicas with max-on-demand 3: 3 pods on on-demand nodes, 2 on spot", func(t *testing.T) {
		pods := waitSplit(t, client, "web", 5, 3)
		slots := map[string]bool{}
		for _, p := range pods {
			if p.Spec.SchedulerName != corev1.DefaultSchedulerName || sourcespec.Saved(&p) {
				t.Errorf("pod %s went through multi-cluster scheduling (scheduler %q)", p.Name, p.Spec.SchedulerName)
			}
			place, ok := split.PlaceOf(p.Labels)
			if !ok || p.Annotations[protocol.PodDeletionCostAnnotation] == "" {
				t.Errorf("pod %s has no place: labels %v, annotations %v", p.Name, p.Labels, p.Annotations)
			}
			if place.OnDemand {
				slots[p.Labels[protocol.OnDemandSlotLabel]] = true
				onDemandPods = append(onDemandPods, p.Name)
			}
		}
		if !slots["0"] || !slots["1"] || !slots["2"] {
			t.Errorf("on-demand slots %v, want 0, 1 and 2", slots)
		}
	})

	t.Run("scaled to 3: the spot pods are the ones removed", func(t *testing.T) {
		scaleDeployment(t, client, "web", 3)
		pods := waitSplit(t, client, "web", 3, 3)
		var names []string
		for _, p := range pods {
			names = append(names, p.Name)
		}
		sort.Strings(names)
		sort.Strings(onDemandPods)
		if !slices.Equal(names, onDemandPods) {
			t.Errorf("pods left %v, want the on-demand ones %v", names, onDemandPods)
		}
	})

	t.Run("the agent killed and restarted: scaled to 5, still 3 on-demand", func(t *testing.T) {
		crashAgent(t, release.Agent)
		// The webhook, not the rebalancer, places the new pods: none is
		// replaced.
		watch := watchAvailability(t, client, "web", 3)
		scaleDeployment(t, client, "web", 5)
		waitSplit(t, client, "web", 5, 3)
		watch.stop()
		if n := watch.evictions(); n != 0 {
			t.Errorf("%d pods were replaced: the restarted agent's webhook did not place the new pods", n)
		}
	})

	t.Run("max-on-demand lowered to 1: rebalanced one pod at a time to 1 on-demand and 4 spot", func(t *testing.T) {
		waitAvailable(t, client, "web")
		watch := watchAvailability(t, client, "web", 5)
		annotateDeployment(t, client, "web", "1")
		waitSplit(t, client, "web", 5, 1)
		if worst := watch.stop(); worst != "" {
			t.Errorf("more than one pod of the workload was unavailable at once: %s", worst)
		}
		if watch.evictions() < 2 {
			t.Errorf("%d pods replaced, want at least the 2 on-demand pods beyond the new max", watch.evictions())
		}
		waitWorkloadEvent(t, client, "web", split.ReasonRebalancing, "on-demand")
	})

	t.Run("a bad annotation: a Warning on the Deployment, and its pods still run", func(t *testing.T) {
		annotateDeployment(t, client, "web", "three")
		waitWorkloadEvent(t, client, "web", split.ReasonInvalidMaxOnDemand, `"three"`)
		scaleDeployment(t, client, "web", 6)
		pods := waitReadyPods(t, client, "web", 6)
		unplaced := 0
		for _, p := range pods {
			if _, ok := split.PlaceOf(p.Labels); !ok {
				unplaced++
			}
		}
		if unplaced != 1 {
			t.Errorf("%d pods without a place, want the new one placed as if unannotated", unplaced)
		}
	})

	t.Run("a PlacementPolicy's capacityType splits a workload without the annotation", func(t *testing.T) {
		policy := &v1alpha1.PlacementPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "batch", Namespace: splitNS},
			Spec: v1alpha1.PlacementPolicySpec{
				PodSelector:  &metav1.LabelSelector{MatchLabels: map[string]string{"app": "batch"}},
				CapacityType: &v1alpha1.CapacityTypeSplit{MaxOnDemand: 1},
			},
		}
		if err := c.CRClient().Create(ctx, policy); err != nil {
			t.Fatal(err)
		}
		dep := splitDeployment("batch", 3, "")
		dep.Annotations = nil
		// Pods admitted before the agent's cache holds the policy come
		// without a place; the rebalancer then replaces them: the end is
		// the same.
		if _, err := client.AppsV1().Deployments(splitNS).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitSplit(t, client, "batch", 3, 1)
	})
}

func splitDeployment(name string, replicas int32, maxOnDemand string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{protocol.MaxOnDemandAnnotation: maxOnDemand}},
		Spec: appsv1.DeploymentSpec{
			Replicas:        ptr.To(replicas),
			MinReadySeconds: splitMinReady,
			Selector:        &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name, protocol.CapacitySplitLabel: "true"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
			},
		},
	}
}

func scaleDeployment(t *testing.T, client kubernetes.Interface, name string, replicas int32) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
	if _, err := client.AppsV1().Deployments(splitNS).Patch(t.Context(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("scaling %s to %d: %v", name, replicas, err)
	}
}

func annotateDeployment(t *testing.T, client kubernetes.Interface, name, maxOnDemand string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, protocol.MaxOnDemandAnnotation, maxOnDemand)
	if _, err := client.AppsV1().Deployments(splitNS).Patch(t.Context(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("annotating %s: %v", name, err)
	}
}

// waitReadyPods waits until the Deployment has exactly want pods, all
// running and ready on a node, none being deleted, and returns them.
func waitReadyPods(t *testing.T, client kubernetes.Interface, app string, want int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	waitFor(t, 120*time.Second, fmt.Sprintf("%d ready pods of %s", want, app), func() (bool, string) {
		list, err := client.CoreV1().Pods(splitNS).List(t.Context(), metav1.ListOptions{LabelSelector: "app=" + app})
		if err != nil {
			return false, err.Error()
		}
		pods = list.Items
		ready := 0
		for i := range pods {
			if podReady(&pods[i]) {
				ready++
			}
		}
		return ready == want && len(pods) == want, fmt.Sprintf("%d pods, %d ready", len(pods), ready)
	})
	return pods
}

// waitSplit waits until the Deployment has want ready pods, onDemand of
// them on on-demand nodes and the others on spot nodes, each labelled with
// the capacity type of its node, and returns them.
func waitSplit(t *testing.T, client kubernetes.Interface, app string, want, onDemand int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	waitFor(t, 180*time.Second, fmt.Sprintf("%d pods of %s, %d on on-demand nodes", want, app, onDemand), func() (bool, string) {
		list, err := client.CoreV1().Pods(splitNS).List(t.Context(), metav1.ListOptions{LabelSelector: "app=" + app})
		if err != nil {
			return false, err.Error()
		}
		pods = list.Items
		capacity, err := nodeCapacity(t, client)
		if err != nil {
			return false, err.Error()
		}
		ready, onNodes := 0, map[string]int{}
		var wrong []string
		for i := range pods {
			p := &pods[i]
			if !podReady(p) {
				continue
			}
			ready++
			onNodes[capacity[p.Spec.NodeName]]++
			if p.Labels[protocol.CapacityTypeLabel] != capacity[p.Spec.NodeName] {
				wrong = append(wrong, fmt.Sprintf("%s labelled %q on a %q node", p.Name, p.Labels[protocol.CapacityTypeLabel], capacity[p.Spec.NodeName]))
			}
		}
		ok := len(pods) == want && ready == want && onNodes[protocol.CapacityOnDemand] == onDemand && onNodes[protocol.CapacitySpot] == want-onDemand && len(wrong) == 0
		return ok, fmt.Sprintf("%d pods, %d ready, by node capacity %v, mislabelled %v", len(pods), ready, onNodes, wrong)
	})
	return pods
}

func nodeCapacity(t *testing.T, client kubernetes.Interface) (map[string]string, error) {
	nodes, err := client.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, n := range nodes.Items {
		out[n.Name] = n.Labels[protocol.DefaultCapacityNodeLabel]
	}
	return out, nil
}

func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Spec.NodeName == "" || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podAvailable is a Deployment's availability of a pod at now: ready for
// splitMinReady, by the Ready condition's transition time as the
// Deployment controller reads it.
func podAvailable(p *corev1.Pod, now time.Time) bool {
	if !podReady(p) {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return !now.Before(c.LastTransitionTime.Add(splitMinReady * time.Second))
		}
	}
	return false
}

// waitAvailable waits until the Deployment counts every replica available.
func waitAvailable(t *testing.T, client kubernetes.Interface, name string) {
	t.Helper()
	waitFor(t, 60*time.Second, "Deployment "+name+" available", func() (bool, string) {
		d, err := client.AppsV1().Deployments(splitNS).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		st := d.Status
		return st.ObservedGeneration >= d.Generation && st.AvailableReplicas == *d.Spec.Replicas && st.Replicas == *d.Spec.Replicas,
			fmt.Sprintf("%d available of %d", st.AvailableReplicas, *d.Spec.Replicas)
	})
}

// availabilityWatch sees every change of a workload's pods and remembers
// the worst moment: fewer than all but one pods available (ready for
// splitMinReady, not being deleted), or more than one being deleted.
type availabilityWatch struct {
	mu       sync.Mutex
	replicas int
	worst    string
	deleted  map[string]bool
	stopped  chan struct{}
}

func watchAvailability(t *testing.T, client kubernetes.Interface, app string, replicas int) *availabilityWatch {
	t.Helper()
	w := &availabilityWatch{replicas: replicas, deleted: map[string]bool{}, stopped: make(chan struct{})}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(splitNS),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = "app=" + app }))
	informer := factory.Core().V1().Pods().Informer()
	store := informer.GetStore()
	check := func(obj any) {
		w.mu.Lock()
		defer w.mu.Unlock()
		if p, ok := obj.(*corev1.Pod); ok && p.DeletionTimestamp != nil {
			w.deleted[p.Name] = true
		}
		available, terminating := 0, 0
		var states []string
		now := time.Now()
		for _, o := range store.List() {
			p := o.(*corev1.Pod)
			switch {
			case p.DeletionTimestamp != nil:
				terminating++
				states = append(states, p.Name+" terminating")
			case podAvailable(p, now):
				available++
			default:
				states = append(states, p.Name+" not available")
			}
		}
		if available < w.replicas-1 || terminating > 1 {
			w.worst = fmt.Sprintf("%d of %d available, %d terminating (%s)", available, w.replicas, terminating, strings.Join(states, ", "))
		}
	}
	if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    check,
		UpdateFunc: func(_, obj any) { check(obj) },
		DeleteFunc: check,
	}); err != nil {
		t.Fatal(err)
	}
	go informer.Run(w.stopped)
	if !toolscache.WaitForCacheSync(t.Context().Done(), informer.HasSynced) {
		t.Fatal("the pod watch did not sync")
	}
	return w
}

// stop ends the watch and returns the worst moment seen, "" when never
// more than one pod was unavailable.
func (w *availabilityWatch) stop() string {
	close(w.stopped)
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.worst
}

// evictions is how many pods the watch saw being deleted.
func (w *availabilityWatch) evictions() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.deleted)
}

// waitWorkloadEvent waits for an Event with reason on Deployment name
// whose message holds word.
func waitWorkloadEvent(t *testing.T, client kubernetes.Interface, name, reason, word string) {
	t.Helper()
	selector := fields.Set{"involvedObject.kind": "Deployment", "involvedObject.name": name}.AsSelector().String()
	waitEventOf(t, client, splitNS, selector, "Deployment "+name, 60*time.Second, reason, word)
}
