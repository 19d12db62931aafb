package chaos

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// GangWatch follows the source pods of a namespace, with no code of the
// agent's: no gang member may bind unless, as the watch has seen it by
// then, at least its gang's size of members stand elected and live (not
// deleted, not terminating, not failed). The source writes the elections
// before any allowance, and a watch delivers one object's versions in
// order, so by then every election has been seen. A member elected again
// on its own after its gang was whole (its reservation ended before it
// bound) binds beside members still elected: no breach. Members lost
// (deleted, evicted) count for nothing: the pods that replace them bind
// only as a gang again. It records the first breach.
type GangWatch struct {
	mu      sync.Mutex
	size    map[string]int
	members map[string]map[string]gangMemberSeen // gang → member → what was seen
	bound   map[string]string                    // member → node
	breach  string
}

type gangMemberSeen struct{ elected, live, bound bool }

// WatchGangs starts a GangWatch of namespace ns, size giving each gang's
// size by its name (GangOf); it stops with ctx.
func WatchGangs(ctx context.Context, c kubernetes.Interface, ns string, size map[string]int) (*GangWatch, error) {
	g := &GangWatch{size: size, members: map[string]map[string]gangMemberSeen{}, bound: map[string]string{}}
	w, err := c.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	go func() {
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					return
				}
				if p, ok := ev.Object.(*corev1.Pod); ok {
					g.observe(p, ev.Type == watch.Deleted)
				}
			}
		}
	}()
	return g, nil
}

func (g *GangWatch) observe(p *corev1.Pod, deleted bool) {
	group := GangOf(p)
	if group == "" || p.Labels[protocol.CandidateLabel] != "" {
		// A self target's candidates share their source pods' namespace.
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.members[group] == nil {
		g.members[group] = map[string]gangMemberSeen{}
	}
	e, err := protocol.ParseElection(p.Annotations[protocol.ElectionAnnotation])
	g.members[group][p.Name] = gangMemberSeen{
		elected: err == nil && e.Elected(),
		live:    !deleted && p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodFailed,
		bound:   p.Spec.NodeName != "",
	}
	n := 0
	for _, m := range g.members[group] {
		if m.elected && m.live {
			n++
		}
	}
	if p.Spec.NodeName != "" && g.bound[p.Name] == "" {
		g.bound[p.Name] = p.Spec.NodeName
		if n < g.size[group] && g.breach == "" {
			g.breach = fmt.Sprintf("%s bound to %s while %d of its gang %s's %d stood elected", p.Name, p.Spec.NodeName, n, group, g.size[group])
		}
	}
}

// Breach is the first member seen bound without its whole gang elected,
// "" for none.
func (g *GangWatch) Breach() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.breach
}

// Partial names a gang that some live member of is bound while fewer than
// its size are, "" for none. It is no breach while members bind one after
// another (or one is elected again on its own): call it once the run is
// meant to have settled. It catches what Breach cannot, a gang that stood
// whole in elections and then lost members before they bound (a target
// let a reservation go that the source elected on), left running in part
// with nothing to complete it.
func (g *GangWatch) Partial() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, group := range slices.Sorted(maps.Keys(g.members)) {
		bound := 0
		for _, m := range g.members[group] {
			if m.bound && m.live {
				bound++
			}
		}
		if bound > 0 && bound < g.size[group] {
			return fmt.Sprintf("gang %s runs %d of its %d members", group, bound, g.size[group])
		}
	}
	return ""
}

// GangOf names a pod's gang as the watch keys it: the pod-group label's
// value; schedulingGroup:name for a Kubernetes PodGroup's; job:name or jobset:name
// for a gang of the pod's Job or JobSet; "" for none.
func GangOf(p *corev1.Pod) string {
	if g := p.Labels[protocol.PodGroupLabel]; g != "" {
		return g
	}
	if g := p.Spec.SchedulingGroup; g != nil && g.PodGroupName != nil {
		return "schedulingGroup:" + *g.PodGroupName
	}
	switch p.Annotations[protocol.GangAnnotation] {
	case protocol.GangOfJob:
		return "job:" + p.Labels[batchv1.JobNameLabel]
	case protocol.GangOfJobSet:
		return "jobset:" + p.Labels[protocol.JobSetNameLabel]
	}
	return ""
}
