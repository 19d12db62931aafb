package scenario

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/test/chaos"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// runConfig is how one scenario runs.
type runConfig struct {
	// settle bounds the wait, after each phase, for both worlds to settle.
	settle time.Duration
	// binDir holds the binaries ("" for the checkout's bin/).
	binDir string
	// agentValues are the chart values of the source agent's release.
	agentValues []string
}

// outcome of one run.
type outcome struct {
	violations []chaos.Violation
	summary    string
}

// world is a running scenario: the sandbox, the agent, the checkers.
type world struct {
	t        *testing.T
	sc       Scenario
	cfg      runConfig
	sb       *sandbox.Sandbox
	src      *sandbox.Cluster
	oracle   kubernetes.Interface
	clients  map[string]kubernetes.Interface // source and remotes
	agent    *sandbox.Agent
	holes    map[string]*sandbox.Forwarder // per remote cluster
	targets  []Target                      // live
	desired  map[string]int32              // live workloads
	spread   *SpreadChecker
	protocol *chaos.Checker
	faults   map[string]int
	// mu guards faults against the background faults; background holds
	// them, waited for before the final checks.
	mu         sync.Mutex
	background sync.WaitGroup
}

// runScenario starts the fleet and the oracle, runs the script in both,
// and returns what the checkers found.
func runScenario(t *testing.T, sc Scenario, cfg runConfig) outcome {
	start := time.Now()
	w := &world{t: t, sc: sc, cfg: cfg, clients: map[string]kubernetes.Interface{}, holes: map[string]*sandbox.Forwarder{},
		desired: map[string]int32{}, faults: map[string]int{}}
	w.startClusters()
	w.startFlotilla()
	up := time.Since(start)

	ctx := t.Context()
	watchCtx, stopWatches := context.WithCancel(ctx)
	var watches []*chaos.Watch
	var watching sync.WaitGroup
	for _, name := range append([]string{SourceCluster}, sc.Fleet.Remotes...) {
		wa := newWatch(name, w.clients[name], w.protocol, w.spread)
		watches = append(watches, wa)
		watching.Go(func() { wa.Run(watchCtx) })
	}

	var settleViolations []chaos.Violation
	var phaseTimes []string
	var final map[string][2]int
	for i, ph := range sc.Phases {
		phaseStart := time.Now()
		for _, a := range ph.Actions {
			w.do(ctx, a)
		}
		vs, placed, took := w.settle(ctx)
		final = placed
		phaseTimes = append(phaseTimes, took.Round(time.Second).String())
		for _, v := range vs {
			v.Detail = fmt.Sprintf("after phase %d: %s", i, v.Detail)
			settleViolations = append(settleViolations, v)
		}
		t.Logf("scenario %d: phase %d (%s) settled in %s (%d violations left); Flotilla/kube-scheduler placed %v",
			sc.Seed, i, phaseActions(ph), time.Since(phaseStart).Round(time.Second), len(vs), formatPlaced(placed))
	}
	w.background.Wait()
	stopWatches()
	watching.Wait()
	violations := w.protocol.Finish(chaos.Snapshot{}, chaos.Expectations{})
	violations = append(violations, w.spread.Violations()...)
	violations = append(violations, settleViolations...)
	sort.SliceStable(violations, func(i, j int) bool { return kindIndex(violations[i].Kind) < kindIndex(violations[j].Kind) })

	transitions, bound, unjudged := w.protocol.Counts()
	var gaps int64
	for _, wa := range watches {
		gaps += wa.Gaps()
	}
	summary := fmt.Sprintf("seed=%d up=%s total=%s phases settled in %v | faults %v | observed transitions=%d bound=%d elections-spread-judged=%d unjudged=%d watch-gaps=%d | final Flotilla/kube-scheduler %s | violations %s",
		sc.Seed, up.Round(time.Second), time.Since(start).Round(time.Second), phaseTimes, w.faults, transitions, bound, w.spread.Judged(), unjudged, gaps,
		formatPlaced(final), chaos.FormatCounts(AllKinds, CountKinds(violations)))
	if bound == 0 && anyReplicas(sc) {
		violations = append(violations, chaos.Violation{Kind: chaos.Stuck, Detail: "no candidate was ever seen bound: the run placed nothing"})
	}
	return outcome{violations: violations, summary: summary}
}

