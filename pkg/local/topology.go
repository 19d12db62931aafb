package local

import (
	"context"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

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

// Values are, per key, the sorted values the nodes that take pods carry;
// ok is false until the nodes are listed (the first call starts that).
func (t *Topology) Values(keys []string) (values map[string][]string, ok bool) {
	t.wantOnce.Do(func() { close(t.want) })
	if !closed(t.synced) {
		return nil, false
	}
	values = make(map[string][]string, len(keys))
	for _, obj := range t.nodes.GetStore().List() {
		node, isNode := obj.(*corev1.Node)
		if !isNode || !takesPods(node) {
			continue
		}
		for _, k := range keys {
			if v, has := node.Labels[k]; has && !slices.Contains(values[k], v) {
				values[k] = append(values[k], v)
			}
		}
	}
	for _, k := range keys {
		slices.Sort(values[k])
	}
	return values, true
}
