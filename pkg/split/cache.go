package split

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/workload"
)

// CacheReader reads the split's Pods and Workloads from controller-runtime
// caches whose pods are indexed by workload.PodIndex. Its readers get
// Members and Workloads, all the trimmed objects of the split's cache hold.
type CacheReader struct {
	// PodCaches hold the pods the split serves: the manager's source pods
	// and the split's own pods labelled for the split. A pod in both is
	// counted once.
	PodCaches []client.Reader
	// Objects holds the Deployments and StatefulSets.
	Objects client.Reader
	// Live, when set, is read for a workload Objects does not hold: a
	// Deployment's first pods can reach the webhook before the cache has
	// seen the Deployment, whose annotation they must not miss.
	Live client.Reader
}

var (
	_ Pods      = &CacheReader{}
	_ Workloads = &CacheReader{}
)

// Members lists the workload's pods that have not finished.
func (r *CacheReader) Members(ctx context.Context, namespace string, key workload.Key) ([]Member, error) {
	var out []Member
	seen := map[types.UID]bool{}
	for _, c := range r.PodCaches {
		list := &corev1.PodList{}
		if err := c.List(ctx, list, client.InNamespace(namespace), client.MatchingFields{workload.PodIndex: key.String()}); err != nil {
			return nil, fmt.Errorf("listing the pods of %s/%s: %w", namespace, key, err)
		}
		for i := range list.Items {
			pod := &list.Items[i]
			if seen[pod.UID] || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
				continue
			}
			seen[pod.UID] = true
			out = append(out, MemberOf(pod))
		}
	}
	return out, nil
}

// MemberOf is what the split keeps of a pod.
func MemberOf(pod *corev1.Pod) Member {
	p, placed := PlaceOf(pod.Labels)
	m := Member{
		Name:        pod.Name,
		UID:         pod.UID,
		Place:       p,
		Placed:      placed,
		Created:     pod.CreationTimestamp.Time,
		Terminating: pod.DeletionTimestamp != nil,
	}
	if pod.Status.Phase == corev1.PodRunning {
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				m.ReadySince = c.LastTransitionTime.Time
				if m.ReadySince.IsZero() {
					m.ReadySince = pod.CreationTimestamp.Time
				}
			}
		}
	}
	return m
}

// Workload reads a Deployment or a StatefulSet; nil for other kinds and
// for one that does not exist.
func (r *CacheReader) Workload(ctx context.Context, namespace string, key workload.Key) (*Workload, error) {
	w, err := readWorkload(ctx, r.Objects, namespace, key)
	if w == nil && err == nil && r.Live != nil && (key.Kind == "Deployment" || key.Kind == "StatefulSet") {
		w, err = readWorkload(ctx, r.Live, namespace, key)
	}
	return w, err
}

func readWorkload(ctx context.Context, reader client.Reader, namespace string, key workload.Key) (*Workload, error) {
	w := &Workload{Namespace: namespace, Key: key}
	nn := types.NamespacedName{Namespace: namespace, Name: key.Name}
	var err error
	switch key.Kind {
	case "Deployment":
		d := &appsv1.Deployment{}
		if err = reader.Get(ctx, nn, d); err == nil {
			w.fill(d.ObjectMeta, d.Spec.Replicas, d.Spec.MinReadySeconds, d.Spec.Template.ObjectMeta)
			w.Status.ObservedGeneration, w.Status.Current, w.Status.Updated = d.Status.ObservedGeneration, d.Status.Replicas, d.Status.UpdatedReplicas
			w.Status.Ready, w.Status.Available = d.Status.ReadyReplicas, d.Status.AvailableReplicas
		}
	case "StatefulSet":
		s := &appsv1.StatefulSet{}
		if err = reader.Get(ctx, nn, s); err == nil {
			w.fill(s.ObjectMeta, s.Spec.Replicas, s.Spec.MinReadySeconds, s.Spec.Template.ObjectMeta)
			w.Status.ObservedGeneration, w.Status.Current, w.Status.Updated = s.Status.ObservedGeneration, s.Status.Replicas, s.Status.UpdatedReplicas
			w.Status.Ready, w.Status.Available = s.Status.ReadyReplicas, s.Status.AvailableReplicas
		}
	default:
		return nil, nil
	}
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s %s: %w", key.Kind, nn, err)
	}
	return w, nil
}