func anyReplicas(sc Scenario) bool {
	for _, w := range sc.Workloads {
		if w.Replicas > 0 {
			return true
		}
	}
	return false
}

func phaseActions(ph Phase) string {
	var out []string
	for _, a := range ph.Actions {
		out = append(out, a.String())
	}
	return strings.Join(out, "; ")
}

func formatPlaced(placed map[string][2]int) string {
	var out []string
	for _, app := range sortedKeys(placed) {
		out = append(out, fmt.Sprintf("%s %d/%d", app, placed[app][0], placed[app][1]))
	}
	return "{" + strings.Join(out, ", ") + "}"
}

// startClusters starts the source, the remote clusters and the oracle,
// whose nodes are every cluster's nodes and whose only scheduler profile is
// kube-scheduler's default-scheduler.
func (w *world) startClusters() {
	t, sc := w.t, w.sc
	spec := func(n Node) sandbox.NodeSpec {
		return sandbox.NodeSpec{Name: n.Name, Labels: n.Labels, CPU: n.CPU, Memory: n.Memory, Pods: n.Pods}
	}
	var clusters []sandbox.ClusterSpec
	var oracleNodes []sandbox.NodeSpec
	for _, name := range append([]string{SourceCluster}, sc.Fleet.Remotes...) {
		var nodes []sandbox.NodeSpec
		for _, n := range sc.Fleet.ClusterNodes(name) {
			nodes = append(nodes, spec(n))
			oracleNodes = append(oracleNodes, spec(n))
		}
		clusters = append(clusters, sandbox.ClusterSpec{Name: name, Nodes: nodes})
	}
	clusters = append(clusters, sandbox.ClusterSpec{Name: OracleCluster, Nodes: oracleNodes,
		WithoutRelease: true, SchedulerConfig: sandbox.PlainSchedulerConfig})
	w.sb = sandbox.ForTest(t, sandbox.Options{BinDir: w.cfg.binDir, Clusters: clusters})
	w.src = w.sb.Cluster(SourceCluster)
	w.oracle = w.sb.Cluster(OracleCluster).Client()
	ctx := t.Context()
	for _, c := range w.sb.Clusters {
		labels := map[string]string{}
		if c.Name != OracleCluster {
			w.clients[c.Name] = c.Client()
			labels[protocol.NamespaceEnabledLabel] = "true"
		}
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace, Labels: labels}}
		if _, err := c.Client().CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	nodes := map[NodeRef]FleetNode{}
	for _, n := range sc.Fleet.Nodes {
		alloc := corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse(n.CPU), corev1.ResourceMemory: resource.MustParse(n.Memory),
			corev1.ResourcePods: *resource.NewQuantity(int64(n.Pods), resource.DecimalSI),
		}
		nodes[NodeRef{n.Cluster, n.Name}] = FleetNode{Labels: n.Labels, Allocatable: alloc}
	}
	policies := map[string]Policy{}
	for _, wl := range sc.Workloads {
		if wl.Policy != nil {
			policies[wl.Name] = *wl.Policy
		}
	}
	w.spread = NewSpreadChecker(nodes, policies)
	w.protocol = chaos.NewChecker()
}

