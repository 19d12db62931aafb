package webhook

import (
	"context"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/sourcespec"
	"github.com/flotilla-dev/flotilla/pkg/split"
	"github.com/flotilla-dev/flotilla/pkg/workload"
)

func TestMakeSourceIsIdempotent(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{protocol.ElectLabel: "true"}},
		Spec: corev1.PodSpec{SchedulerName: "default-scheduler", Containers: []corev1.Container{{Name: "c", Image: "i"}},
			// As DefaultTolerationSeconds admission leaves them.
			Tolerations: []corev1.Toleration{
				{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
				{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
			}},
	}
	if !OptedIn(pod) {
		t.Fatal("labelled pod not opted in")
	}
	changed, err := MakeSource(pod, ptr.To[int64](60))
	if err != nil || !changed {
		t.Fatalf("first admission: changed=%v err=%v", changed, err)
	}
	saved, err := sourcespec.Original(pod)
	if err != nil {
		t.Fatal(err)
	}
	if saved.SchedulerName != "default-scheduler" || len(saved.Tolerations) != 2 {
		t.Errorf("candidates would not run the original: %+v", saved)
	}
	if pod.Spec.SchedulerName != protocol.SourceSchedulerName || len(pod.Spec.Tolerations) != 3 {
		t.Errorf("source pod not prepared: %+v", pod.Spec)
	}
	for _, tol := range pod.Spec.Tolerations {
		switch tol.Key {
		case corev1.TaintNodeUnreachable:
			if tol.TolerationSeconds != nil {
				t.Errorf("a source pod must not be evicted when the agent is away: %+v", tol)
			}
		case corev1.TaintNodeNotReady:
			if tol.TolerationSeconds == nil || *tol.TolerationSeconds != 60 {
				t.Errorf("a source pod must be evicted 60s after its target stops answering: %+v", tol)
			}
		}
	}
	before := pod.Annotations[protocol.OriginalFieldsAnnotation]
	changed, err = MakeSource(pod, ptr.To[int64](60))
	if err != nil || changed {
		t.Fatalf("reinvocation changed the pod (changed=%v err=%v)", changed, err)
	}
	if pod.Annotations[protocol.OriginalFieldsAnnotation] != before || len(pod.Spec.Tolerations) != 3 {
		t.Error("reinvocation rewrote the original fields or duplicated the toleration")
	}
}

// TestMakeSourceKeepsTheAuthorsToleration checks that a not-ready
// toleration the pod's author chose is not replaced by the agent's default.
func TestMakeSourceKeepsTheAuthorsToleration(t *testing.T) {
	for _, tt := range []struct {
		name   string
		author *int64
		want   *int64
	}{
		{"shorter", ptr.To[int64](5), ptr.To[int64](5)},
		{"forever", nil, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{Tolerations: []corev1.Toleration{
				{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: tt.author},
			}}}
			if _, err := MakeSource(pod, ptr.To[int64](60)); err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, tol := range pod.Spec.Tolerations {
				if tol.Key != corev1.TaintNodeNotReady {
					continue
				}
				n++
				if !ptr.Equal(tol.TolerationSeconds, tt.want) {
					t.Errorf("toleration %+v, want seconds %v", tol, tt.want)
				}
			}
			if n != 1 {
				t.Errorf("%d not-ready tolerations, want the author's alone: %+v", n, pod.Spec.Tolerations)
			}
		})
	}
}

func TestOptedIn(t *testing.T) {
	for _, tt := range []struct {
		labels map[string]string
		want   bool
	}{
		{nil, false},
		{map[string]string{protocol.ElectLabel: "false"}, false},
		{map[string]string{protocol.ElectLabel: "true"}, true},
		{map[string]string{protocol.ElectLabel: "true", protocol.CandidateLabel: "true"}, false},
	} {
		if got := OptedIn(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: tt.labels}}); got != tt.want {
			t.Errorf("OptedIn(%v) = %v, want %v", tt.labels, got, tt.want)
		}
	}
}

// TestCandidatesRunNoToken checks that the spec a source pod's candidates
// run leaves out the source's service-account token (volume and mounts)
// and that the source pod itself keeps them: the candidates' spec must not
// alias the pod's containers.
func TestCandidatesRunNoToken(t *testing.T) {
	token := corev1.Volume{Name: "kube-api-access-x1y2z", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}}
	data := corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	mounts := []corev1.VolumeMount{{Name: token.Name, MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"}, {Name: "data", MountPath: "/data"}}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{protocol.ElectLabel: "true"}},
		Spec: corev1.PodSpec{
			Volumes:        []corev1.Volume{token, data},
			InitContainers: []corev1.Container{{Name: "init", Image: "i", VolumeMounts: append([]corev1.VolumeMount(nil), mounts...)}},
			Containers:     []corev1.Container{{Name: "c", Image: "i", VolumeMounts: append([]corev1.VolumeMount(nil), mounts...)}},
		},
	}
	if _, err := MakeSource(pod, nil); err != nil {
		t.Fatal(err)
	}
	saved, err := sourcespec.Original(pod)
	if err != nil {
		t.Fatal(err)
	}
	if len(saved.Volumes) != 1 || saved.Volumes[0].Name != "data" {
		t.Errorf("saved volumes %+v, want only data", saved.Volumes)
	}
	for _, c := range append(saved.InitContainers, saved.Containers...) {
		if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].Name != "data" {
			t.Errorf("saved container %s mounts %+v, want only data", c.Name, c.VolumeMounts)
		}
	}
	if len(pod.Spec.Volumes) != 2 || len(pod.Spec.Containers[0].VolumeMounts) != 2 || len(pod.Spec.InitContainers[0].VolumeMounts) != 2 {
		t.Errorf("the source pod lost its own token volume or mounts: %+v", pod.Spec)
	}
}

