package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/vnode"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

const vnodeName = "flotilla-tgt"

// kwokPodCIDR holds the pod IPs kwok gives in the sandbox (it runs with
// --cidr=10.244.0.1/16): a target's podCIDRs must list it for the virtual
// node to mirror them.
const kwokPodCIDR = "10.244.0.0/16"

// TestVnode runs the virtual node of target tgt in cluster src, with
// delegates that the test creates in tgt as the agent would: the node is
// Ready, tainted and heartbeating; source pods bound to it mirror their
// delegate, survive an agent restart, fail when their delegate is lost, and
// take their delegate with them when deleted.
func TestVnode(t *testing.T) {
	t.Parallel()
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{
		// No release in src: the test makes source pods itself, which the
		// release's policy lets only its webhook and agent do.
		{Name: "src", Nodes: []sandbox.NodeSpec{{}}, WithoutRelease: true},
		{Name: "tgt", Nodes: []sandbox.NodeSpec{{}}},
	}})
	src, tgt := s.Cluster("src").Client(), s.Cluster("tgt").Client()
	delegates := newVnodeDelegates(t, tgt)
	cfg := vnode.Config{
		NodeName:      vnodeName,
		Target:        "tgt",
		Labels:        map[string]string{"topology.kubernetes.io/region": "r1"},
		Client:        src,
		Delegates:     delegates,
		LeaseDuration: 8 * time.Second,
		PodCIDRs:      []netip.Prefix{netip.MustParsePrefix(kwokPodCIDR)},
	}
	parent := t // the virtual node outlives the subtests
	stop := vnodeStart(parent, cfg)

	t.Run("node is Ready, tainted and renews its lease", func(t *testing.T) {
		vnodeWait(t, "the virtual node Ready and tainted", func(ctx context.Context) (bool, string) {
			n, err := src.CoreV1().Nodes().Get(ctx, vnodeName, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return vnodeReady(n) && vnodeTainted(n) && n.Labels[vnode.TargetLabel] == "tgt" &&
				n.Labels["topology.kubernetes.io/region"] == "r1", fmt.Sprintf("labels %v, taints %v, conditions %v", n.Labels, n.Spec.Taints, n.Status.Conditions)
		})
		vnodeWaitLeaseRenewed(t, src)
	})

	t.Run("pods that do not tolerate the taint stay off", func(t *testing.T) {
		pod := vnodePod("vnode-intruder")
		pod.Spec.NodeSelector = map[string]string{corev1.LabelHostname: vnodeName}
		vnodeCreate(t, src, pod)
		vnodeWait(t, "the intruder unschedulable because of the taint", func(ctx context.Context) (bool, string) {
			p, err := src.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if p.Spec.NodeName != "" {
				t.Fatalf("pod without toleration bound to %s", p.Spec.NodeName)
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
					return true, c.Message
				}
			}
			return false, fmt.Sprintf("conditions %v", p.Status.Conditions)
		})
	})

	var source *corev1.Pod
	var delegate *corev1.Pod
	t.Run("a bound source pod mirrors its delegate", func(t *testing.T) {
		source = vnodeCreate(t, src, vnodeSourcePod("vnode-web"))
		delegate = vnodeCreateDelegate(t, tgt, source)
		vnodeBind(t, src, source)
		vnodeWaitMirrored(t, src, source, delegate)
	})
	if source == nil || delegate == nil {
		t.FailNow()
	}

	t.Run("an agent restart adopts the node and keeps the binding", func(t *testing.T) {
		before, err := src.CoreV1().Nodes().Get(t.Context(), vnodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		stop()
		// An operator removed the taint while no agent ran: adopting the
		// node puts it back.
		before.Spec.Taints = nil
		if _, err := src.CoreV1().Nodes().Update(t.Context(), before, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		stop = vnodeStart(parent, cfg)
		vnodeWaitLeaseRenewed(t, src)
		vnodeWait(t, "the adopted node Ready and tainted again", func(ctx context.Context) (bool, string) {
			n, err := src.CoreV1().Nodes().Get(ctx, vnodeName, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if n.UID != before.UID {
				t.Fatalf("node recreated (UID %s, was %s) instead of adopted", n.UID, before.UID)
			}
			return vnodeReady(n) && vnodeTainted(n), fmt.Sprintf("taints %v", n.Spec.Taints)
		})
		p, err := src.CoreV1().Pods("default").Get(t.Context(), source.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Spec.NodeName != vnodeName || p.Status.Phase != corev1.PodRunning || p.Status.PodIP != delegate.Status.PodIP {
			t.Fatalf("source pod after restart: node %q, phase %q, podIP %q", p.Spec.NodeName, p.Status.Phase, p.Status.PodIP)
		}
	})

	t.Run("a source pod whose delegate is lost fails", func(t *testing.T) {
		orphan := vnodeCreate(t, src, vnodeSourcePod("vnode-orphan"))
		vnodeBind(t, src, orphan)
		vnodeWait(t, "the orphan Failed with DelegateLost", func(ctx context.Context) (bool, string) {
			p, err := src.CoreV1().Pods("default").Get(ctx, orphan.Name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return p.Status.Phase == corev1.PodFailed && p.Status.Reason == vnode.ReasonDelegateLost,
				fmt.Sprintf("phase %q, reason %q", p.Status.Phase, p.Status.Reason)
		})
	})

	t.Run("deleting the source pod deletes its delegate", func(t *testing.T) {
		if err := src.CoreV1().Pods("default").Delete(t.Context(), source.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		vnodeWait(t, "the delegate and the source pod gone", func(ctx context.Context) (bool, string) {
			_, errD := tgt.CoreV1().Pods("default").Get(ctx, delegate.Name, metav1.GetOptions{})
			_, errS := src.CoreV1().Pods("default").Get(ctx, source.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(errD) && apierrors.IsNotFound(errS), fmt.Sprintf("delegate: %v, source: %v", errD, errS)
		})
	})

	t.Run("a source pod deleted at once still takes its delegate", func(t *testing.T) {
		// kubectl delete --force: the API server marks and removes the pod
		// in one request; the virtual node sees the deletion timestamp for
		// an instant, or only the deletion (then the pod's last state, from
		// the watch, names the delegate; see the unit tests).
		forced := vnodeCreate(t, src, vnodeSourcePod("vnode-forced"))
		forcedDelegate := vnodeCreateDelegate(t, tgt, forced)
		vnodeBind(t, src, forced)
		vnodeWaitMirrored(t, src, forced, forcedDelegate)
		if err := src.CoreV1().Pods("default").Delete(t.Context(), forced.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
		vnodeWait(t, "the delegate of the force-deleted pod gone", func(ctx context.Context) (bool, string) {
			_, err := tgt.CoreV1().Pods("default").Get(ctx, forcedDelegate.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), fmt.Sprintf("delegate: %v", err)
		})
	})
}

// vnodeStart runs the virtual node until the returned stop is called or the
// test ends; an error from Run fails the test.
func vnodeStart(t *testing.T, cfg vnode.Config) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- vnode.Run(ctx, cfg) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("vnode.Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("vnode.Run did not return 30s after its context was cancelled")
		}
	}
	t.Cleanup(stop)
	return stop
}

// vnodeDelegates finds delegates in the target by their source annotations,
// as the agent does over its informer of the target.
type vnodeDelegates struct {
	client   kubernetes.Interface
	informer cache.SharedIndexInformer
}

const vnodeBySource = "bySource"

func newVnodeDelegates(t *testing.T, client kubernetes.Interface) *vnodeDelegates {
	factory := informers.NewSharedInformerFactory(client, 0)
	informer := factory.Core().V1().Pods().Informer()
	err := informer.AddIndexers(cache.Indexers{vnodeBySource: func(obj any) ([]string, error) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return nil, nil
		}
		ns, name := pod.Annotations[protocol.SourceNamespaceAnnotation], pod.Annotations[protocol.SourceNameAnnotation]
		if ns == "" || name == "" {
			return nil, nil
		}
		return []string{ns + "/" + name}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(t.Context().Done())
	t.Cleanup(factory.Shutdown)
	return &vnodeDelegates{client: client, informer: informer}
}

func (d *vnodeDelegates) HasSynced() bool { return d.informer.HasSynced() }

func (d *vnodeDelegates) Get(source *corev1.Pod) (*corev1.Pod, error) {
	objs, err := d.informer.GetIndexer().ByIndex(vnodeBySource, source.Namespace+"/"+source.Name)
	if err != nil {
		return nil, fmt.Errorf("looking up the delegate of %s/%s: %w", source.Namespace, source.Name, err)
	}
	for _, obj := range objs {
		pod, ok := obj.(*corev1.Pod)
		if ok && pod.Spec.NodeName != "" && pod.Labels[protocol.SourceUIDLabel] == string(source.UID) {
			return pod, nil
		}
	}
	return nil, nil
}

func (d *vnodeDelegates) Lost(ctx context.Context, source *corev1.Pod) (bool, error) {
	list, err := d.client.CoreV1().Pods(source.Namespace).List(ctx, metav1.ListOptions{LabelSelector: protocol.SourceUIDLabel + "=" + string(source.UID)})
	if err != nil {
		return false, err
	}
	for _, pod := range list.Items {
		if pod.Spec.NodeName != "" {
			return false, nil
		}
	}
	return true, nil
}

func (d *vnodeDelegates) Delete(ctx context.Context, source *corev1.Pod) error {
	pod, err := d.Get(source)
	if err != nil || pod == nil {
		return err
	}
	err = d.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: source.DeletionGracePeriodSeconds,
		Preconditions:      metav1.NewUIDPreconditions(string(pod.UID)),
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func (d *vnodeDelegates) OnChange(f func(*corev1.Pod)) {
	call := func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if pod, ok := obj.(*corev1.Pod); ok {
			f(pod)
		}
	}
	_, _ = d.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    call,
		UpdateFunc: func(_, obj any) { call(obj) },
		DeleteFunc: call,
	})
}

func vnodePod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}},
		},
	}
}