// startFlotilla installs Flotilla's release in every cluster but the
// oracle, runs the source's agent and the remote clusters' (which serve
// their invitations), invites the source into each remote cluster (a
// ClusterSource; its kubeconfig Secret, through a forwarder the fault
// injector can blackhole, serves a ClusterTarget and a namespaced Target
// alike), makes the self targets, and waits until every target is Ready.
func (w *world) startFlotilla() {
	t, sc, ctx := w.t, w.sc, w.t.Context()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for _, name := range append([]string{SourceCluster}, sc.Fleet.Remotes...) {
		c := w.sb.Cluster(name)
		wg.Go(func() {
			opts := sandbox.ReleaseOptions{}
			if name == SourceCluster {
				opts.Set = append(opts.Set, w.cfg.agentValues...)
			}
			a, err := sandbox.StartAgentWith(ctx, c, nil, opts)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("agent of %s: %w", name, err))
				return
			}
			if name == SourceCluster {
				w.agent = a
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	cr := w.src.CRClient()
	for _, rc := range sc.Fleet.Remotes {
		data := w.invite(ctx, w.sb.Cluster(rc))
		for _, tg := range sc.Fleet.Targets {
			if tg.Cluster != rc {
				continue
			}
			ns := tg.Namespace
			if ns == "" {
				ns = sandbox.AgentNamespace
			}
			secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "flotilla-target-" + tg.Name, Namespace: ns}, Data: data}
			if err := cr.Create(ctx, secret); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
			w.createTarget(ctx, tg, secret.Name)
		}
	}
	for _, tg := range sc.Fleet.Targets {
		if tg.Self() {
			w.createTarget(ctx, tg, "")
		}
	}
	w.targets = slices.Clone(sc.Fleet.Targets)
	for _, tg := range sc.Fleet.Targets {
		key := client.ObjectKey{Namespace: tg.Namespace, Name: tg.Name}
		if err := w.src.WaitTarget(ctx, key, 90*time.Second, func(s *v1alpha1.TargetStatus) bool {
			return meta.IsStatusConditionTrue(s.Conditions, v1alpha1.TargetReady)
		}); err != nil {
			t.Fatal(err)
		}
	}
	for _, wl := range sc.Workloads {
		if p := PlacementPolicyOf(wl); p != nil {
			if err := cr.Create(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// invite makes remote cluster rc invite the source into Namespace, as an
// operator would (a ClusterSource), and returns its kubeconfig Secret's
// data with the API server's address replaced by a forwarder's.
func (w *world) invite(ctx context.Context, rc *sandbox.Cluster) map[string][]byte {
	t := w.t
	hole, err := sandbox.NewForwarder(strings.TrimPrefix(rc.Host, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hole.Close)
	w.holes[rc.Name] = hole
	tcl := rc.CRClient()
	cs := &v1alpha1.ClusterSource{ObjectMeta: metav1.ObjectMeta{Name: SourceCluster}}
	cs.Spec.ClusterName = SourceCluster
	cs.Spec.Identity.ManagedServiceAccount = &v1alpha1.ManagedServiceAccount{}
	cs.Spec.Namespaces = []string{Namespace}
	cs.Spec.CreateNamespaces = true
	if err := tcl.Create(ctx, cs); err != nil {
		t.Fatal(err)
	}
	var secretName string
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		got := &v1alpha1.ClusterSource{}
		if err := tcl.Get(ctx, client.ObjectKeyFromObject(cs), got); err != nil {
			return false, nil
		}
		secretName = got.Status.KubeconfigSecret
		return meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.SourceReady) && secretName != "", nil
	}); err != nil {
		t.Fatalf("ClusterSource of %s not Ready: %v", rc.Name, err)
	}
	secret := &corev1.Secret{}
	if err := tcl.Get(ctx, client.ObjectKey{Namespace: sandbox.AgentNamespace, Name: secretName}, secret); err != nil {
		t.Fatal(err)
	}
	data := map[string][]byte{}
	for k, v := range secret.Data {
		data[k] = v
	}
	if !bytes.Contains(data["kubeconfig"], []byte(rc.Host)) {
		t.Fatalf("the invitation's kubeconfig of %s does not name %s:\n%s", rc.Name, rc.Host, data["kubeconfig"])
	}
	data["kubeconfig"] = bytes.ReplaceAll(data["kubeconfig"], []byte(rc.Host), []byte("https://"+hole.Addr()))
	return data
}

// createTarget creates a self target (secret "") or one naming a
// kubeconfig Secret, with the fleet's labels.
func (w *world) createTarget(ctx context.Context, tg Target, secret string) {
	labels := map[string]v1alpha1.LabelValue{}
	for k, v := range tg.Labels {
		labels[k] = v1alpha1.LabelValue(v)
	}
	common := v1alpha1.TargetCommon{Self: tg.Self(), Labels: labels}
	var obj client.Object
	if tg.Namespace == "" {
		ct := &v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: tg.Name}}
		ct.Spec.TargetCommon = common
		if secret != "" {
			ct.Spec.KubeconfigSecretRef = &v1alpha1.SecretKeyRef{LocalSecretKeyRef: v1alpha1.LocalSecretKeyRef{Name: secret}}
		}
		obj = ct
	} else {
		tt := &v1alpha1.Target{ObjectMeta: metav1.ObjectMeta{Name: tg.Name, Namespace: tg.Namespace}}
		tt.Spec.TargetCommon = common
		if secret != "" {
			tt.Spec.KubeconfigSecretRef = &v1alpha1.LocalSecretKeyRef{Name: secret}
		}
		obj = tt
	}
	if err := w.src.CRClient().Create(ctx, obj); err != nil {
		w.t.Fatalf("creating target %s: %v", tg.Key(), err)
	}
}

