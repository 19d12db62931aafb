package scenario

import (
	"context"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/flotilla-dev/flotilla/test/chaos"
)

// Watch feeds every change of the pods of Namespace in one cluster to the
// protocol checker (test/chaos) and the spread checker, as test/chaos's
// watch does: resumed from the last resourceVersion across broken
// connections, listed again only on 410 Gone (a gap).
type Watch struct {
	Cluster string
	Client  kubernetes.Interface
	Checker *chaos.Checker
	Spread  *SpreadChecker

	known map[types.UID]*corev1.Pod
	gaps  atomic.Int64
}

// Gaps is how many times the watch listed again.
func (w *Watch) Gaps() int64 { return w.gaps.Load() }

// Run watches until ctx ends.
func (w *Watch) Run(ctx context.Context) {
	w.known = map[types.UID]*corev1.Pod{}
	pods := w.Client.CoreV1().Pods(Namespace)
	rv, first := "", true
	for ctx.Err() == nil {
		if rv == "" {
			if !first {
				w.gaps.Add(1)
			}
			var err error
			if rv, err = w.list(ctx); err != nil {
				pause(ctx, 300*time.Millisecond)
				continue
			}
			first = false
		}
		wi, err := pods.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				rv = ""
			}
			pause(ctx, 300*time.Millisecond)
			continue
		}
		rv = w.drain(wi, rv)
		wi.Stop()
	}
}

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
			if p, ok := ev.Object.(*corev1.Pod); ok {
				w.feed(p, ev.Type == watch.Deleted)
				rv = p.ResourceVersion
			}
		}
	}
	return rv
}

func (w *Watch) list(ctx context.Context) (string, error) {
	lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	list, err := w.Client.CoreV1().Pods(Namespace).List(lctx, metav1.ListOptions{})
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
	if c, ok := chaos.CandidateOf(w.Cluster, p); ok {
		w.Checker.ObserveCandidate(c, deleted)
		if pl, ok := PlacementOf(w.Cluster, p); ok {
			w.Spread.Observe(pl, deleted)
		}
	} else if s, ok := chaos.SourceOf(w.Cluster, p); ok {
		w.Checker.ObserveSource(s, deleted)
		w.Spread.ObserveElection(s.UID, s.App, s.Election, deleted)
	}
}

func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
