package local

import (
	"context"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/flotilla-dev/flotilla/pkg/placement"
	"github.com/flotilla-dev/flotilla/pkg/summary"
)

// Topology tells the values this cluster's nodes carry of topology keys,
// for a self target, which publishes no ClusterSummary: a spread counts
// its domains as it counts another target's. Only the nodes that take pods
// count (Ready, not cordoned, not virtual), as in a summary. Its node
// informer starts the first time Values is called, so that a cluster with
// no self target under a spread watches no node for it. It runs on the
// leader, beside the placement controller that reads it.
type Topology struct {
	nodes     cache.SharedIndexInformer
	want      chan struct{}
	wantOnce  sync.Once
	synced    chan struct{}
	closeOnce sync.Once
}

// NewTopology makes the watcher of this cluster's nodes; add it to the
// manager to run it.
func NewTopology(kube kubernetes.Interface) *Topology {
	t := &Topology{
		nodes:  coreinformers.NewNodeInformer(kube, 0, cache.Indexers{}),
		want:   make(chan struct{}),
		synced: make(chan struct{}),
	}
	// The informer has not started: setting a transform cannot fail.
	_ = t.nodes.SetTransform(summary.TrimNode)
	return t
}

// Start waits for the first Values, then watches the nodes until ctx ends.
func (t *Topology) Start(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case <-t.want:
	}
	go t.nodes.RunWithContext(ctx)
	if cache.WaitForNamedCacheSyncWithContext(ctx, t.nodes.HasSynced) {
		t.closeOnce.Do(func() { close(t.synced) })
	}
	<-ctx.Done()
	return nil
}

// Of tells, per key, the sorted values the nodes that take pods carry, and
// the combinations of the keys' values every node but a virtual one
// carries (open when one of its nodes takes pods), as a summary's Topology
// and Domains do; ok is false until the nodes are listed (the first call
// starts that).
func (t *Topology) Of(keys []string) (values map[string][]string, combinations []placement.Combination, ok bool) {
	t.wantOnce.Do(func() { close(t.want) })
	if !closed(t.synced) {
		return nil, nil, false
	}
	values = make(map[string][]string, len(keys))
	index := map[string]int{}
	for _, obj := range t.nodes.GetStore().List() {
		node, isNode := obj.(*corev1.Node)
		if !isNode || summary.IsVirtual(node) {
			continue
		}
		open := takesPods(node)
		comb := make(map[string]string, len(keys))
		for _, k := range keys {
			v, has := node.Labels[k]
			if !has {
				continue
			}
			comb[k] = v
			if open && !slices.Contains(values[k], v) {
				values[k] = append(values[k], v)
			}
		}
		id := labels.Set(comb).String()
		if i, seen := index[id]; seen {
			combinations[i].Open = combinations[i].Open || open
			continue
		}
		index[id] = len(combinations)
		combinations = append(combinations, placement.Combination{Values: comb, Open: open})
	}
	for _, k := range keys {
		slices.Sort(values[k])
	}
	return values, combinations, true
}
