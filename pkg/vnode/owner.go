package vnode

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// OwnerOf is the target that owns a node: the one its
// protocol.VirtualNodeOwnerAnnotation names or, on a virtual node written
// before that annotation (which has none), the one its TargetLabel and
// protocol.TargetNamespaceLabel name. ok is false for a node that is no
// virtual node of any target (a real node).
func OwnerOf(node *corev1.Node) (owner protocol.NodeOwner, ok bool) {
	if v, has := node.Annotations[protocol.VirtualNodeOwnerAnnotation]; has {
		o, err := protocol.ParseNodeOwner(v)
		return o, err == nil
	}
	if name := node.Labels[TargetLabel]; name != "" && node.Labels[TypeLabel] == TypeValue {
		return protocol.NodeOwner{Namespace: node.Labels[protocol.TargetNamespaceLabel], Name: name}, true
	}
	return protocol.NodeOwner{}, false
}

// TakenError is a node that a target may not take: another target owns it,
// or it is no virtual node at all.
type TakenError struct {
	Node string
	// Owner is the target that owns the node, "" when it is no virtual
	// node.
	Owner string
}

func (e *TakenError) Error() string {
	if e.Owner == "" {
		return fmt.Sprintf("node %s exists and is no Flotilla virtual node", e.Node)
	}
	return fmt.Sprintf("node %s is the virtual node of %s", e.Node, e.Owner)
}

// IsTaken reports whether err is, or wraps, a *TakenError.
func IsTaken(err error) (*TakenError, bool) {
	var t *TakenError
	ok := errors.As(err, &t)
	return t, ok
}

// CheckOwner says whether target me may run node: nil when node is nil
// (missing: whoever creates it first owns it) or already me's; a
// *TakenError when another target owns it or it is no virtual node.
func CheckOwner(node *corev1.Node, me protocol.NodeOwner) error {
	if node == nil {
		return nil
	}
	owner, ok := OwnerOf(node)
	switch {
	case !ok:
		return &TakenError{Node: node.Name}
	case owner != me:
		return &TakenError{Node: node.Name, Owner: owner.String()}
	}
	return nil
}
