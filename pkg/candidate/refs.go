package candidate

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// ObjectKind is the kind of an object of its namespace that a pod spec
// names.
type ObjectKind string

const (
	ConfigMapObject ObjectKind = "ConfigMap"
	SecretObject    ObjectKind = "Secret"
)

// ObjectReference is one place where a pod spec names a ConfigMap or a
// Secret of its namespace.
type ObjectReference struct {
	Kind ObjectKind
	// Name points into the spec: setting it renames the reference.
	Name *string
	// Optional: the pod starts without the object (an optional volume,
	// key or envFrom, or an image pull secret, which the kubelet skips
	// when missing).
	Optional bool
}

// VisitObjectReferences calls visit for every place spec names a ConfigMap
// or a Secret, empty names included: volumes (projected sources included),
// env and envFrom of init, regular and ephemeral containers, and image
// pull secrets. Each field of a volume and of a projected source is
// visited, even one the API server would refuse beside another.
//
// It is the one walk of these references: objects.Of lists what to copy
// by it and Build renames the candidate's by it, so the two never
// disagree; a target's admission policy checks the same places
// (pkg/invitation/admission_refs.go).
func VisitObjectReferences(spec *corev1.PodSpec, visit func(ObjectReference)) {
	ref := func(kind ObjectKind, name *string, optional *bool) {
		visit(ObjectReference{Kind: kind, Name: name, Optional: optional != nil && *optional})
	}
	for i := range spec.Volumes {
		v := &spec.Volumes[i]
		if v.ConfigMap != nil {
			ref(ConfigMapObject, &v.ConfigMap.Name, v.ConfigMap.Optional)
		}
		if v.Secret != nil {
			ref(SecretObject, &v.Secret.SecretName, v.Secret.Optional)
		}
		if v.Projected != nil {
			for j := range v.Projected.Sources {
				s := &v.Projected.Sources[j]
				if s.ConfigMap != nil {
					ref(ConfigMapObject, &s.ConfigMap.Name, s.ConfigMap.Optional)
				}
				if s.Secret != nil {
					ref(SecretObject, &s.Secret.Name, s.Secret.Optional)
				}
			}
		}
	}
	container := func(env []corev1.EnvVar, envFrom []corev1.EnvFromSource) {
		for i := range env {
			from := env[i].ValueFrom
			if from == nil {
				continue
			}
			if r := from.ConfigMapKeyRef; r != nil {
				ref(ConfigMapObject, &r.Name, r.Optional)
			}
			if r := from.SecretKeyRef; r != nil {
				ref(SecretObject, &r.Name, r.Optional)
			}
		}
		for i := range envFrom {
			if r := envFrom[i].ConfigMapRef; r != nil {
				ref(ConfigMapObject, &r.Name, r.Optional)
			}
			if r := envFrom[i].SecretRef; r != nil {
				ref(SecretObject, &r.Name, r.Optional)
			}
		}
	}
	for i := range spec.InitContainers {
		container(spec.InitContainers[i].Env, spec.InitContainers[i].EnvFrom)
	}
	for i := range spec.Containers {
		container(spec.Containers[i].Env, spec.Containers[i].EnvFrom)
	}
	for i := range spec.EphemeralContainers {
		container(spec.EphemeralContainers[i].Env, spec.EphemeralContainers[i].EnvFrom)
	}
	optional := true
	for i := range spec.ImagePullSecrets {
		ref(SecretObject, &spec.ImagePullSecrets[i].Name, &optional)
	}
}

// NeedsCopies reports whether a candidate in namespace of a target needs
// copies of the ConfigMaps and Secrets of its source pod's namespace: all
// but a self target's candidate beside its source pod do.
func NeedsCopies(self bool, sourceNamespace, namespace string) bool {
	return !self || namespace != sourceNamespace
}

// referenceCopies renames every reference of spec to the ConfigMaps and
// Secrets of its namespace to the source cluster's copies in a target.
func referenceCopies(spec *corev1.PodSpec, sourceCluster string) {
	VisitObjectReferences(spec, func(r ObjectReference) {
		if *r.Name != "" {
			*r.Name = protocol.CopyName(sourceCluster, *r.Name)
		}
	})
}
