package workload

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// indexed remembers the indexers PodIndex was added to: an informer
// refuses a second index of one name, and both the placement controller
// and the split read it from the manager's cache.
var indexed sync.Map

// IndexPods adds PodIndex to the pods of idx once, however many of its
// readers ask.
func IndexPods(ctx context.Context, idx client.FieldIndexer) error {
	if _, done := indexed.LoadOrStore(idx, struct{}{}); done {
		return nil
	}
	if err := idx.IndexField(ctx, &corev1.Pod{}, PodIndex, IndexPod); err != nil {
		indexed.Delete(idx)
		return err
	}
	return nil
}
