package plugin

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/scheduler/plugin/core"
)

// invitations is the scheduler's cache of Sources and ClusterSources, read
// for their quotas; nothing in the scheduling cycle asks the API server.
type invitations struct {
	sources, clusterSources cache.SharedIndexInformer
	namespaces              corelisters.NamespaceLister
}

func newInvitations(config *rest.Config, namespaces corelisters.NamespaceLister) (*invitations, error) {
	client, err := dynamic.NewForConfig(config)
	if err != nil {
		return nil, fmt.Errorf("making a client for Sources and ClusterSources: %w", err)
	}
	gv := v1alpha1.GroupVersion
	return &invitations{
		sources:        typedInformer(client, gv.WithResource("sources"), func() runtime.Object { return &v1alpha1.Source{} }),
		clusterSources: typedInformer(client, gv.WithResource("clustersources"), func() runtime.Object { return &v1alpha1.ClusterSource{} }),
		namespaces:     namespaces,
	}, nil
}

// typedInformer watches a custom resource and keeps typed objects. A
// cluster without the CRD has no invitations, hence no quotas: its list is
// empty (the watch fails and the list is retried, so a CRD installed later
// is picked up) rather than an error that would hold every candidate back.
func typedInformer(client dynamic.Interface, gvr schema.GroupVersionResource, newObj func() runtime.Object) cache.SharedIndexInformer {
	res := client.Resource(gvr)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			list, err := res.List(ctx, opts)
			if apierrors.IsNotFound(err) {
				return &unstructured.UnstructuredList{Object: map[string]any{}}, nil
			}
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return res.Watch(ctx, opts)
		},
	}
	informer := cache.NewSharedIndexInformer(lw, &unstructured.Unstructured{}, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	_ = informer.SetTransform(func(obj any) (any, error) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return obj, nil
		}
		typed := newObj()
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, typed); err != nil {
			return nil, fmt.Errorf("decoding %s %s: %w", gvr.Resource, cache.MetaObjectToName(u), err)
		}
		return typed, nil
	})
	return informer
}

func (i *invitations) run(ctx context.Context) {
	go i.sources.RunWithContext(ctx)
	go i.clusterSources.RunWithContext(ctx)
}

func (i *invitations) synced() bool {
	return i.sources.HasSynced() && i.clusterSources.HasSynced()
}

// onChange calls changed with the clusterName of every invitation added,
// changed or deleted (both names when the name changed).
func (i *invitations) onChange(changed func(cluster string)) error {
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { changed(clusterNameOf(obj)) },
		UpdateFunc: func(old, obj any) { changed(clusterNameOf(old)); changed(clusterNameOf(obj)) },
		DeleteFunc: func(obj any) { changed(clusterNameOf(obj)) },
	}
	if _, err := i.sources.AddEventHandler(handler); err != nil {
		return fmt.Errorf("watching Sources: %w", err)
	}
	if _, err := i.clusterSources.AddEventHandler(handler); err != nil {
		return fmt.Errorf("watching ClusterSources: %w", err)
	}
	return nil
}

func clusterNameOf(obj any) string {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	switch t := obj.(type) {
	case *v1alpha1.Source:
		return t.Spec.ClusterName
	case *v1alpha1.ClusterSource:
		return t.Spec.ClusterName
	}
	return ""
}

// covering returns the invitations of cluster that cover namespace.
func (i *invitations) covering(cluster, namespace string) []core.Invitation {
	var out []core.Invitation
	objs, _ := i.sources.GetIndexer().ByIndex(cache.NamespaceIndex, namespace)
	for _, obj := range objs {
		if s, ok := obj.(*v1alpha1.Source); ok && s.Spec.ClusterName == cluster {
			out = append(out, core.SourceInvitation(s))
		}
	}
	for _, obj := range i.clusterSources.GetStore().List() {
		if cs, ok := obj.(*v1alpha1.ClusterSource); ok && cs.Spec.ClusterName == cluster {
			if inv := core.ClusterSourceInvitation(cs, i.namespaceLabels); inv.Covers(namespace) {
				out = append(out, inv)
			}
		}
	}
	return out
}

// withQuota returns every invitation that has a quota.
func (i *invitations) withQuota() []core.Invitation {
	var out []core.Invitation
	for _, obj := range i.sources.GetStore().List() {
		if s, ok := obj.(*v1alpha1.Source); ok && s.Spec.Quota != nil {
			out = append(out, core.SourceInvitation(s))
		}
	}
	for _, obj := range i.clusterSources.GetStore().List() {
		if cs, ok := obj.(*v1alpha1.ClusterSource); ok && cs.Spec.Quota != nil {
			out = append(out, core.ClusterSourceInvitation(cs, i.namespaceLabels))
		}
	}
	return out
}

func (i *invitations) namespaceLabels(name string) (map[string]string, bool) {
	ns, err := i.namespaces.Get(name)
	if err != nil {
		return nil, false
	}
	return ns.Labels, true
}
