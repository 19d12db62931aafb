package target

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// Reach is where a target sends pods, as overlap detection compares it.
type Reach struct {
	// Name is the target's name as the source calls it.
	Name string
	// Cluster is the cluster it reaches: SelfCluster, or the API server
	// URL its kubeconfig resolves to (ClusterOf).
	Cluster string
	// Namespace is a Target's namespace, whose pods alone it takes; empty
	// for a ClusterTarget, which takes every namespace's.
	Namespace string
	// Mapping maps source namespaces to the namespaces they go to there.
	Mapping map[string]string
}

// SelfCluster is the Cluster of every self target.
const SelfCluster = "self"

// ClusterOf is the Cluster of a target: SelfCluster for a self target,
// else the API server URL client-go calls, with its scheme and host in
// lower case, the scheme's port made explicit and no trailing slash, so
// that two spellings of one URL compare equal. Two URLs of one cluster
// (a load balancer and a node's address) are not recognized as one.
func ClusterOf(self bool, host string) string {
	if self {
		return SelfCluster
	}
	u, err := url.Parse(host)
	if err != nil || u.Host == "" {
		// client-go takes a host without a scheme as https.
		if u, err = url.Parse("https://" + host); err != nil {
			return host
		}
	}
	u.Scheme, u.Host = strings.ToLower(u.Scheme), strings.ToLower(u.Host)
	if u.Port() == "" {
		switch u.Scheme {
		case "https":
			u.Host += ":443"
		case "http":
			u.Host += ":80"
		}
	}
	u.Path = strings.TrimRight(u.Path, "/")
	return u.String()
}

func (r Reach) namespaceFor(sourceNamespace string) string {
	if ns, ok := r.Mapping[sourceNamespace]; ok {
		return ns
	}
	return sourceNamespace
}

// Overlap is another target that sends pods of one source namespace to
// the same cluster and namespace as this one: each of the two places those
// pods with candidates of its own.
type Overlap struct {
	// Other is the other target's name as the source calls it.
	Other string
	// SourceNamespace is the namespace whose pods both take; empty when
	// both are ClusterTargets, which take every namespace's.
	SourceNamespace string
	// TargetNamespace is where both send them; empty with SourceNamespace.
	TargetNamespace string
}

// Overlaps returns the targets of others (sorted by name) that reach the
// same cluster as me and send the pods of a source namespace to the same
// namespace there. A namespaced Target overlaps a ClusterTarget, or a
// Target of its own namespace, that sends its namespace's pods where it
// does; two ClusterTargets of one cluster overlap in every namespace that
// neither maps elsewhere.
func Overlaps(me Reach, others []Reach) []Overlap {
	var out []Overlap
	for _, o := range others {
		if o.Name == me.Name || o.Cluster != me.Cluster || me.Cluster == "" {
			continue
		}
		switch {
		case me.Namespace == "" && o.Namespace == "":
			out = append(out, Overlap{Other: o.Name})
		case me.Namespace != "" && o.Namespace != "" && me.Namespace != o.Namespace:
			// Pods of different namespaces: no pod is the business of both.
		default:
			ns := me.Namespace
			if ns == "" {
				ns = o.Namespace
			}
			if to := me.namespaceFor(ns); to == o.namespaceFor(ns) {
				out = append(out, Overlap{Other: o.Name, SourceNamespace: ns, TargetNamespace: to})
			}
		}
	}
	slices.SortFunc(out, func(a, b Overlap) int { return strings.Compare(a.Other, b.Other) })
	return out
}

// OverlapMessage says, for a target's Overlapping condition, which targets
// it overlaps and where.
func OverlapMessage(me Reach, overlaps []Overlap) string {
	where := "the API server " + me.Cluster
	if me.Cluster == SelfCluster {
		where = "this cluster (self)"
	}
	parts := make([]string, len(overlaps))
	for i, o := range overlaps {
		if o.SourceNamespace == "" {
			parts[i] = fmt.Sprintf("%s also reaches %s and sends the pods of every namespace neither maps elsewhere to the same namespace", kindAndName(o.Other), where)
		} else {
			parts[i] = fmt.Sprintf("%s also reaches %s and sends the pods of namespace %s to namespace %s there", kindAndName(o.Other), where, o.SourceNamespace, o.TargetNamespace)
		}
	}
	return strings.Join(parts, "; ") + ". Each target places those pods with candidates of its own, so a pod may get a candidate from each; remove one target, or give them different namespaces, if that is not meant"
}

// kindAndName names a target by its kind: a namespaced Target's name is
// "<namespace>/<name>".
func kindAndName(name string) string {
	if strings.Contains(name, "/") {
		return "Target " + name
	}
	return "ClusterTarget " + name
}

// reachOf is where a running target sends pods.
func reachOf(t *Target) Reach {
	host := ""
	if t.rest != nil {
		host = t.rest.Host
	}
	return Reach{Name: t.Name, Cluster: ClusterOf(t.Self, host), Namespace: t.Namespace, Mapping: t.namespaces}
}

// Cluster is the cluster the target reaches (ClusterOf): two targets of one
// source with the same Cluster send pods to one cluster. It is empty for a
// target of no known address (made over a clientset alone: NewWithClient).
func (t *Target) Cluster() string {
	if !t.Self && (t.rest == nil || t.rest.Host == "" || t.rest.Host == inProcessHost) {
		return ""
	}
	return reachOf(t).Cluster
}

// reportOverlaps sets the Overlapping condition of a running target from
// the targets running beside it. A target that starts or goes is seen by
// the others at their next resync.
func (c *Controller) reportOverlaps(v view, t *Target) {
	me := reachOf(t)
	var others []Reach
	for _, o := range c.Targets.All() {
		others = append(others, reachOf(o))
	}
	if overlaps := Overlaps(me, others); len(overlaps) > 0 {
		setCondition(v, v1alpha1.TargetOverlapping, metav1.ConditionTrue, v1alpha1.ReasonSameClusterAndNamespace, OverlapMessage(me, overlaps))
		return
	}
	setCondition(v, v1alpha1.TargetOverlapping, metav1.ConditionFalse, v1alpha1.ReasonNoOverlap, "No other target of this cluster sends pods of a namespace to the same cluster and namespace")
}