// vnodeSourcePod is a source pod as the webhook leaves it: no scheduler of
// the source serves it, and it tolerates the virtual node's taint.
func vnodeSourcePod(name string) *corev1.Pod {
	pod := vnodePod(name)
	pod.Spec.SchedulerName = protocol.SourceSchedulerName
	pod.Spec.Tolerations = []corev1.Toleration{{
		Key: protocol.VirtualNodeTaintKey, Operator: corev1.TolerationOpEqual,
		Value: protocol.VirtualNodeTaintValue, Effect: corev1.TaintEffectNoSchedule,
	}}
	return pod
}

// vnodeCreateDelegate creates the delegate of a source pod in the target,
// as an ordinary pod that the target's scheduler binds, and waits until it
// runs.
func vnodeCreateDelegate(t *testing.T, client kubernetes.Interface, source *corev1.Pod) *corev1.Pod {
	t.Helper()
	pod := vnodePod(source.Name + "-delegate")
	pod.Labels = map[string]string{protocol.CandidateLabel: "true", protocol.SourceUIDLabel: string(source.UID)}
	pod.Annotations = map[string]string{
		protocol.SourceNamespaceAnnotation: source.Namespace,
		protocol.SourceNameAnnotation:      source.Name,
	}
	pod = vnodeCreate(t, client, pod)
	var running *corev1.Pod
	vnodeWait(t, "the delegate Running", func(ctx context.Context) (bool, string) {
		p, err := client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		running = p
		return p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "", fmt.Sprintf("phase %q on %q", p.Status.Phase, p.Spec.NodeName)
	})
	return running
}