// splitCache is the split's caches for one Deployment web with
// max-on-demand 1 and no pod yet.
type splitCache struct{}

func (splitCache) Members(context.Context, string, workload.Key) ([]split.Member, error) {
	return nil, nil
}

func (splitCache) Workload(_ context.Context, ns string, key workload.Key) (*split.Workload, error) {
	return &split.Workload{Namespace: ns, Key: key, Annotations: map[string]string{protocol.MaxOnDemandAnnotation: "1"}}, nil
}

// TestMutatorSplits checks that the split comes before the original fields of a
// multi-cluster pod, so its targets get its place, and that a pod opted in
// to the split alone is only split.
func TestMutatorSplits(t *testing.T) {
	admit := func(t *testing.T, labels map[string]string) *corev1.Pod {
		t.Helper()
		// A new workload each: no place is pending.
		m := &Mutator{Split: &split.Assigner{Pods: splitCache{}, Workloads: splitCache{}, Log: logr.Discard()}}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "web-abc-", Namespace: "ns", Labels: labels, OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-abc", UID: "rs", Controller: ptr.To(true),
			}}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}},
		}
		pod.Labels["pod-template-hash"] = "abc"
		if _, err := m.admit(t.Context(), pod, false); err != nil {
			t.Fatalf("admit: %v", err)
		}
		return pod
	}
	onDemand := func(spec corev1.PodSpec) bool {
		a := spec.Affinity
		if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
			return false
		}
		terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
		return len(terms) == 1 && len(terms[0].MatchExpressions) == 1 && terms[0].MatchExpressions[0].Key == protocol.DefaultCapacityNodeLabel &&
			terms[0].MatchExpressions[0].Values[0] == protocol.CapacityOnDemand
	}

	t.Run("multi-cluster: the candidates' spec carries the place", func(t *testing.T) {
		pod := admit(t, map[string]string{protocol.ElectLabel: "true"})
		if pod.Spec.SchedulerName != protocol.SourceSchedulerName || pod.Labels[protocol.CapacityTypeLabel] != protocol.CapacityOnDemand {
			t.Fatalf("not a split source pod: scheduler %q, labels %v", pod.Spec.SchedulerName, pod.Labels)
		}
		saved, err := sourcespec.Original(pod)
		if err != nil {
			t.Fatal(err)
		}
		if !onDemand(*saved) {
			t.Errorf("the candidates' spec has no on-demand affinity: %+v", saved.Affinity)
		}
	})

	t.Run("multi-cluster, opted out of the split", func(t *testing.T) {
		pod := admit(t, map[string]string{protocol.ElectLabel: "true", protocol.CapacitySplitLabel: "false"})
		if pod.Spec.SchedulerName != protocol.SourceSchedulerName || pod.Labels[protocol.CapacityTypeLabel] != "" || pod.Spec.Affinity != nil {
			t.Errorf("want a source pod without a place: scheduler %q, labels %v, affinity %+v", pod.Spec.SchedulerName, pod.Labels, pod.Spec.Affinity)
		}
	})

	t.Run("the split alone: a pod for the cluster's own scheduler", func(t *testing.T) {
		pod := admit(t, map[string]string{protocol.CapacitySplitLabel: "true"})
		if pod.Spec.SchedulerName != "" || pod.Annotations[protocol.OriginalFieldsAnnotation] != "" || len(pod.Spec.Tolerations) != 0 {
			t.Errorf("made a source pod: %+v", pod)
		}
		if !onDemand(pod.Spec) || pod.Annotations[protocol.PodDeletionCostAnnotation] == "" {
			t.Errorf("not split: %+v, annotations %v", pod.Spec.Affinity, pod.Annotations)
		}
	})
}

func TestSplitOptedIn(t *testing.T) {
	for _, tt := range []struct {
		labels map[string]string
		want   bool
	}{
		{nil, false},
		{map[string]string{protocol.CapacitySplitLabel: "false"}, false},
		{map[string]string{protocol.CapacitySplitLabel: "true"}, true},
		{map[string]string{protocol.CapacitySplitLabel: "true", protocol.CandidateLabel: "true"}, false},
	} {
		if got := SplitOptedIn(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: tt.labels}}); got != tt.want {
			t.Errorf("SplitOptedIn(%v) = %v, want %v", tt.labels, got, tt.want)
		}
	}
}
