package split

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/workload"
)

// The split reads, on every replica, the pods labelled for it and the
// Deployments and StatefulSets (their max-on-demand annotation, template
// and status), and tells the owners of a workload what it does.
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps,resources=deployments;statefulsets,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Setup makes the split's caches (the pods labelled
// multicluster.flotilla.dev/capacity-split=true, the pods kept in this
// cluster by localFirst, the Deployments and the StatefulSets, trimmed),
// indexes pods by workload there and in the manager's cache (which holds
// the source pods), runs the Rebalancer on
// the leader, and returns the Assigner that the webhook of every replica
// uses. policies may be nil.
func Setup(mgr manager.Manager, kube kubernetes.Interface, policies Policies) (*Assigner, error) {
	ctx := context.Background()
	own, err := podCache(ctx, mgr, protocol.CapacitySplitLabel, map[client.Object]cache.ByObject{
		&appsv1.Deployment{}:  {Transform: TrimWorkload},
		&appsv1.StatefulSet{}: {Transform: TrimWorkload},
	})
	if err != nil {
		return nil, fmt.Errorf("the split's cache: %w", err)
	}
	for _, obj := range []client.Object{&appsv1.Deployment{}, &appsv1.StatefulSet{}} {
		if _, err := own.GetInformer(ctx, obj); err != nil {
			return nil, fmt.Errorf("watching %T for the split: %w", obj, err)
		}
	}
	// Added as a cache, the manager starts it on every replica with its
	// own cache and waits for it before anything else, the webhook
	// included: a bare cache.Cache would be a leader's runnable, and the
	// webhook of a standby, or of a replica just started, would read an
	// empty cache.
	if err := mgr.Add(managedCache{own}); err != nil {
		return nil, err
	}
	// Its reader lists the source pods of the manager's cache by it too.
	if err := workload.IndexPods(ctx, mgr.GetFieldIndexer()); err != nil {
		return nil, fmt.Errorf("indexing the source pods by workload: %w", err)
	}
	// The opted-in pods a self target with localFirst keeps in this
	// cluster are neither source pods nor labelled for the split, yet they
	// hold their places in it: without them, their on-demand places would
	// be given out again.
	kept, err := podCache(ctx, mgr, protocol.LocalLabel, nil)
	if err != nil {
		return nil, fmt.Errorf("the split's cache of the pods kept here: %w", err)
	}
	if err := mgr.Add(managedCache{kept}); err != nil {
		return nil, err
	}

	reader := &CacheReader{PodCaches: []client.Reader{mgr.GetCache(), own, kept}, Objects: own, Live: mgr.GetAPIReader()}
	recorder := mgr.GetEventRecorder("flotilla-agent")
	log := ctrl.Log.WithName("split")
	rebalancer := &Rebalancer{Pods: reader, Workloads: reader, Policies: policies, Evictor: KubeEvictor{Kube: kube}, Recorder: recorder}
	pods := handler.TypedEnqueueRequestsFromMapFunc(func(_ context.Context, pod *corev1.Pod) []Request {
		if k, ok := workload.Of(pod); ok && (k.Kind == "Deployment" || k.Kind == "StatefulSet") {
			return []Request{{Namespace: pod.Namespace, Key: k}}
		}
		return nil
	})
	rebalanceLog := log.WithName("rebalancer")
	if err := builder.TypedControllerManagedBy[Request](mgr).
		Named("split-rebalancer").
		WatchesRawSource(source.TypedKind(own, &appsv1.Deployment{}, handler.TypedEnqueueRequestsFromMapFunc(func(_ context.Context, d *appsv1.Deployment) []Request {
			return served(d.Namespace, workload.Key{Kind: "Deployment", Name: d.Name}, d.Spec.Template.Labels)
		}))).
		WatchesRawSource(source.TypedKind(own, &appsv1.StatefulSet{}, handler.TypedEnqueueRequestsFromMapFunc(func(_ context.Context, s *appsv1.StatefulSet) []Request {
			return served(s.Namespace, workload.Key{Kind: "StatefulSet", Name: s.Name}, s.Spec.Template.Labels)
		}))).
		WatchesRawSource(source.TypedKind(own, &corev1.Pod{}, pods)).
		WatchesRawSource(source.TypedKind(mgr.GetCache(), &corev1.Pod{}, pods)).
		WatchesRawSource(source.TypedKind(kept, &corev1.Pod{}, pods)).
		WithOptions(controller.TypedOptions[Request]{MaxConcurrentReconciles: 4}).
		WithLogConstructor(func(req *Request) logr.Logger {
			if req == nil {
				return rebalanceLog
			}
			return rebalanceLog.WithValues("namespace", req.Namespace, "workload", req.Key.String())
		}).
		Complete(rebalancer); err != nil {
		return nil, fmt.Errorf("setting up the split's rebalancer: %w", err)
	}
	return &Assigner{Pods: reader, Workloads: reader, Policies: policies, Recorder: recorder, Log: log.WithName("assigner")}, nil
}

// podCache makes a cache of the pods labelled label=true, trimmed and
// indexed by workload, and of the other objects of more.
func podCache(ctx context.Context, mgr manager.Manager, label string, more map[client.Object]cache.ByObject) (cache.Cache, error) {
	byObject := map[client.Object]cache.ByObject{
		&corev1.Pod{}: {Label: labels.SelectorFromSet(labels.Set{label: "true"}), Transform: TrimPod},
	}
	for obj, by := range more {
		byObject[obj] = by
	}
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		HTTPClient: mgr.GetHTTPClient(),
		Scheme:     mgr.GetScheme(),
		Mapper:     mgr.GetRESTMapper(),
		ByObject:   byObject,
		// Every informer is made here, before the cache starts, so that
		// the manager waits for all of them before the webhook serves.
		ReaderFailOnMissingInformer: true,
	})
	if err != nil {
		return nil, fmt.Errorf("creating it: %w", err)
	}
	if err := workload.IndexPods(ctx, c); err != nil {
		return nil, fmt.Errorf("indexing its pods by workload: %w", err)
	}
	return c, nil
}

// managedCache is a cache the manager treats as one of its own caches.
type managedCache struct{ cache.Cache }

func (c managedCache) GetCache() cache.Cache { return c.Cache }

func served(namespace string, key workload.Key, templateLabels map[string]string) []Request {
	if !Served(templateLabels) {
		return nil
	}
	return []Request{{Namespace: namespace, Key: key}}
}
