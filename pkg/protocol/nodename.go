package protocol

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// maxNodeName is the longest virtual node name: a node's name is also the
// value of its kubernetes.io/hostname label.
const maxNodeName = 63

// VirtualNodeName is the name of the virtual node that stands for a target
// in the source cluster, one name per target:
//
//   - a ClusterTarget: flotilla-<name>, or when longer than 63 characters
//     its first 52 and 10 hex digits of its SHA-256;
//   - a namespaced Target: flotilla.<namespace>.<name>, or when longer
//     than 63 characters flotilla.<namespace>-<name>, dots made dashes and
//     cut to 37 characters, then '-' and 16 hex digits of the SHA-256 of
//     "<namespace>/<name>".
//
// No namespaced form equals a ClusterTarget's: those begin "flotilla-",
// these "flotilla.". No two namespaced forms are equal: a namespace, a DNS
// label, holds no dot, so the short form's namespace ends at its second
// dot; the short form has two dots or more and the hashed form exactly one;
// two hashed forms differ in the hash of their namespace and name. What no
// spelling can rule out (a hash collision; a ClusterTarget named as
// another's hashed form, which only a cluster admin can do) the owner
// recorded on the Node refuses (NodeOwner).
func VirtualNodeName(namespace, target string) string {
	if namespace == "" {
		name := "flotilla-" + target
		if len(name) <= maxNodeName {
			return name
		}
		sum := sha256.Sum256([]byte(name))
		return name[:52] + "-" + hex.EncodeToString(sum[:])[:10]
	}
	name := "flotilla." + namespace + "." + target
	if len(name) <= maxNodeName {
		return name
	}
	sum := sha256.Sum256([]byte(namespace + "/" + target))
	const hashLen = 16
	readable := strings.ReplaceAll(namespace+"-"+target, ".", "-")
	readable = strings.TrimRight(readable[:maxNodeName-len("flotilla.")-1-hashLen], "-")
	return "flotilla." + readable + "-" + hex.EncodeToString(sum[:])[:hashLen]
}

// VirtualNodeNameOf is the virtual node of the target the source calls
// name: "<namespace>/<name>" of a Target, or a ClusterTarget's name.
func VirtualNodeNameOf(name string) string {
	o := OwnerOfTargetName(name)
	return VirtualNodeName(o.Namespace, o.Name)
}

// LegacyVirtualNodeName is the name the virtual node of a namespaced Target
// had before VirtualNodeName gave it a form of its own:
// flotilla-<namespace>-<name>, hashed when too long. It is not one-to-one
// (Target x-y of namespace a and Target y of namespace a-x, or Target b of
// namespace a and ClusterTarget a-b, share one), so it is no target's node
// any more: the pods still bound to one are served until they end, and
// then the node is deleted. "" for a ClusterTarget, whose form did not
// change.
func LegacyVirtualNodeName(namespace, target string) string {
	if namespace == "" {
		return ""
	}
	name := "flotilla-" + namespace + "-" + target
	if len(name) <= maxNodeName {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return name[:52] + "-" + hex.EncodeToString(sum[:])[:10]
}

// VirtualNodeOwnerAnnotation on a virtual node names the target that owns
// it (NodeOwner.String). A target takes a node only when it is missing or
// already its own; a node another target owns is refused and reported.
const VirtualNodeOwnerAnnotation = Prefix + "owner"

// TargetNamespaceLabel is on the virtual node of a namespaced Target: its
// namespace.
const TargetNamespaceLabel = Prefix + "target-namespace"

// NodeOwner is a target as the owner of its virtual node: a ClusterTarget
// (Namespace empty) or a namespaced Target.
type NodeOwner struct {
	Namespace string
	Name      string
}

// Kind is "ClusterTarget" or "Target".
func (o NodeOwner) Kind() string {
	if o.Namespace == "" {
		return "ClusterTarget"
	}
	return "Target"
}

// String is the annotation's value: "ClusterTarget/<name>" or
// "Target/<namespace>/<name>".
func (o NodeOwner) String() string {
	if o.Namespace == "" {
		return "ClusterTarget/" + o.Name
	}
	return "Target/" + o.Namespace + "/" + o.Name
}

// TargetName is how the source calls the target: a ClusterTarget's name,
// "<namespace>/<name>" of a Target (what elections carry).
func (o NodeOwner) TargetName() string {
	if o.Namespace == "" {
		return o.Name
	}
	return o.Namespace + "/" + o.Name
}

// ParseNodeOwner reads VirtualNodeOwnerAnnotation.
func ParseNodeOwner(v string) (NodeOwner, error) {
	parts := strings.Split(v, "/")
	switch {
	case len(parts) == 2 && parts[0] == "ClusterTarget" && parts[1] != "":
		return NodeOwner{Name: parts[1]}, nil
	case len(parts) == 3 && parts[0] == "Target" && parts[1] != "" && parts[2] != "":
		return NodeOwner{Namespace: parts[1], Name: parts[2]}, nil
	}
	return NodeOwner{}, fmt.Errorf("virtual node owner %q: want ClusterTarget/<name> or Target/<namespace>/<name>", v)
}

// OwnerOfTargetName is the NodeOwner of the target the source calls name.
func OwnerOfTargetName(name string) NodeOwner {
	if ns, n, ok := strings.Cut(name, "/"); ok {
		return NodeOwner{Namespace: ns, Name: n}
	}
	return NodeOwner{Name: name}
}
