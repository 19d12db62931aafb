package objects

import (
	"context"
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/sourcespec"
)

// The agent watches the names of the source's ConfigMaps and Secrets and
// reads the data of those its pods reference.
// +kubebuilder:rbac:groups="",resources=configmaps;secrets,verbs=get;list;watch

// PodIndex is the field index of the source pod cache that lists, for each
// pod, Key of every object its spec references.
const PodIndex = "flotilla.objects"

// Watcher watches the source cluster's ConfigMaps and Secrets by metadata
// only, and keeps of each no more than its name and resourceVersion: the
// agent needs to know what exists and when it changes, and reads an
// object's data only when a copy needs it. Its informers run on the leader
// only, with the controllers that use them.
type Watcher struct {
	informers map[Kind]toolscache.SharedIndexInformer

	mu       sync.RWMutex
	handlers []func(kind Kind, namespace, name string)
}

// NewWatcher prepares the informers; the manager starts them (Start).
func NewWatcher(c metadata.Interface) (*Watcher, error) {
	w := &Watcher{informers: map[Kind]toolscache.SharedIndexInformer{}}
	for kind, resource := range map[Kind]string{ConfigMap: "configmaps", Secret: "secrets"} {
		inf := metadatainformer.NewFilteredMetadataInformer(c, schema.GroupVersionResource{Version: "v1", Resource: resource},
			metav1.NamespaceAll, 0, toolscache.Indexers{}, nil).Informer()
		if err := inf.SetTransform(trimMetadata); err != nil {
			return nil, fmt.Errorf("trimming the %s informer: %w", resource, err)
		}
		_, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc: func(obj any) { w.changed(kind, obj) },
			UpdateFunc: func(old, obj any) {
				if o, n := old.(*metav1.PartialObjectMetadata), obj.(*metav1.PartialObjectMetadata); o.ResourceVersion != n.ResourceVersion {
					w.changed(kind, obj)
				}
			},
		})
		if err != nil {
			return nil, fmt.Errorf("watching %s: %w", resource, err)
		}
		w.informers[kind] = inf
	}
	return w, nil
}

// trimMetadata keeps what the Watcher's readers use: an annotation such as
// kubectl's last-applied-configuration holds a whole object, data included.
func trimMetadata(obj any) (any, error) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil
	}
	return &metav1.PartialObjectMetadata{TypeMeta: m.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Namespace: m.Namespace, Name: m.Name, UID: m.UID, ResourceVersion: m.ResourceVersion,
	}}, nil
}

func (w *Watcher) changed(kind Kind, obj any) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return
	}
	w.mu.RLock()
	defer w.mu.RUnlock()
	for _, f := range w.handlers {
		f(kind, m.Namespace, m.Name)
	}
}

// OnChange registers f for every object that appears or changes.
func (w *Watcher) OnChange(f func(kind Kind, namespace, name string)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.handlers = append(w.handlers, f)
}

// Start runs the informers until ctx ends.
func (w *Watcher) Start(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, inf := range w.informers {
		wg.Go(func() { inf.Run(ctx.Done()) })
	}
	wg.Wait()
	return nil
}

// NeedLeaderElection: only the leader places pods.
func (w *Watcher) NeedLeaderElection() bool { return true }

// Exists reports whether the source holds the object; known is false
// until the informer of its kind has listed.
func (w *Watcher) Exists(kind Kind, namespace, name string) (exists, known bool) {
	inf, ok := w.informers[kind]
	if !ok || !inf.HasSynced() {
		return false, false
	}
	_, exists, err := inf.GetStore().GetByKey(namespace + "/" + name)
	return exists, err == nil
}

// refsOf lists the objects a source pod's candidates reference: those of
// the spec they run (sourcespec.Original), without the source's
// service-account token volume (whose root-CA ConfigMap the target has of
// its own).
func refsOf(pod *corev1.Pod) ([]Ref, error) {
	if _, ok := pod.Annotations[protocol.OriginalFieldsAnnotation]; ok {
		// The original fields reference no object: the pod's own spec is
		// read in place, not copied.
		s := sourcespec.Own(pod)
		return Of(&s), nil
	}
	raw := pod.Annotations[protocol.SourceSpecAnnotation]
	// Most pods reference neither; their spec need not be decoded.
	if !strings.Contains(raw, "configMap") && !strings.Contains(raw, "secret") && !strings.Contains(raw, "Secrets") {
		return nil, nil
	}
	spec, err := sourcespec.Original(pod)
	if err != nil {
		return nil, err
	}
	return Of(spec), nil
}

// IndexPod is the PodIndex function.
func IndexPod(obj client.Object) []string {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil
	}
	refs, _ := refsOf(pod)
	keys := make([]string, len(refs))
	for i, r := range refs {
		keys[i] = r.key()
	}
	return keys
}