// do runs one action in both worlds.
func (w *world) do(ctx context.Context, a Action) {
	t := w.t
	switch a.Kind {
	case ActCreate:
		wl := w.sc.Workload(a.Workload)
		w.desired[wl.Name] = wl.Replicas
		w.apply(ctx, *wl, wl.Replicas, true)
	case ActScale:
		wl := w.sc.Workload(a.Workload)
		w.desired[wl.Name] = a.Replicas
		w.apply(ctx, *wl, a.Replicas, false)
	case ActDelete:
		wl := w.sc.Workload(a.Workload)
		delete(w.desired, wl.Name)
		w.remove(ctx, *wl)
	case FaultDeleteCandidate:
		w.deleteCandidate(ctx, a.Draw)
	case FaultDeleteElected:
		w.snipe(ctx, a.Cluster, a.Draw)
	case FaultFreezeScheduler:
		w.freezeOnReservation(ctx, a.Cluster, a.Duration)
	case FaultAgentRestart:
		w.count(a.Kind)
		if err := w.agent.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := w.agent.Start(); err != nil {
			t.Fatal(err)
		}
		if err := w.agent.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
	case FaultUnreachable:
		w.count(a.Kind)
		hole := w.holes[a.Cluster]
		hole.Blackhole()
		// The fault lasts its drawn time; nothing waits on it.
		pause(ctx, a.Duration)
		hole.Heal()
	case FaultDeleteTarget:
		w.deleteTarget(ctx, a.Target)
	}
}

// apply creates or scales a workload in both worlds.
func (w *world) apply(ctx context.Context, wl Workload, replicas int32, create bool) {
	for _, world := range []struct {
		client  kubernetes.Interface
		objects []Object
	}{{w.clients[SourceCluster], SourceObjects(wl, replicas)}, {w.oracle, OracleObjects(wl, replicas)}} {
		for _, o := range world.objects {
			if err := applyObject(ctx, world.client, o, create); err != nil {
				w.t.Fatalf("%s of workload %s: %v", map[bool]string{true: "creating", false: "scaling"}[create], wl.Name, err)
			}
		}
	}
}

