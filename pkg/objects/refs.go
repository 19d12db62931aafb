// Package objects owns the ConfigMaps and Secrets a source pod needs in the
// target that runs it: which ones its spec references (refs.go), copying
// them into a target before the pod's candidate is sent there and tying
// each copy to the candidates that use it (copy.go), watching the source's
// objects (watch.go) and keeping every copy in step with its original
// (sync.go).
package objects

import (
	"cmp"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// Kind of an object a pod references.
type Kind string

const (
	ConfigMap Kind = "ConfigMap"
	Secret    Kind = "Secret"
)

// Ref is one object a pod spec references, in the pod's namespace.
type Ref struct {
	Kind Kind
	Name string
	// Optional is true when every reference to the object lets the pod
	// start without it (an optional volume, key or envFrom, or an image
	// pull secret, which the kubelet skips when missing).
	Optional bool
}

// String is "<Kind> <name>".
func (r Ref) String() string { return string(r.Kind) + " " + r.Name }

// key is "<Kind>/<name>": one entry of the source pods' index.
func (r Ref) key() string { return Key(r.Kind, r.Name) }

// Key names an object of a namespace in the index of the pods that
// reference it.
func Key(kind Kind, name string) string { return string(kind) + "/" + name }

// Of lists the ConfigMaps and Secrets spec references, each once, sorted by
// kind and name: volumes (projected sources included), env and envFrom of
// init, regular and ephemeral containers, and image pull secrets.
func Of(spec *corev1.PodSpec) []Ref {
	seen := map[Ref]int{}
	var out []Ref
	add := func(kind Kind, name string, optional *bool) {
		if name == "" {
			return
		}
		opt := optional != nil && *optional
		key := Ref{Kind: kind, Name: name}
		if i, ok := seen[key]; ok {
			// One reference that needs the object is enough to need it.
			out[i].Optional = out[i].Optional && opt
			return
		}
		seen[key] = len(out)
		out = append(out, Ref{Kind: kind, Name: name, Optional: opt})
	}
	for _, v := range spec.Volumes {
		switch {
		case v.ConfigMap != nil:
			add(ConfigMap, v.ConfigMap.Name, v.ConfigMap.Optional)
		case v.Secret != nil:
			add(Secret, v.Secret.SecretName, v.Secret.Optional)
		case v.Projected != nil:
			for _, s := range v.Projected.Sources {
				if s.ConfigMap != nil {
					add(ConfigMap, s.ConfigMap.Name, s.ConfigMap.Optional)
				}
				if s.Secret != nil {
					add(Secret, s.Secret.Name, s.Secret.Optional)
				}
			}
		}
	}
	containers := func(env []corev1.EnvVar, envFrom []corev1.EnvFromSource) {
		for _, e := range env {
			if e.ValueFrom == nil {
				continue
			}
			if r := e.ValueFrom.ConfigMapKeyRef; r != nil {
				add(ConfigMap, r.Name, r.Optional)
			}
			if r := e.ValueFrom.SecretKeyRef; r != nil {
				add(Secret, r.Name, r.Optional)
			}
		}
		for _, e := range envFrom {
			if r := e.ConfigMapRef; r != nil {
				add(ConfigMap, r.Name, r.Optional)
			}
			if r := e.SecretRef; r != nil {
				add(Secret, r.Name, r.Optional)
			}
		}
	}
	for _, c := range spec.InitContainers {
		containers(c.Env, c.EnvFrom)
	}
	for _, c := range spec.Containers {
		containers(c.Env, c.EnvFrom)
	}
	for _, c := range spec.EphemeralContainers {
		containers(c.Env, c.EnvFrom)
	}
	optional := true
	for _, s := range spec.ImagePullSecrets {
		add(Secret, s.Name, &optional)
	}
	slices.SortFunc(out, func(a, b Ref) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name))
	})
	return out
}
