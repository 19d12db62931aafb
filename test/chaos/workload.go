package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// Sizes of the workload: modest, the machine is shared.
const (
	deploymentsPerCluster = 2
	maxDeploymentReplicas = 8
	statefulSetReplicas   = 3
	maxBarePods           = 8
	// fitCPU fits any node many times over; unfitCPU fits no node anywhere.
	fitCPU   = "100m"
	unfitCPU = "100"
)

// Workload creates and deletes opted-in pods, recreates pods under the same
// name, deletes StatefulSet pods and scales Deployments in every cluster.
// What it does is a function of its seed: the same seed gives the same
// sequence of actions (their outcomes depend on the faults and timing).
// It remembers what it created and did not delete, for the lost-pod check.
type Workload struct {
	NS       string
	Clusters map[string]kubernetes.Interface
	rand     *rand.Rand
	names    []string

	mu      sync.Mutex
	pods    map[string]*barePod // by "<cluster>/<name>"
	serial  int
	counts  map[string]int
	pending sync.WaitGroup
}

// barePod is what the workload knows of one pod it manages itself.
type barePod struct {
	cluster, name string
	uid           types.UID
	fits          bool
	// busy: being deleted and created again; uncertain: a call's outcome
	// is unknown (a timeout), so the pod is not expected either way.
	busy, uncertain bool
}

// NewWorkload returns a workload over the given clusters.
func NewWorkload(seed uint64, ns string, clusters map[string]kubernetes.Interface) *Workload {
	w := &Workload{NS: ns, Clusters: clusters, rand: rand.New(rand.NewPCG(seed, 0x776f726b)), pods: map[string]*barePod{}, counts: map[string]int{}}
	for name := range clusters {
		w.names = append(w.names, name)
	}
	sort.Strings(w.names)
	return w
}

// Counts returns what the workload did, by action.
func (w *Workload) Counts() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]int{}
	for k, v := range w.counts {
		out[k] = v
	}
	return out
}

func (w *Workload) count(what string) {
	w.mu.Lock()
	w.counts[what]++
	w.mu.Unlock()
}

// Setup creates each cluster's Deployments and StatefulSet.
func (w *Workload) Setup(ctx context.Context) error {
	for _, name := range w.names {
		client := w.Clusters[name]
		for i := range deploymentsPerCluster {
			if _, err := client.AppsV1().Deployments(w.NS).Create(ctx, deployment(fmt.Sprintf("%s-web-%d", name, i), 2), metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("creating a Deployment in %s: %w", name, err)
			}
		}
		if _, err := client.AppsV1().StatefulSets(w.NS).Create(ctx, statefulSet(name+"-db", statefulSetReplicas), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating a StatefulSet in %s: %w", name, err)
		}
	}
	return nil
}

// Run acts every period until ctx ends.
func (w *Workload) Run(ctx context.Context, period time.Duration) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(period):
		}
		w.step(ctx)
	}
}

// Wait waits for the pods being created again to be there.
func (w *Workload) Wait() { w.pending.Wait() }

// step draws one action and does it.
func (w *Workload) step(ctx context.Context) {
	cluster := w.names[w.rand.IntN(len(w.names))]
	client := w.Clusters[cluster]
	roll := w.rand.IntN(100)
	// Drawn whatever the action, so that one action's outcome never shifts
	// the sequence that follows.
	a, b := w.rand.IntN(1<<20), w.rand.IntN(1<<20)
	call, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	switch {
	case roll < 30:
		name := fmt.Sprintf("%s-web-%d", cluster, a%deploymentsPerCluster)
		replicas := b % (maxDeploymentReplicas + 1)
		patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
		if _, err := client.AppsV1().Deployments(w.NS).Patch(call, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			w.count("scale-failed")
			return
		}
		w.count("scaled")
	case roll < 55:
		if w.live(cluster) >= maxBarePods {
			w.deleteBare(call, cluster, a)
			return
		}
		w.createBare(call, cluster, b%10 != 0)
	case roll < 70:
		w.deleteBare(call, cluster, a)
	case roll < 85:
		w.recreateBare(ctx, cluster, a)
	default:
		name := fmt.Sprintf("%s-db-%d", cluster, a%statefulSetReplicas)
		if err := client.CoreV1().Pods(w.NS).Delete(call, name, metav1.DeleteOptions{}); err != nil {
			w.count("delete-failed")
			return
		}
		w.count("deleted-statefulset-pod")
	}
}

