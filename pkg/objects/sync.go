package objects

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/target"
)

// Setup indexes the source pods by the objects they reference, starts the
// Watcher and one sync controller per kind, and returns the Copier that
// placement uses before it sends a candidate. Everything runs on the
// leader only.
func Setup(ctx context.Context, mgr ctrl.Manager, meta metadata.Interface, kube kubernetes.Interface, sourceCluster string, targets *target.Set) (*Copier, error) {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.Pod{}, PodIndex, IndexPod); err != nil {
		return nil, fmt.Errorf("indexing source pods by the objects they reference: %w", err)
	}
	w, err := NewWatcher(meta)
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(w); err != nil {
		return nil, fmt.Errorf("adding the ConfigMap and Secret watcher: %w", err)
	}
	c := NewCopier(sourceCluster, kube, w)
	for _, kind := range []Kind{ConfigMap, Secret} {
		s := &Syncer{Kind: kind, Pods: mgr.GetClient(), Copier: c, Targets: targets}
		if err := s.SetupWithManager(mgr); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Users lists the source pods (in pods, indexed by PodIndex) that
// reference an object.
func Users(ctx context.Context, pods client.Reader, kind Kind, namespace, name string) ([]corev1.Pod, error) {
	list := &corev1.PodList{}
	if err := pods.List(ctx, list, client.InNamespace(namespace), client.MatchingFields{PodIndex: Key(kind, name)}); err != nil {
		return nil, fmt.Errorf("listing the pods that reference %s %s/%s: %w", kind, namespace, name, err)
	}
	return list.Items, nil
}

// Syncer keeps the copies of one kind of object in step with the source:
// when an object that source pods reference changes, its data goes to each
// target where a candidate of one of them is, and those candidates are
// made owners of the copy. A copy that is gone while candidates use it is
// made again. An object deleted in the source leaves its copies as they
// are, for the pods that run with them.
type Syncer struct {
	Kind    Kind
	Pods    client.Reader
	Copier  *Copier
	Targets *target.Set
}

// SetupWithManager runs the controller on the Watcher's changes of objects
// that a source pod references.
func (s *Syncer) SetupWithManager(mgr ctrl.Manager) error {
	changes := make(chan event.TypedGenericEvent[*metav1.PartialObjectMetadata], 1024)
	s.Copier.Watcher.OnChange(func(kind Kind, namespace, name string) {
		if kind != s.Kind {
			return
		}
		if users, err := Users(context.Background(), s.Pods, kind, namespace, name); err != nil || len(users) == 0 {
			return
		}
		changes <- event.TypedGenericEvent[*metav1.PartialObjectMetadata]{Object: &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named(strings.ToLower(string(s.Kind)) + "-copies").
		WatchesRawSource(source.Channel(changes, &handler.TypedEnqueueRequestForObject[*metav1.PartialObjectMetadata]{})).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: 4,
			RateLimiter:             workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](100*time.Millisecond, 30*time.Second),
		}).
		Complete(s)
}

// Reconcile brings every copy of one object up to date.
func (s *Syncer) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	pods, err := Users(ctx, s.Pods, s.Kind, req.Namespace, req.Name)
	if err != nil {
		return reconcile.Result{}, err
	}
	type use struct {
		t      *target.Target
		owners []*corev1.Pod
	}
	var uses []use
	for _, t := range s.Targets.All() {
		if sameNamespace(t, req.Namespace) {
			continue
		}
		var owners []*corev1.Pod
		for i := range pods {
			p := &pods[i]
			for _, c := range t.CandidatesOf(p.Namespace, p.Name) {
				if types.UID(c.Labels[protocol.SourceUIDLabel]) == p.UID && c.DeletionTimestamp == nil {
					owners = append(owners, c)
				}
			}
		}
		if len(owners) > 0 {
			uses = append(uses, use{t, owners})
		}
	}
	if len(uses) == 0 {
		return reconcile.Result{}, nil
	}
	o, err := s.Copier.fetch(ctx, s.Kind, req.Namespace, req.Name)
	if err != nil || o == nil {
		return reconcile.Result{}, err
	}
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for _, u := range uses {
		wg.Go(func() {
			err := s.Copier.sync(ctx, u.t, u.t.NamespaceFor(req.Namespace), o, u.owners)
			var refused *RefusedError
			if errors.As(err, &refused) {
				// Nothing a retry would change; the pod's Event said so
				// when its candidate was held back.
				klog.FromContext(ctx).Info("Target refused a copy", "error", err.Error())
				return
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return reconcile.Result{}, errors.Join(errs...)
}

// sync writes o's data into its copy in namespace of t and makes owners
// its owners; a copy that is gone is made again.
func (c *Copier) sync(ctx context.Context, t *target.Target, namespace string, o *original, owners []*corev1.Pod) error {
	err := c.patchData(ctx, t, namespace, o)
	if apierrors.IsNotFound(err) {
		err = c.create(ctx, t, namespace, o, owners)
		if !apierrors.IsAlreadyExists(err) {
			return c.createError(t, namespace, o, err)
		}
		err = c.patchData(ctx, t, namespace, o)
	}
	if err != nil {
		return err
	}
	klog.FromContext(ctx).V(2).Info("Synced copy", "target", t.Name, "kind", o.Kind, "object", o.Name, "copy", klog.KRef(namespace, c.copyName(o.Name)))
	return c.patchOwners(ctx, t, namespace, o.Kind, o.Name, owners)
}