func applyObject(ctx context.Context, c kubernetes.Interface, o Object, create bool) error {
	switch {
	case o.Deployment != nil:
		d := o.Deployment
		if create {
			_, err := c.AppsV1().Deployments(Namespace).Create(ctx, d, metav1.CreateOptions{})
			return err
		}
		_, err := c.AppsV1().Deployments(Namespace).Patch(ctx, d.Name, types.MergePatchType, fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, *d.Spec.Replicas), metav1.PatchOptions{})
		return err
	case o.StatefulSet != nil:
		s := o.StatefulSet
		if create {
			_, err := c.AppsV1().StatefulSets(Namespace).Create(ctx, s, metav1.CreateOptions{})
			return err
		}
		_, err := c.AppsV1().StatefulSets(Namespace).Patch(ctx, s.Name, types.MergePatchType, fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, *s.Spec.Replicas), metav1.PatchOptions{})
		return err
	default:
		j := o.Job
		if create {
			_, err := c.BatchV1().Jobs(Namespace).Create(ctx, j, metav1.CreateOptions{})
			return err
		}
		_, err := c.BatchV1().Jobs(Namespace).Patch(ctx, j.Name, types.MergePatchType, fmt.Appendf(nil, `{"spec":{"parallelism":%d}}`, *j.Spec.Parallelism), metav1.PatchOptions{})
		return err
	}
}

// remove deletes a workload and its pods in both worlds.
func (w *world) remove(ctx context.Context, wl Workload) {
	bg := metav1.DeletePropagationBackground
	opts := metav1.DeleteOptions{PropagationPolicy: &bg}
	for _, world := range []struct {
		client  kubernetes.Interface
		objects []Object
	}{{w.clients[SourceCluster], SourceObjects(wl, 0)}, {w.oracle, OracleObjects(wl, 0)}} {
		for _, o := range world.objects {
			var err error
			switch {
			case o.Deployment != nil:
				err = world.client.AppsV1().Deployments(Namespace).Delete(ctx, o.Deployment.Name, opts)
			case o.StatefulSet != nil:
				err = world.client.AppsV1().StatefulSets(Namespace).Delete(ctx, o.StatefulSet.Name, opts)
			default:
				err = world.client.BatchV1().Jobs(Namespace).Delete(ctx, o.Job.Name, opts)
			}
			if err != nil && !apierrors.IsNotFound(err) {
				w.t.Fatalf("deleting workload %s: %v", wl.Name, err)
			}
		}
	}
}

// deleteCandidate deletes one candidate that is not bound, in any target,
// picked by draw among those there are now.
func (w *world) deleteCandidate(ctx context.Context, draw int) {
	type cand struct{ cluster, name string }
	var all []cand
	for _, name := range sortedKeys(w.clients) {
		list, err := w.clients[name].CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{LabelSelector: protocol.CandidateLabel + "=true"})
		if err != nil {
			continue
		}
		for _, p := range list.Items {
			if p.Spec.NodeName == "" && p.DeletionTimestamp == nil {
				all = append(all, cand{name, p.Name})
			}
		}
	}
	if len(all) == 0 {
		w.count("delete-candidate-none-pending")
		return
	}
	sort.Slice(all, func(i, j int) bool { return all[i].cluster+"/"+all[i].name < all[j].cluster+"/"+all[j].name })
	c := all[draw%len(all)]
	if err := w.clients[c.cluster].CoreV1().Pods(Namespace).Delete(ctx, c.name, metav1.DeleteOptions{}); err == nil {
		w.count(FaultDeleteCandidate)
		w.t.Logf("scenario %d: deleted pending candidate %s in %s", w.sc.Seed, c.name, c.cluster)
	}
}

// count counts one fault of kind.
func (w *world) count(kind string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.faults[kind]++
}

