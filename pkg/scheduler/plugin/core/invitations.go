package core

import (
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// QuotaOf is an invitation's spec.quota as the ledger counts it.
func QuotaOf(q *v1alpha1.SourceQuota) Quota {
	var out Quota
	if q == nil {
		return out
	}
	if q.CPU != nil {
		v := q.CPU.MilliValue()
		out.CPU = &v
	}
	if q.Memory != nil {
		v := q.Memory.Value()
		out.Memory = &v
	}
	if q.Pods != nil {
		v := int64(*q.Pods)
		out.Pods = &v
	}
	return out
}

// SourceInvitation is a Source: it covers its own namespace.
func SourceInvitation(s *v1alpha1.Source) Invitation {
	return Invitation{
		Name:    fmt.Sprintf("Source %s/%s", s.Namespace, s.Name),
		Cluster: s.Spec.ClusterName,
		Covers:  func(ns string) bool { return ns == s.Namespace },
		Quota:   QuotaOf(s.Spec.Quota),
	}
}

// ClusterSourceInvitation is a ClusterSource: it covers the namespaces it
// lists, or those whose labels (namespaceLabels; ok false for a namespace
// not known) its selector matches. A selector that does not parse covers
// what the agent last granted (status.namespaces), as the source can send
// candidates nowhere else.
func ClusterSourceInvitation(cs *v1alpha1.ClusterSource, namespaceLabels func(string) (map[string]string, bool)) Invitation {
	inv := Invitation{
		Name:    "ClusterSource " + cs.Name,
		Cluster: cs.Spec.ClusterName,
		Quota:   QuotaOf(cs.Spec.Quota),
	}
	granted := func(ns string) bool { return slices.Contains(cs.Status.Namespaces, ns) }
	switch {
	case cs.Spec.NamespaceSelector == nil:
		inv.Covers = func(ns string) bool { return slices.Contains(cs.Spec.Namespaces, ns) }
	default:
		sel, err := metav1.LabelSelectorAsSelector(cs.Spec.NamespaceSelector)
		if err != nil {
			inv.Covers = granted
			break
		}
		inv.Covers = func(ns string) bool {
			l, ok := namespaceLabels(ns)
			if !ok {
				return granted(ns)
			}
			return sel.Matches(labels.Set(l))
		}
	}
	return inv
}