func vnodeCreate(t *testing.T, client kubernetes.Interface, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	created, err := client.CoreV1().Pods(pod.Namespace).Create(t.Context(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s: %v", pod.Name, err)
	}
	return created
}

// vnodeBind binds a source pod to the virtual node, as the agent does.
func vnodeBind(t *testing.T, client kubernetes.Interface, pod *corev1.Pod) {
	t.Helper()
	err := client.CoreV1().Pods(pod.Namespace).Bind(t.Context(), &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: vnodeName},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("binding %s to %s: %v", pod.Name, vnodeName, err)
	}
}

func vnodeWaitMirrored(t *testing.T, client kubernetes.Interface, source, delegate *corev1.Pod) {
	t.Helper()
	vnodeWait(t, "the source pod Running with the delegate's IPs", func(ctx context.Context) (bool, string) {
		p, err := client.CoreV1().Pods(source.Namespace).Get(ctx, source.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		ready := false
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				ready = c.Status == corev1.ConditionTrue
			}
		}
		return p.Spec.NodeName == vnodeName && p.Status.Phase == corev1.PodRunning && ready &&
				p.Status.PodIP == delegate.Status.PodIP && p.Status.HostIP == delegate.Status.HostIP &&
				len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil,
			fmt.Sprintf("node %q, phase %q, ready %v, podIP %q (delegate %q), hostIP %q (delegate %q)",
				p.Spec.NodeName, p.Status.Phase, ready, p.Status.PodIP, delegate.Status.PodIP, p.Status.HostIP, delegate.Status.HostIP)
	})
}

// vnodeWaitLeaseRenewed waits until the node's Lease is renewed twice: the
// heartbeat runs, and is not a single write.
func vnodeWaitLeaseRenewed(t *testing.T, client kubernetes.Interface) {
	t.Helper()
	var first, last time.Time
	vnodeWait(t, "the node lease renewed", func(ctx context.Context) (bool, string) {
		lease, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, vnodeName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if lease.Spec.RenewTime == nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != vnodeName {
			return false, fmt.Sprintf("lease %+v", lease.Spec)
		}
		if first.IsZero() {
			first = lease.Spec.RenewTime.Time
		}
		last = lease.Spec.RenewTime.Time
		return last.After(first), fmt.Sprintf("renewed at %s, first seen %s", last, first)
	})
}

func vnodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func vnodeTainted(n *corev1.Node) bool {
	for _, taint := range n.Spec.Taints {
		if taint.Key == protocol.VirtualNodeTaintKey && taint.Value == protocol.VirtualNodeTaintValue && taint.Effect == corev1.TaintEffectNoSchedule {
			return true
		}
	}
	return false
}

// vnodeWait polls cond until it holds, and fails the test with cond's last
// words when it does not within a minute.
func vnodeWait(t *testing.T, what string, cond func(ctx context.Context) (bool, string)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		var ok bool
		ok, last = cond(ctx)
		return ok, nil
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("waiting for %s: %v (last: %s)", what, err, last)
	}
}
