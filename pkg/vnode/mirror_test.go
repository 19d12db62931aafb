package vnode

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// recordedDelegates has one delegate per source UID and records deletions;
// the paths under test make no API call of their own.
type recordedDelegates struct {
	delegates map[types.UID]*corev1.Pod
	// live are the delegates the target's API server has, which the
	// cache (delegates) may not show yet.
	live    map[types.UID]*corev1.Pod
	deleted []types.UID
}

func (d *recordedDelegates) Get(source *corev1.Pod) (*corev1.Pod, error) {
	return d.delegates[source.UID], nil
}

func (d *recordedDelegates) Delete(_ context.Context, source *corev1.Pod) error {
	d.deleted = append(d.deleted, source.UID)
	return nil
}

func (d *recordedDelegates) OnChange(func(*corev1.Pod)) {}

func (d *recordedDelegates) Lost(_ context.Context, source *corev1.Pod) (bool, error) {
	return d.live[source.UID] == nil, nil
}

func boundPod(uid types.UID, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: uid},
		Spec:       corev1.PodSpec{NodeName: node},
	}
}

// TestMirrorDeletedFromTheAPI: a source pod can leave the API before a
// worker saw its deletion timestamp (a forced deletion, a relist). Only the
// last state from the watch names its delegate then; losing it would leave
// the delegate running in the target until some cleanup noticed.
func TestMirrorDeletedFromTheAPI(t *testing.T) {
	for _, tc := range []struct {
		name string
		// deleted is what the informer's delete handler gets.
		deleted func(pod *corev1.Pod) any
		// current is the pod of the same name in the cache afterwards.
		current     *corev1.Pod
		wantDeleted []types.UID
	}{{
		name:        "the pod's last state",
		deleted:     func(pod *corev1.Pod) any { return pod },
		wantDeleted: []types.UID{"old"},
	}, {
		name: "a tombstone after a relist",
		deleted: func(pod *corev1.Pod) any {
			return cache.DeletedFinalStateUnknown{Key: "ns/web", Obj: pod}
		},
		wantDeleted: []types.UID{"old"},
	}, {
		name:        "a new pod of the same name, not bound yet, keeps nothing of the old one",
		deleted:     func(pod *corev1.Pod) any { return pod },
		current:     boundPod("new", ""),
		wantDeleted: []types.UID{"old"},
	}, {
		name:    "the same pod seen again is not gone",
		deleted: func(pod *corev1.Pod) any { return pod },
		current: boundPod("old", "other-node"),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			if tc.current != nil {
				if err := indexer.Add(tc.current); err != nil {
					t.Fatal(err)
				}
			}
			old := boundPod("old", "vn")
			d := &recordedDelegates{delegates: map[types.UID]*corev1.Pod{"old": {ObjectMeta: metav1.ObjectMeta{Name: "delegate"}}}}
			m := newMirror(Config{NodeName: "vn", Target: "t", Delegates: d}, corev1listers.NewPodLister(indexer), nil)
			defer m.queue.ShutDown()

			m.sourceHandler().OnDelete(tc.deleted(old))
			if err := m.sync(t.Context(), "ns/web"); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(d.deleted, tc.wantDeleted) {
				t.Errorf("deleted delegates of %v, want %v", d.deleted, tc.wantDeleted)
			}
			if len(m.gone) != 0 {
				t.Errorf("still remembers %d deleted pods after the sync", len(m.gone))
			}
			// Synced again (the delegate's own deletion queues the pod):
			// nothing more is deleted.
			if err := m.sync(t.Context(), "ns/web"); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(d.deleted, tc.wantDeleted) {
				t.Errorf("after a second sync, deleted delegates of %v, want %v", d.deleted, tc.wantDeleted)
			}
		})
	}
}