// live counts the bare pods of a cluster that are expected to exist.
func (w *Workload) live(cluster string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, p := range w.pods {
		if p.cluster == cluster {
			n++
		}
	}
	return n
}

// pick chooses one idle bare pod of a cluster, by the drawn number.
func (w *Workload) pick(cluster string, draw int) *barePod {
	w.mu.Lock()
	defer w.mu.Unlock()
	var idle []*barePod
	for _, p := range w.pods {
		if p.cluster == cluster && !p.busy {
			idle = append(idle, p)
		}
	}
	if len(idle) == 0 {
		return nil
	}
	sort.Slice(idle, func(i, j int) bool { return idle[i].name < idle[j].name })
	p := idle[draw%len(idle)]
	p.busy = true
	return p
}

func (w *Workload) createBare(ctx context.Context, cluster string, fits bool) {
	w.mu.Lock()
	w.serial++
	name := fmt.Sprintf("%s-pod-%d", cluster, w.serial)
	w.mu.Unlock()
	p := &barePod{cluster: cluster, name: name, fits: fits}
	created, err := w.Clusters[cluster].CoreV1().Pods(w.NS).Create(ctx, pod(name, fits), metav1.CreateOptions{})
	switch {
	case err == nil:
		p.uid = created.UID
		w.count("created")
		if !fits {
			w.count("created-unfit")
		}
	case isDefinite(err):
		w.count("create-refused")
		return
	default:
		p.uncertain = true
		w.count("create-failed")
	}
	w.mu.Lock()
	w.pods[cluster+"/"+name] = p
	w.mu.Unlock()
}

func (w *Workload) deleteBare(ctx context.Context, cluster string, draw int) {
	p := w.pick(cluster, draw)
	if p == nil {
		return
	}
	err := w.Clusters[cluster].CoreV1().Pods(w.NS).Delete(ctx, p.name, metav1.DeleteOptions{Preconditions: uidPrecondition(p.uid)})
	w.mu.Lock()
	defer w.mu.Unlock()
	p.busy = false
	switch {
	case err == nil:
		delete(w.pods, cluster+"/"+p.name)
		w.counts["deleted"]++
	case apierrors.IsNotFound(err) && p.uncertain:
		// A create whose answer was lost, and that created nothing.
		delete(w.pods, cluster+"/"+p.name)
	case apierrors.IsNotFound(err):
		// Gone without us: the lost-pod check reports it.
		w.counts["delete-found-nothing"]++
	default:
		p.uncertain = true
		w.counts["delete-failed"]++
	}
}

// recreateBare deletes a pod and, once it is gone, creates it again under
// the same name, as a StatefulSet controller does; it goes on in the
// background, and Wait waits for it.
func (w *Workload) recreateBare(ctx context.Context, cluster string, draw int) {
	p := w.pick(cluster, draw)
	if p == nil {
		return
	}
	pods := w.Clusters[cluster].CoreV1().Pods(w.NS)
	call, cancel := context.WithTimeout(ctx, 15*time.Second)
	err := pods.Delete(call, p.name, metav1.DeleteOptions{Preconditions: uidPrecondition(p.uid)})
	cancel()
	if err != nil {
		w.mu.Lock()
		p.busy, p.uncertain = false, p.uncertain || !apierrors.IsNotFound(err)
		w.counts["delete-failed"]++
		w.mu.Unlock()
		return
	}
	w.count("deleted")
	w.pending.Add(1)
	go func() {
		defer w.pending.Done()
		// Independent of the workload's end: a recreation under way
		// completes, so its pod is expected.
		bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), 4*time.Minute)
		defer cancel()
		uid, ok := w.createAgain(bg, pods, p)
		w.mu.Lock()
		defer w.mu.Unlock()
		p.busy = false
		if !ok {
			p.uncertain = true
			w.counts["recreate-failed"]++
			return
		}
		p.uid = uid
		w.counts["recreated"]++
		w.counts["created"]++
	}()
}

