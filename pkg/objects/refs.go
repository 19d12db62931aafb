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

	"github.com/flotilla-dev/flotilla/pkg/candidate"
)

// Kind of an object a pod references.
type Kind = candidate.ObjectKind

const (
	ConfigMap = candidate.ConfigMapObject
	Secret    = candidate.SecretObject
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
// kind and name: those candidate.VisitObjectReferences visits (volumes,
// projected sources included; env and envFrom of init, regular and
// ephemeral containers; image pull secrets), which Build renames to the
// copies' names.
func Of(spec *corev1.PodSpec) []Ref {
	seen := map[Ref]int{}
	var out []Ref
	candidate.VisitObjectReferences(spec, func(r candidate.ObjectReference) {
		if *r.Name == "" {
			return
		}
		key := Ref{Kind: r.Kind, Name: *r.Name}
		if i, ok := seen[key]; ok {
			// One reference that needs the object is enough to need it.
			out[i].Optional = out[i].Optional && r.Optional
			return
		}
		seen[key] = len(out)
		out = append(out, Ref{Kind: r.Kind, Name: *r.Name, Optional: r.Optional})
	})
	slices.SortFunc(out, func(a, b Ref) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name))
	})
	return out
}