func (w *Workload) fill(meta metav1.ObjectMeta, replicas *int32, minReady int32, template metav1.ObjectMeta) {
	w.UID = meta.UID
	// Only the split's annotation, as the cache keeps it.
	if v, ok := meta.Annotations[protocol.MaxOnDemandAnnotation]; ok {
		w.Annotations = map[string]string{protocol.MaxOnDemandAnnotation: v}
	}
	w.TemplateLabels, w.TemplateAnnotations = template.Labels, template.Annotations
	w.MinReadySeconds = minReady
	w.Status.Replicas = 1 // the API's default
	if replicas != nil {
		w.Status.Replicas = *replicas
	}
	w.Status.Generation = meta.Generation
}

// The split's own cache keeps of each object what CacheReader reads: the
// cluster's Deployments and StatefulSets are many and their pod specs
// large, and the split reads none of them.

// TrimPod is the transform of the split's pod cache.
func TrimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &corev1.Pod{
		TypeMeta: pod.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, ResourceVersion: pod.ResourceVersion,
			Labels: pod.Labels, OwnerReferences: pod.OwnerReferences,
			CreationTimestamp: pod.CreationTimestamp, DeletionTimestamp: pod.DeletionTimestamp,
		},
		Spec:   corev1.PodSpec{NodeName: pod.Spec.NodeName},
		Status: corev1.PodStatus{Phase: pod.Status.Phase},
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			out.Status.Conditions = []corev1.PodCondition{{Type: c.Type, Status: c.Status, LastTransitionTime: c.LastTransitionTime}}
		}
	}
	return out, nil
}

// TrimWorkload is the transform of the split's Deployments and
// StatefulSets: their metadata with only the split's annotation, replicas,
// minReadySeconds, the template's labels and annotations, and status.
func TrimWorkload(obj any) (any, error) {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return &appsv1.Deployment{
			TypeMeta:   o.TypeMeta,
			ObjectMeta: trimMeta(o.ObjectMeta),
			Spec: appsv1.DeploymentSpec{
				Replicas: o.Spec.Replicas, MinReadySeconds: o.Spec.MinReadySeconds,
				Template: corev1.PodTemplateSpec{ObjectMeta: trimTemplate(o.Spec.Template.ObjectMeta)},
			},
			Status: o.Status,
		}, nil
	case *appsv1.StatefulSet:
		return &appsv1.StatefulSet{
			TypeMeta:   o.TypeMeta,
			ObjectMeta: trimMeta(o.ObjectMeta),
			Spec: appsv1.StatefulSetSpec{
				Replicas: o.Spec.Replicas, MinReadySeconds: o.Spec.MinReadySeconds,
				Template: corev1.PodTemplateSpec{ObjectMeta: trimTemplate(o.Spec.Template.ObjectMeta)},
			},
			Status: o.Status,
		}, nil
	}
	return obj, nil
}

func trimMeta(m metav1.ObjectMeta) metav1.ObjectMeta {
	out := metav1.ObjectMeta{
		Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion,
		Generation: m.Generation, CreationTimestamp: m.CreationTimestamp, DeletionTimestamp: m.DeletionTimestamp,
	}
	if v, ok := m.Annotations[protocol.MaxOnDemandAnnotation]; ok {
		out.Annotations = map[string]string{protocol.MaxOnDemandAnnotation: v}
	}
	return out
}

func trimTemplate(m metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{Labels: m.Labels, Annotations: m.Annotations}
}
