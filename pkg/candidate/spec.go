package candidate

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/sourcespec"
)

// Build returns the candidate of a source pod for one target. The candidate
// goes to namespace in the target (the source's, unless the target maps it)
// and has a deterministic name, labels and annotations that tie it to the
// source pod, schedulerName flotilla, and no field that only makes sense in
// the source cluster (node name, service-account token, the virtual-node
// toleration, the resolved priority, readiness gates, the Workload
// reference).
//
// Its labels are Flotilla's (candidate, source-cluster, target, source-uid,
// source-name) and the source pod's own under protocol.SourceLabelPrefix
// (app=web is label.multicluster.flotilla.dev/app=web, see
// protocol.CarriedLabelKey), so that nothing of the target (a Service, a
// NetworkPolicy, a controller) selects a pod it knows nothing of; the
// source-labels annotation holds them as they are (SourceLabels). The pod
// (anti-)affinity terms and topology spread constraints of the candidate's
// spec, which select the source's siblings, are rewritten to select the
// renamed labels, so that they find the sibling candidates. A target whose
// invitation keeps the source's labels (keepSourceLabels) gets them and
// the spec as they are. A self target never keeps them: its candidate
// sits beside the source pod, which carries them already and stands for
// it in the cluster's Services (its status mirrors the delegate's); the
// two would be two endpoints of one pod.
func Build(source *corev1.Pod, sourceCluster, target, namespace string, self, keepSourceLabels bool) (*corev1.Pod, error) {
	spec, err := sourcespec.Original(source)
	if err != nil {
		return nil, err
	}
	spec.SchedulerName = protocol.SchedulerName
	spec.Priority = nil
	spec.ServiceAccountName = ""
	spec.DeprecatedServiceAccount = ""
	spec.AutomountServiceAccountToken = ptr.To(false)
	spec.Tolerations = withoutVirtualNodeToleration(spec.Tolerations)
	// Readiness gates are set by controllers of the source cluster; in the
	// target nobody would ever set them. The source pod keeps them.
	spec.ReadinessGates = nil
	// The PodGroup is the source's, and so is its gang: a target's
	// scheduler with gang scheduling would wait for a PodGroup it does not
	// hold. The source pod keeps the reference.
	spec.SchedulingGroup = nil
	if NeedsCopies(self, source.Namespace, namespace) {
		// The target holds the source's objects under their copies' names.
		referenceCopies(spec, sourceCluster)
	}

	labels := map[string]string{
		protocol.CandidateLabel:     "true",
		protocol.SourceClusterLabel: sourceCluster,
		protocol.TargetLabel:        protocol.TargetLabelValue(target),
		protocol.SourceUIDLabel:     string(source.UID),
		protocol.SourceNameLabel:    protocol.SourceNameLabelValue(source.Name),
	}
	sourceLabels := map[string]string{}
	for k, v := range source.Labels {
		if !strings.HasPrefix(k, protocol.Prefix) {
			sourceLabels[k] = v
		}
	}

	annotations := map[string]string{}
	for k, v := range source.Annotations {
		if !strings.HasPrefix(k, protocol.Prefix) && k != corev1.LastAppliedConfigAnnotation {
			annotations[k] = v
		}
	}
	if keepSourceLabels && !self {
		maps.Copy(labels, sourceLabels)
	} else {
		if len(sourceLabels) > 0 {
			raw, err := json.Marshal(sourceLabels)
			if err != nil {
				return nil, fmt.Errorf("encoding the source pod's labels: %w", err)
			}
			annotations[protocol.SourceLabelsAnnotation] = string(raw)
		}
		maps.Copy(labels, carriedLabels(sourceLabels))
		selectCarriedLabels(spec, sourceCluster)
	}
	annotations[protocol.SourceNamespaceAnnotation] = source.Namespace
	annotations[protocol.SourceNameAnnotation] = source.Name
	annotations[protocol.TargetAnnotation] = target

	candidate := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        CandidateNameOf(source, sourceCluster, target),
			Namespace:   namespace,
			Labels:      labels,
			Annotations: annotations,
		},
		Spec: *spec,
	}
	if self {
		// In the source cluster itself the candidate shares the namespace
		// with the source pod's own controller (a ReplicaSet, say), which
		// would adopt a pod with matching labels. A controller reference to
		// the source pod prevents that, and the garbage collector deletes
		// the candidate with its source.
		candidate.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: "v1",
			Kind:       "Pod",
			Name:       source.Name,
			UID:        source.UID,
			Controller: ptr.To(true),
		}}
	}
	return candidate, nil
}

func withoutVirtualNodeToleration(tolerations []corev1.Toleration) []corev1.Toleration {
	var kept []corev1.Toleration
	for _, t := range tolerations {
		if t.Key != protocol.VirtualNodeTaintKey {
			kept = append(kept, t)
		}
	}
	return kept
}

// SourceLabels are the labels of a candidate's source pod but Flotilla's:
// its own labels when its target keeps them, else those the source-labels
// annotation holds.
func SourceLabels(candidate *corev1.Pod) (map[string]string, error) {
	if raw, ok := candidate.Annotations[protocol.SourceLabelsAnnotation]; ok {
		labels := map[string]string{}
		if err := json.Unmarshal([]byte(raw), &labels); err != nil {
			return nil, fmt.Errorf("candidate %s/%s: source labels: %w", candidate.Namespace, candidate.Name, err)
		}
		return labels, nil
	}
	labels := map[string]string{}
	for k, v := range candidate.Labels {
		if !strings.HasPrefix(k, protocol.Prefix) {
			labels[k] = v
		}
	}
	return labels, nil
}

// CandidateNameOf is the name of a source pod's candidate in the target the
// source calls target (a ClusterTarget's name, "<namespace>/<name>" of a
// Target): each target of the source names its own, so two that reach the
// same cluster and namespace never share one.
func CandidateNameOf(source *corev1.Pod, sourceCluster, target string) string {
	return protocol.CandidateName(sourceCluster, target, source.Namespace, source.Name, string(source.UID))
}