// createAgain waits until the pod of that name is gone, then creates it.
func (w *Workload) createAgain(ctx context.Context, pods interface {
	Get(context.Context, string, metav1.GetOptions) (*corev1.Pod, error)
	Create(context.Context, *corev1.Pod, metav1.CreateOptions) (*corev1.Pod, error)
}, p *barePod) (types.UID, bool) {
	old := p.uid
	for ctx.Err() == nil {
		call, cancel := context.WithTimeout(ctx, 15*time.Second)
		got, err := pods.Get(call, p.name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			created, err := pods.Create(call, pod(p.name, p.fits), metav1.CreateOptions{})
			cancel()
			if err == nil {
				return created.UID, true
			}
		case err == nil && got.UID != old && old != "":
			// An earlier create of ours whose answer was lost.
			cancel()
			return got.UID, true
		default:
			cancel()
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	return "", false
}

// Expected lists the bare pods that must still be there: created, not
// deleted, every call's outcome known.
func (w *Workload) Expected() []ExpectedPod {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []ExpectedPod
	for _, p := range w.pods {
		if !p.uncertain && !p.busy && p.uid != "" {
			out = append(out, ExpectedPod{Cluster: p.cluster, Namespace: w.NS, Name: p.name, UID: string(p.uid)})
		}
	}
	return out
}

// Workloads reads the replicas each controller was last asked for.
func (w *Workload) Workloads(ctx context.Context) ([]ExpectedWorkload, error) {
	var out []ExpectedWorkload
	for _, name := range w.names {
		client := w.Clusters[name]
		deps, err := client.AppsV1().Deployments(w.NS).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for _, d := range deps.Items {
			out = append(out, ExpectedWorkload{Cluster: name, Namespace: w.NS, App: d.Name, Replicas: int(ptr.Deref(d.Spec.Replicas, 1))})
		}
		sets, err := client.AppsV1().StatefulSets(w.NS).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for _, s := range sets.Items {
			out = append(out, ExpectedWorkload{Cluster: name, Namespace: w.NS, App: s.Name, Replicas: int(ptr.Deref(s.Spec.Replicas, 1))})
		}
	}
	return out, nil
}

// isDefinite reports whether a failed create surely created nothing.
// A webhook that cannot be called refuses the pod before it is stored.
func isDefinite(err error) bool {
	return apierrors.IsAlreadyExists(err) || apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err) ||
		apierrors.IsInternalError(err) && strings.Contains(err.Error(), "failed calling webhook")
}

func uidPrecondition(uid types.UID) *metav1.Preconditions {
	if uid == "" {
		return nil
	}
	return &metav1.Preconditions{UID: &uid}
}

// podSpec is an opted-in pod's: it tolerates a NotReady or unreachable
// node for ever, so no eviction ever removes a pod the checker expects.
func podSpec(cpu string) corev1.PodSpec {
	return corev1.PodSpec{
		Containers: []corev1.Container{{
			Name:      "app",
			Image:     "registry.example/app:1",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}},
		}},
		Tolerations: []corev1.Toleration{
			{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
			{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		},
	}
}

func pod(name string, fits bool) *corev1.Pod {
	cpu, labels := fitCPU, map[string]string{protocol.ElectLabel: "true"}
	if !fits {
		cpu, labels[FitsLabel] = unfitCPU, "false"
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: podSpec(cpu)}
}

func template(app string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{AppLabel: app, protocol.ElectLabel: "true"}},
		Spec:       podSpec(fitCPU),
	}
}

func deployment(name string, replicas int32) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{AppLabel: name}},
			Template: template(name),
		},
	}
}

func statefulSet(name string, replicas int32) *appsv1.StatefulSet {
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To(replicas),
			ServiceName:         name,
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: map[string]string{AppLabel: name}},
			Template:            template(name),
		},
	}
}