// TestMirrorFailsOnlyALostDelegate: a source pod whose delegate the
// target's cache does not hold fails only when the target's API server has
// none either. An agent resumed after a pause, no longer the leader, had a
// cache of the target from before the pause, and failed pods the new
// leader had just bound (the chaos test caught it).
func TestMirrorFailsOnlyALostDelegate(t *testing.T) {
	for _, tc := range []struct {
		name     string
		live     bool
		wantFail bool
	}{
		{name: "in the target, not in the cache", live: true},
		{name: "gone from the target", wantFail: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			source := boundPod("uid", "vn")
			source.Spec.SchedulerName = protocol.SourceSchedulerName
			source.Status.Phase = corev1.PodRunning
			kube := fake.NewClientset(source)
			indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			if err := indexer.Add(source); err != nil {
				t.Fatal(err)
			}
			d := &recordedDelegates{live: map[types.UID]*corev1.Pod{}}
			if tc.live {
				d.live["uid"] = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "delegate"}, Spec: corev1.PodSpec{NodeName: "n1"}}
			}
			m := newMirror(Config{NodeName: "vn", Target: "t", Delegates: d, Client: kube, Status: NewStatus()}, corev1listers.NewPodLister(indexer), record.NewFakeRecorder(10))
			defer m.queue.ShutDown()
			err := m.sync(t.Context(), "ns/web")
			got, getErr := kube.CoreV1().Pods("ns").Get(t.Context(), "web", metav1.GetOptions{})
			if getErr != nil {
				t.Fatal(getErr)
			}
			failed := got.Status.Phase == corev1.PodFailed
			if failed != tc.wantFail {
				t.Fatalf("phase %s after the sync (err %v), want failed %v", got.Status.Phase, err, tc.wantFail)
			}
			if !tc.wantFail && err == nil {
				t.Error("no error while the cache lags: the pod would not be looked at again")
			}
		})
	}
}

// TestMirrorRunsOnlyItsNamespace: the node of a namespaced Target runs the
// pods of that namespace alone. A pod of another namespace bound to it (by
// its spec.nodeName) is rejected, and its delegate is never looked for,
// mirrored or deleted in the Target's cluster, which its namespace's
// tenant may control.
func TestMirrorRunsOnlyItsNamespace(t *testing.T) {
	for _, tc := range []struct {
		name       string
		namespace  string
		wantReject bool
	}{
		{name: "its own namespace", namespace: "ns"},
		{name: "another namespace", namespace: "tenant", wantReject: true},
		{name: "a ClusterTarget's node runs every namespace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			source := boundPod("uid", "vn")
			source.Spec.SchedulerName = protocol.SourceSchedulerName
			source.Spec.Containers = []corev1.Container{{Name: "app"}}
			kube := fake.NewClientset(source)
			indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			if err := indexer.Add(source); err != nil {
				t.Fatal(err)
			}
			delegate := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "delegate"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
			d := &recordedDelegates{delegates: map[types.UID]*corev1.Pod{"uid": delegate}}
			m := newMirror(Config{NodeName: "vn", Target: "t", Namespace: tc.namespace, Delegates: d, Client: kube, Status: NewStatus()},
				corev1listers.NewPodLister(indexer), record.NewFakeRecorder(10))
			defer m.queue.ShutDown()
			if err := m.sync(t.Context(), "ns/web"); err != nil {
				t.Fatal(err)
			}
			got, err := kube.CoreV1().Pods("ns").Get(t.Context(), "web", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			rejected := got.Status.Phase == corev1.PodFailed && got.Status.Reason == ReasonRejected
			if rejected != tc.wantReject {
				t.Fatalf("phase %s, reason %q; want rejected %v", got.Status.Phase, got.Status.Reason, tc.wantReject)
			}
			if !tc.wantReject && got.Status.Phase != corev1.PodRunning {
				t.Fatalf("phase %s, want the delegate's Running", got.Status.Phase)
			}

			// Deleted from the API: only its own namespace's delegate goes.
			m.sourceHandler().OnDelete(got)
			if err := indexer.Delete(got); err != nil {
				t.Fatal(err)
			}
			if err := m.sync(t.Context(), "ns/web"); err != nil {
				t.Fatal(err)
			}
			if deleted := len(d.deleted) > 0; deleted == tc.wantReject {
				t.Errorf("delegates deleted %v; want deleted %v", d.deleted, !tc.wantReject)
			}
		})
	}
}
