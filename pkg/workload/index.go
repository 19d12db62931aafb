package workload

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// indexed remembers the indexers PodIndex was added to: an informer
// refuses a second index of one name. The split reads it, from its own
// cache and from the manager's.
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

// siblingIndex indexes the pods of an informer by namespace and workload
// (Of), for Siblings.
const siblingIndex = "flotilla.workload.siblings"

// IndexSiblings adds the index Siblings reads to the pods of inf, once.
func IndexSiblings(inf toolscache.SharedIndexInformer) error {
	if _, done := inf.GetIndexer().GetIndexers()[siblingIndex]; done {
		return nil
	}
	return inf.AddIndexers(toolscache.Indexers{siblingIndex: func(obj any) ([]string, error) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return nil, nil
		}
		if k, ok := Of(pod); ok {
			return []string{pod.Namespace + "/" + k.String()}, nil
		}
		return nil, nil
	}})
}

// Siblings are the pods of the workload key (Key.String) in namespace, as
// the informer idx (indexed by IndexSiblings) holds them: its own objects,
// not copies, which the caller must not change. Reading them so costs
// nothing a pod, where a List into a PodList copies every one.
func Siblings(idx toolscache.Indexer, namespace, key string) ([]*corev1.Pod, error) {
	objs, err := idx.ByIndex(siblingIndex, namespace+"/"+key)
	if err != nil {
		return nil, err
	}
	pods := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if pod, ok := o.(*corev1.Pod); ok {
			pods = append(pods, pod)
		}
	}
	return pods, nil
}
