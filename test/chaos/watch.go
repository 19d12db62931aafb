package chaos

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// Labels the workload puts on its pods.
const (
	// FitsLabel is "false" on a pod that no node of any cluster can run.
	FitsLabel = "chaos.flotilla.dev/fits"
	// AppLabel names the workload (Deployment, StatefulSet) of a pod.
	AppLabel = "app"
)

// CandidateOf reads a candidate from a pod of cluster, if it is one.
func CandidateOf(cluster string, p *corev1.Pod) (Candidate, bool) {
	if p.Labels[protocol.CandidateLabel] != "true" {
		return Candidate{}, false
	}
	return Candidate{
		Cluster: cluster, Namespace: p.Namespace, Name: p.Name, UID: string(p.UID),
		SourceCluster: p.Labels[protocol.SourceClusterLabel], SourceUID: p.Labels[protocol.SourceUIDLabel],
		SourceNamespace: p.Annotations[protocol.SourceNamespaceAnnotation], SourceName: p.Annotations[protocol.SourceNameAnnotation],
		Target: p.Annotations[protocol.TargetAnnotation], NodeName: p.Spec.NodeName,
		Allowed: p.Annotations[protocol.AllowedAnnotation], Terminating: p.DeletionTimestamp != nil,
	}, true
}

// SourceOf reads a source pod from a pod of cluster, if it is one.
func SourceOf(cluster string, p *corev1.Pod) (Source, bool) {
	if p.Spec.SchedulerName != protocol.SourceSchedulerName || p.Labels[protocol.CandidateLabel] == "true" {
		return Source{}, false
	}
	s := Source{
		Cluster: cluster, Namespace: p.Namespace, Name: p.Name, UID: string(p.UID), App: p.Labels[AppLabel],
		Election: p.Annotations[protocol.ElectionAnnotation], NodeName: p.Spec.NodeName,
		Running: p.Status.Phase == corev1.PodRunning, Terminating: p.DeletionTimestamp != nil,
		Fits: p.Labels[FitsLabel] != "false",
	}
	if p.DeletionTimestamp != nil {
		s.DeletionDeadline = p.DeletionTimestamp.Time
	}
	return s, true
}

// Watch feeds the checker every change of the pods of one namespace of one
// cluster: candidates and source pods. It watches from the last
// resourceVersion it saw across broken connections and restarts of the API
// server, so no transition is missed; only when the API server no longer
// holds that version (410 Gone) does it list again, and counts a gap.
type Watch struct {
	Cluster string
	Pods    func() kubernetes.Interface
	NS      string
	Checker *Checker
	// Also, when set, is fed every change after the checker (another
	// checker of the same pods).
	Also func(p *corev1.Pod, deleted bool)

	known map[types.UID]*corev1.Pod
	gaps  atomic.Int64
}

// Gaps is how many times the watch had to list again and may have missed
// transitions.
func (w *Watch) Gaps() int64 { return w.gaps.Load() }

// Run watches until ctx ends.
func (w *Watch) Run(ctx context.Context) {
	w.known = map[types.UID]*corev1.Pod{}
	pods := w.Pods().CoreV1().Pods(w.NS)
	rv := ""
	first := true
	for ctx.Err() == nil {
		if rv == "" {
			if !first {
				w.gaps.Add(1)
			}
			var err error
			if rv, err = w.list(ctx); err != nil {
				retryPause(ctx)
				continue
			}
			first = false
		}
		wi, err := pods.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				rv = ""
			}
			retryPause(ctx)
			continue
		}
		rv = w.drain(wi, rv)
		wi.Stop()
	}
}

// retryPause spaces the attempts to reach an API server that is down.
func retryPause(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(300 * time.Millisecond):
	}
}

// drain feeds the events of one watch and returns the resourceVersion to
// watch from next ("" to list again).
func (w *Watch) drain(wi watch.Interface, rv string) string {
	for ev := range wi.ResultChan() {
		switch ev.Type {
		case watch.Error:
			if status, ok := ev.Object.(*metav1.Status); ok && (status.Code == 410 || status.Reason == metav1.StatusReasonExpired || status.Reason == metav1.StatusReasonGone) {
				return ""
			}
			return rv
		case watch.Bookmark:
			if p, ok := ev.Object.(*corev1.Pod); ok {
				rv = p.ResourceVersion
			}
		case watch.Added, watch.Modified, watch.Deleted:
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			w.feed(p, ev.Type == watch.Deleted)
			rv = p.ResourceVersion
		}
	}
	return rv
}

// list feeds the current state, and the last known state of every pod gone
// since, as deleted.
func (w *Watch) list(ctx context.Context) (string, error) {
	lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	list, err := w.Pods().CoreV1().Pods(w.NS).List(lctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	present := map[types.UID]bool{}
	for i := range list.Items {
		present[list.Items[i].UID] = true
		w.feed(&list.Items[i], false)
	}
	for uid, p := range w.known {
		if !present[uid] {
			w.feed(p, true)
		}
	}
	return list.ResourceVersion, nil
}

func (w *Watch) feed(p *corev1.Pod, deleted bool) {
	if deleted {
		delete(w.known, p.UID)
	} else {
		w.known[p.UID] = p
	}
	if c, ok := CandidateOf(w.Cluster, p); ok {
		w.Checker.ObserveCandidate(c, deleted)
	} else if s, ok := SourceOf(w.Cluster, p); ok {
		w.Checker.ObserveSource(s, deleted)
	}
	if w.Also != nil {
		w.Also(p, deleted)
	}
}

// TakeSnapshot lists the pods of namespace ns in every cluster.
func TakeSnapshot(ctx context.Context, ns string, clusters map[string]kubernetes.Interface) (Snapshot, error) {
	snap := Snapshot{Taken: time.Now()}
	for name, client := range clusters {
		lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		list, err := client.CoreV1().Pods(ns).List(lctx, metav1.ListOptions{})
		cancel()
		if err != nil {
			return Snapshot{}, fmt.Errorf("listing pods of %s: %w", name, err)
		}
		for i := range list.Items {
			p := &list.Items[i]
			if c, ok := CandidateOf(name, p); ok {
				snap.Candidates = append(snap.Candidates, c)
			} else if s, ok := SourceOf(name, p); ok {
				snap.Sources = append(snap.Sources, s)
			}
		}
	}
	return snap, nil
}
