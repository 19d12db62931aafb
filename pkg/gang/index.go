package gang

import (
	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
)

// MemberIndex indexes source pods by their gang's key (Spec.Key).
const MemberIndex = "gang"

// IndexMembers adds MemberIndex to the informer of source pods.
func IndexMembers(inf toolscache.SharedIndexInformer) error {
	if _, done := inf.GetIndexer().GetIndexers()[MemberIndex]; done {
		return nil
	}
	return inf.AddIndexers(toolscache.Indexers{MemberIndex: func(obj any) ([]string, error) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return nil, nil
		}
		if s, ok, _ := Of(pod); ok {
			return []string{s.Key(pod.Namespace)}, nil
		}
		return nil, nil
	}})
}