// snipe arms, for 30 s, a watch of cluster's candidates that deletes up to
// count of them the moment they carry an allowance and no node, with their
// UID and resourceVersion as preconditions (so never one that bound
// meanwhile): the source must move those elections, judged by its policy.
func (w *world) snipe(ctx context.Context, cluster string, count int) {
	c := w.clients[cluster]
	if c == nil {
		return
	}
	armed := make(chan struct{})
	w.background.Go(func() {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		wi, err := c.CoreV1().Pods(Namespace).Watch(sctx, metav1.ListOptions{LabelSelector: protocol.CandidateLabel + "=true"})
		close(armed)
		if err != nil {
			return
		}
		defer wi.Stop()
		deleted := 0
		for ev := range wi.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || p.Spec.NodeName != "" || p.DeletionTimestamp != nil || p.Annotations[protocol.AllowedAnnotation] == "" {
				continue
			}
			err := c.CoreV1().Pods(Namespace).Delete(sctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID, ResourceVersion: &p.ResourceVersion}})
			if err != nil {
				continue
			}
			w.count(FaultDeleteElected)
			if deleted++; deleted >= count {
				return
			}
		}
	})
	<-armed
}

// freezeOnReservation arms a watch of cluster's candidates that, at the
// first one the source allows (elected, not bound yet), freezes (SIGSTOP) the cluster's
// Flotilla scheduler for d, then lets it go on; within 60 s of arming.
func (w *world) freezeOnReservation(ctx context.Context, cluster string, d time.Duration) {
	c := w.clients[cluster]
	if c == nil {
		return
	}
	armed := make(chan struct{})
	w.background.Go(func() {
		sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		wi, err := c.CoreV1().Pods(Namespace).Watch(sctx, metav1.ListOptions{LabelSelector: protocol.CandidateLabel + "=true"})
		close(armed)
		if err != nil {
			return
		}
		defer wi.Stop()
		for ev := range wi.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || p.Spec.NodeName != "" || p.Annotations[protocol.AllowedAnnotation] == "" {
				continue
			}
			cl := w.sb.Cluster(cluster)
			if err := cl.Pause(sandbox.CandidateScheduler); err != nil {
				w.t.Errorf("freezing the scheduler of %s: %v", cluster, err)
				return
			}
			w.count(FaultFreezeScheduler)
			pause(ctx, d)
			if err := cl.Resume(sandbox.CandidateScheduler); err != nil {
				w.t.Errorf("resuming the scheduler of %s: %v", cluster, err)
			}
			return
		}
	})
	<-armed
}

// deleteTarget deletes a target of the source for good. A cluster no
// live target reaches any more loses its nodes in the oracle too, and the
// oracle's pods on them go at once, so that their controllers make them
// again, as Flotilla's drain sends the pods elsewhere.
func (w *world) deleteTarget(ctx context.Context, key string) {
	t := w.t
	tg, ok := w.sc.Fleet.TargetByKey(key)
	if !ok {
		t.Fatalf("no target %s", key)
	}
	w.count(FaultDeleteTarget)
	w.targets = slices.DeleteFunc(w.targets, func(x Target) bool { return x.Key() == key })
	live := map[string]bool{}
	for _, x := range w.targets {
		live[x.Cluster] = true
	}
	w.spread.SetLive(live)
	var obj client.Object = &v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: tg.Name}}
	if tg.Namespace != "" {
		obj = &v1alpha1.Target{ObjectMeta: metav1.ObjectMeta{Name: tg.Name, Namespace: tg.Namespace}}
	}
	if err := w.src.CRClient().Delete(ctx, obj); err != nil {
		t.Fatalf("deleting target %s: %v", key, err)
	}
	if live[tg.Cluster] {
		return
	}
	for _, n := range w.sc.Fleet.ClusterNodes(tg.Cluster) {
		if err := w.oracle.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		list, err := w.oracle.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.Name})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range list.Items {
			_ = w.oracle.CoreV1().Pods(Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		}
	}
}

