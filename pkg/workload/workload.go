// Package workload names the workload a pod belongs to: the object whose
// replicas a pod and its siblings are, across the ReplicaSets of a
// Deployment's revisions. It reads only the pod.
package workload

import (
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Key names a workload within a namespace: the kind and name of the
// object that owns its pods (Deployment, StatefulSet, ReplicaSet, Job...).
type Key struct{ Kind, Name string }

// String is "<Kind>/<Name>".
func (k Key) String() string { return k.Kind + "/" + k.Name }

// Of returns the workload of pod. A pod of a Deployment belongs to the
// Deployment, not to the ReplicaSet of one revision: its ReplicaSet is
// named after the Deployment and the pod-template-hash the pod carries,
// so the Deployment is known without reading the ReplicaSet. Any other
// pod belongs to its controller. A pod without a controller is no
// workload's.
func Of(pod *corev1.Pod) (Key, bool) {
	ref := metav1.GetControllerOfNoCopy(pod)
	if ref == nil || ref.Kind == "" || ref.Name == "" {
		return Key{}, false
	}
	if ref.Kind == "ReplicaSet" {
		if hash := pod.Labels[appsv1.DefaultDeploymentUniqueLabelKey]; hash != "" {
			if name, ok := strings.CutSuffix(ref.Name, "-"+hash); ok && name != "" {
				return Key{Kind: "Deployment", Name: name}, true
			}
		}
	}
	return Key{Kind: ref.Kind, Name: ref.Name}, true
}

// PodIndex is a field index of a pod cache: the pod's workload as
// Key.String, within the namespace (controller-runtime's indexes are per
// namespace too). Register it once per cache with IndexPod.
const PodIndex = "flotilla.workload"

// IndexPod is the indexer function of PodIndex.
func IndexPod(obj client.Object) []string {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil
	}
	if k, ok := Of(pod); ok {
		return []string{k.String()}
	}
	return nil
}
