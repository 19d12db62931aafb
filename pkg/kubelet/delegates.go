package kubelet

import (
	"errors"
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/target"
)

// delegates finds, for a source pod, the pod to proxy to: its delegate in
// the target its virtual node stands for.
type delegates struct {
	pods interface {
		GetByKey(key string) (any, bool, error)
	}
	targets interface {
		OfPod(pod *corev1.Pod) (*target.Target, bool)
	}
	sourceCluster string
}

// delegate is where a request on a source pod goes.
type delegate struct {
	target    *target.Target
	namespace string
	name      string
}

// errNotFound is what is missing for a request: the source pod, its
// virtual node's target, or its delegate. It is a 404 with its message.
type errNotFound struct{ msg string }

func (e errNotFound) Error() string { return e.msg }

// errUnavailable is a target not ready to say whether the delegate exists;
// the caller may try again.
type errUnavailable struct{ msg string }

func (e errUnavailable) Error() string { return e.msg }

func notFound(format string, args ...any) error { return errNotFound{fmt.Sprintf(format, args...)} }

// sourcePod is the source pod ns/name from the agent's cache.
func (d *delegates) sourcePod(namespace, name string) (*corev1.Pod, error) {
	obj, ok, err := d.pods.GetByKey(namespace + "/" + name)
	if err != nil {
		return nil, fmt.Errorf("reading source pod %s/%s from the cache: %w", namespace, name, err)
	}
	pod, isPod := obj.(*corev1.Pod)
	if !ok || !isPod {
		return nil, notFound("pod %s/%s is not a Flotilla source pod (none is known to this agent by that name)", namespace, name)
	}
	return pod, nil
}

// nodeOf is the virtual node the source pod ns/name is bound to, "" when
// there is none: authorization then asks for every node.
func (d *delegates) nodeOf(namespace, name string) string {
	pod, err := d.sourcePod(namespace, name)
	if err != nil || pod.Spec.NodeName == "" {
		return ""
	}
	if _, ok := d.targets.OfPod(pod); !ok {
		return ""
	}
	return pod.Spec.NodeName
}

// resolve finds the delegate of source pod ns/name: the pod must be bound to
// a virtual node whose target runs here, and its delegate must be known and
// bound in that target.
func (d *delegates) resolve(namespace, name string) (delegate, error) {
	pod, err := d.sourcePod(namespace, name)
	if err != nil {
		return delegate{}, err
	}
	if pod.Spec.NodeName == "" {
		return delegate{}, notFound("pod %s/%s is not bound to a virtual node yet", namespace, name)
	}
	t, ok := d.targets.OfPod(pod)
	if !ok {
		return delegate{}, notFound("pod %s/%s is bound to node %s, and no running target of this agent runs it there", namespace, name, pod.Spec.NodeName)
	}
	del := delegate{
		target:    t,
		namespace: t.NamespaceFor(namespace),
		name:      protocol.CandidateName(d.sourceCluster, t.Name, namespace, name, string(pod.UID)),
	}
	if !t.HasSynced() {
		return delegate{}, errUnavailable{fmt.Sprintf("target %s: its pods are not listed yet: %v", t.Name, t.Err())}
	}
	candidate, ok := t.Candidate(del.namespace, del.name)
	if !ok || candidate.Labels[protocol.SourceUIDLabel] != string(pod.UID) {
		// A pod of that name that stands for another source pod (the
		// target's own, or one left by an earlier pod of the same name)
		// is not this pod's delegate.
		return delegate{}, notFound("pod %s/%s has no delegate %s/%s in target %s", namespace, name, del.namespace, del.name, t.Name)
	}
	if candidate.Spec.NodeName == "" {
		return delegate{}, notFound("the delegate %s/%s of pod %s/%s in target %s is not bound to a node", del.namespace, del.name, namespace, name, t.Name)
	}
	return del, nil
}

// writeResolveError answers a request whose delegate was not found.
func writeResolveError(w http.ResponseWriter, err error) {
	var nf errNotFound
	var un errUnavailable
	switch {
	case errors.As(err, &nf):
		http.Error(w, err.Error(), http.StatusNotFound)
	case errors.As(err, &un):
		w.Header().Set("Retry-After", "5")
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
	default:
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}