// settle waits until the oracle is stable (every workload has its pods,
// each bound or found unschedulable, the same counts twice in a row) and
// Flotilla's state passes Settled, or time runs out; it returns what is
// left, and per workload the pods Flotilla and kube-scheduler placed.
func (w *world) settle(ctx context.Context) ([]chaos.Violation, map[string][2]int, time.Duration) {
	start := time.Now()
	var last []chaos.Violation
	var placed map[string][2]int
	var previous string
	stableOracle := false
	_ = wait.PollUntilContextTimeout(ctx, 2*time.Second, w.cfg.settle, true, func(ctx context.Context) (bool, error) {
		oracle, settled, err := w.oraclePlaced(ctx)
		if err != nil {
			return false, nil
		}
		now := fmt.Sprint(oracle)
		stableOracle = settled && now == previous
		previous = now
		snap, failed, err := w.snapshot(ctx)
		if err != nil {
			return false, nil
		}
		expect := map[string]Expect{}
		for app, replicas := range w.desired {
			expect[app] = Expect{Replicas: int(replicas), Oracle: oracle[app], Slack: Slack(*w.sc.Workload(app))}
		}
		// Every target the fleet had names its virtual node: a deleted
		// one drains, and the pods still running there stay bound to it.
		last = append(Settled(snap, w.sc.Fleet.Targets, expect), failed...)
		placed = map[string][2]int{}
		for _, s := range snap.Sources {
			if !s.Terminating && s.NodeName != "" {
				p := placed[s.App]
				p[0]++
				placed[s.App] = p
			}
		}
		for app, n := range oracle {
			p := placed[app]
			p[1] = n
			placed[app] = p
		}
		return stableOracle && len(last) == 0, nil
	})
	if !stableOracle {
		last = append(last, chaos.Violation{Kind: chaos.Stuck, Detail: fmt.Sprintf("the oracle did not settle within %s: %s", w.cfg.settle, previous)})
	}
	return last, placed, time.Since(start)
}

// snapshot lists the pods of Namespace in the source and the remote
// clusters. A source pod that failed (its virtual node lost its delegate:
// no fault of the script deletes a bound one) is reported as lost and
// left out, as its controller replaces it.
func (w *world) snapshot(ctx context.Context) (chaos.Snapshot, []chaos.Violation, error) {
	snap := chaos.Snapshot{Taken: time.Now()}
	var failed []chaos.Violation
	for _, name := range sortedKeys(w.clients) {
		lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		list, err := w.clients[name].CoreV1().Pods(Namespace).List(lctx, metav1.ListOptions{})
		cancel()
		if err != nil {
			return chaos.Snapshot{}, nil, fmt.Errorf("listing pods of %s: %w", name, err)
		}
		for i := range list.Items {
			p := &list.Items[i]
			if c, ok := chaos.CandidateOf(name, p); ok {
				snap.Candidates = append(snap.Candidates, c)
			} else if s, ok := chaos.SourceOf(name, p); ok {
				if p.Status.Phase == corev1.PodFailed {
					failed = append(failed, chaos.Violation{Kind: chaos.Lost, Detail: fmt.Sprintf("source pod %s/%s (uid %s) on %s failed: %s %s",
						p.Namespace, p.Name, p.UID, p.Spec.NodeName, p.Status.Reason, p.Status.Message)})
					continue
				}
				snap.Sources = append(snap.Sources, s)
			}
		}
	}
	return snap, failed, nil
}

// oraclePlaced counts, per workload, the oracle's pods placed, and says
// whether every live workload has its pods, each bound or found
// unschedulable by kube-scheduler.
func (w *world) oraclePlaced(ctx context.Context) (map[string]int, bool, error) {
	list, err := w.oracle.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, false, err
	}
	placed, live := map[string]int{}, map[string]int{}
	settled := true
	for _, p := range list.Items {
		if p.DeletionTimestamp != nil {
			settled = false
			continue
		}
		app := p.Labels[AppLabel]
		live[app]++
		if p.Spec.NodeName != "" {
			placed[app]++
			continue
		}
		unschedulable := false
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				unschedulable = true
			}
		}
		settled = settled && unschedulable
	}
	for app, n := range w.desired {
		settled = settled && live[app] == int(n)
	}
	return placed, settled, nil
}
