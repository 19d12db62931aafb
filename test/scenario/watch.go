package scenario

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/flotilla-dev/flotilla/test/chaos"
)

// newWatch watches the pods of Namespace in one cluster, as the chaos test
// does (resumed from the last resourceVersion across broken connections,
// listed again only on 410 Gone: a gap), feeding the protocol checker and
// the spread checker.
func newWatch(cluster string, client kubernetes.Interface, checker *chaos.Checker, spread *SpreadChecker) *chaos.Watch {
	return &chaos.Watch{
		Cluster: cluster, Pods: func() kubernetes.Interface { return client }, NS: Namespace, Checker: checker,
		Also: func(p *corev1.Pod, deleted bool) {
			if pl, ok := PlacementOf(cluster, p); ok {
				spread.Observe(pl, deleted)
			} else if s, ok := chaos.SourceOf(cluster, p); ok {
				spread.ObserveElection(s.UID, s.App, s.Election, deleted)
			}
		},
	}
}

func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
