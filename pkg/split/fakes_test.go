package split

import (
	"context"
	"fmt"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/workload"
)

// fakeCache stands for the split's caches: the members of one workload as
// a test says the cache shows them, and the workload.
type fakeCache struct {
	mu       sync.Mutex
	members  []Member
	workload *Workload
	lists    int
}

func (f *fakeCache) Members(_ context.Context, _ string, _ workload.Key) ([]Member, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	return slices.Clone(f.members), nil
}

func (f *fakeCache) Workload(_ context.Context, _ string, _ workload.Key) (*Workload, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.workload, nil
}

func (f *fakeCache) set(members ...Member) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.members = members
}

func (f *fakeCache) add(m Member) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.members = append(f.members, m)
}

// recorded is one Event.
type recorded struct {
	kind, name, eventType, reason, note string
}

type fakeRecorder struct {
	mu     sync.Mutex
	events []recorded
}

func (r *fakeRecorder) Eventf(regarding runtime.Object, _ runtime.Object, eventType, reason, _, note string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	obj := regarding.(client.Object)
	kind := fmt.Sprintf("%T", regarding)
	r.events = append(r.events, recorded{kind: kind, name: obj.GetName(), eventType: eventType, reason: reason, note: fmt.Sprintf(note, args...)})
}

func (r *fakeRecorder) all() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// deploymentPod is a new pod of Deployment web, as its ReplicaSet makes it.
func deploymentPod(labels, annotations map[string]string) *corev1.Pod {
	l := map[string]string{"app": "web", "pod-template-hash": "abc", protocol.CapacitySplitLabel: "true"}
	for k, v := range labels {
		l[k] = v
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		GenerateName: "web-abc-", Namespace: "ns", Labels: l, Annotations: annotations,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-abc", UID: "rs", Controller: ptr.To(true)}},
	}}
}

func webWorkload(annotations map[string]string) *Workload {
	return &Workload{
		Namespace: "ns", Key: workload.Key{Kind: "Deployment", Name: "web"}, UID: types.UID("web-uid"),
		Annotations:    annotations,
		TemplateLabels: map[string]string{"app": "web", protocol.CapacitySplitLabel: "true"},
	}
}

func maxOnDemand(v string) map[string]string {
	return map[string]string{protocol.MaxOnDemandAnnotation: v}
}
