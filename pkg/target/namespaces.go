package target

import (
	"context"
	"fmt"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/flotilla-dev/flotilla/pkg/slim"
)

// candidateInformers holds the target's candidate informers: one over every
// namespace when the source may list pods cluster-wide (self, or a
// kubeconfig without an invitation summary), otherwise one per invited
// namespace, since an invited identity may list pods only there. Namespaces
// come and go with the invitation.
type candidateInformers struct {
	t *Target

	mu       sync.RWMutex
	ctx      context.Context
	byNS     map[string]*nsInformer
	handlers []ChangeHandler
	// invited is nil while every namespace is open to the source; else the
	// namespaces the invitation covers.
	invited []string
	// waiting is true until an invitation's namespaces are known.
	waiting bool
}

type nsInformer struct {
	informer cache.SharedIndexInformer
	cancel   context.CancelFunc
	done     chan struct{}
}

func (ci *candidateInformers) start(ctx context.Context, perNamespace bool) {
	ci.mu.Lock()
	ci.ctx = ctx
	ci.byNS = map[string]*nsInformer{}
	ci.waiting = perNamespace
	ci.mu.Unlock()
	if !perNamespace {
		ci.setNamespaces(nil, true)
	}
}

// setNamespaces makes the informers match the invited namespaces (all of
// them when all is set).
func (ci *candidateInformers) setNamespaces(namespaces []string, all bool) {
	home := ""
	if ci.t.Namespace != "" {
		home = ci.t.NamespaceFor(ci.t.Namespace)
	}
	want := watched(home, namespaces, all)
	ci.mu.Lock()
	if ci.ctx == nil {
		ci.mu.Unlock()
		return
	}
	var stop []*nsInformer
	for ns, inf := range ci.byNS {
		if !slices.Contains(want, ns) {
			stop = append(stop, inf)
			delete(ci.byNS, ns)
		}
	}
	for _, ns := range want {
		if _, ok := ci.byNS[ns]; !ok {
			ci.byNS[ns] = ci.newInformer(ns)
		}
	}
	if all {
		ci.invited = nil
	} else {
		ci.invited = slices.Clone(namespaces)
	}
	ci.waiting = false
	ci.mu.Unlock()
	for _, inf := range stop {
		inf.cancel()
		<-inf.done
	}
}

// watched are the namespaces whose candidates a target's informers list,
// given the namespaces invited (all of them when all is set). home is
// where a namespaced Target sends its namespace's pods ("" for a
// ClusterTarget): it watches that namespace alone, whatever else the
// invitation (or, for a self Target, the agent's own identity) could list,
// so that it never sees the candidates of another namespace's pods.
func watched(home string, invited []string, all bool) []string {
	switch {
	case home != "" && (all || slices.Contains(invited, home)):
		return []string{home}
	case home != "":
		return nil
	case all:
		return []string{metav1.NamespaceAll}
	}
	return invited
}

// newInformer starts an informer over one namespace; ci.mu is held.
func (ci *candidateInformers) newInformer(ns string) *nsInformer {
	client, selector := ci.t.client, ci.t.selector
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			return client.CoreV1().Pods(ns).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			return client.CoreV1().Pods(ns).Watch(ctx, o)
		},
	}
	inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{
		cache.NamespaceIndex: cache.MetaNamespaceIndexFunc,
		bySourceIndex:        indexBySource,
	})
	// Of a candidate the source reads metadata, node name and status.
	_ = inf.SetTransform(slim.Candidate)
	_ = inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		ci.t.setErr(fmt.Errorf("watching candidates in namespace %q: %w", ns, err))
		cache.DefaultWatchErrorHandler(ctx, r, err)
	})
	for _, f := range ci.handlers {
		_, _ = inf.AddEventHandler(podHandler(f))
	}
	ctx, cancel := context.WithCancel(ci.ctx)
	n := &nsInformer{informer: inf, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(n.done)
		inf.RunWithContext(ctx)
	}()
	return n
}

// podHandler calls f with every candidate the informer adds, updates or
// deletes; old is the cached object an update replaces, nil for the
// others.
func podHandler(f ChangeHandler) cache.ResourceEventHandler {
	call := func(old, obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		before, _ := old.(*corev1.Pod)
		f(before, pod)
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { call(nil, obj) },
		UpdateFunc: call,
		DeleteFunc: func(obj any) { call(nil, obj) },
	}
}

func (ci *candidateInformers) addHandler(f ChangeHandler) {
	ci.mu.Lock()
	defer ci.mu.Unlock()
	ci.handlers = append(ci.handlers, f)
	for _, inf := range ci.byNS {
		_, _ = inf.informer.AddEventHandler(podHandler(f))
	}
}

func (ci *candidateInformers) stopAll() {
	ci.mu.Lock()
	all := ci.byNS
	ci.byNS = map[string]*nsInformer{}
	ci.mu.Unlock()
	for _, inf := range all {
		inf.cancel()
		<-inf.done
	}
}

func (ci *candidateInformers) hasSynced() bool {
	ci.mu.RLock()
	defer ci.mu.RUnlock()
	if ci.ctx == nil || ci.waiting {
		return false
	}
	for _, inf := range ci.byNS {
		if !inf.informer.HasSynced() {
			return false
		}
	}
	return true
}

// indexer is the cache of the candidates of namespace ns, nil when the
// source does not watch it.
func (ci *candidateInformers) indexer(ns string) cache.Indexer {
	ci.mu.RLock()
	defer ci.mu.RUnlock()
	if inf, ok := ci.byNS[metav1.NamespaceAll]; ok {
		return inf.informer.GetIndexer()
	}
	if inf, ok := ci.byNS[ns]; ok {
		return inf.informer.GetIndexer()
	}
	return nil
}

func (ci *candidateInformers) indexers() []cache.Indexer {
	ci.mu.RLock()
	defer ci.mu.RUnlock()
	out := make([]cache.Indexer, 0, len(ci.byNS))
	for _, inf := range ci.byNS {
		out = append(out, inf.informer.GetIndexer())
	}
	return out
}

// covers reports whether the source may send candidates to namespace ns.
func (ci *candidateInformers) covers(ns string) bool {
	ci.mu.RLock()
	defer ci.mu.RUnlock()
	return ci.invited == nil || slices.Contains(ci.invited, ns)
}

func (ci *candidateInformers) namespaces() []string {
	ci.mu.RLock()
	defer ci.mu.RUnlock()
	return slices.Clone(ci.invited)
}
