package reservation

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

func waitingPod(name string, age time.Duration, now time.Time, edit func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, CreationTimestamp: metav1.NewTime(now.Add(-age)),
			Annotations: map[string]string{protocol.SourceSpecAnnotation: "{}"}},
		Spec: corev1.PodSpec{SchedulerName: protocol.SourceSchedulerName},
	}
	if edit != nil {
		edit(p)
	}
	return p
}

func TestSourcePodsWaiting(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	deleting := metav1.NewTime(now)
	pods := []any{
		waitingPod("waits", 90*time.Second, now, nil),
		waitingPod("waits-less", 10*time.Second, now, nil),
		waitingPod("bound", time.Hour, now, func(p *corev1.Pod) { p.Spec.NodeName = "flotilla-c2" }),
		waitingPod("being-deleted", time.Hour, now, func(p *corev1.Pod) { p.DeletionTimestamp = &deleting }),
		waitingPod("not-a-source-pod", time.Hour, now, func(p *corev1.Pod) { p.Spec.SchedulerName = "default-scheduler" }),
		&corev1.ConfigMap{},
	}
	n, oldest := sourcePodsWaiting(pods, now)
	if n != 2 || oldest != 90 {
		t.Errorf("got %d waiting, the oldest for %vs; want 2, 90s", n, oldest)
	}
	if n, oldest := sourcePodsWaiting(nil, now); n != 0 || oldest != 0 {
		t.Errorf("no pods: got %d waiting, the oldest for %vs; want 0, 0", n, oldest)
	}
}

// A standby reports nothing: only the leader's count is the fleet's.
func TestWaitingCollectorOnTheLeaderOnly(t *testing.T) {
	store := toolscache.NewStore(toolscache.MetaNamespaceKeyFunc)
	if err := store.Add(waitingPod("waits", time.Minute, time.Now(), nil)); err != nil {
		t.Fatal(err)
	}
	standby := WaitingCollector{Pods: store, Leading: make(chan struct{})}
	if n := testutil.CollectAndCount(standby); n != 0 {
		t.Errorf("a standby reported %d series, want none", n)
	}
	leading := make(chan struct{})
	close(leading)
	leader := WaitingCollector{Pods: store, Leading: leading}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(leader)
	if n, err := testutil.GatherAndCount(reg, "flotilla_source_pods_waiting", "flotilla_source_pods_waiting_oldest_seconds"); err != nil || n != 2 {
		t.Errorf("the leader reported %d series (%v), want both", n, err)
	}
	if got := testutil.ToFloat64(prometheus.CollectorFunc(func(ch chan<- prometheus.Metric) {
		m := make(chan prometheus.Metric, 2)
		leader.Collect(m)
		close(m)
		for x := range m {
			if x.Desc() == waitingDesc {
				ch <- x
			}
		}
	})); got != 1 {
		t.Errorf("flotilla_source_pods_waiting = %v, want 1", got)
	}
}
