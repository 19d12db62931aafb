package webhook

import (
	"encoding/json"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// admittedPod is an opted-in pod as the API server sends it to the webhook:
// defaulted, with the tolerations DefaultTolerationSeconds adds.
func admittedPod(annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "web-1", Namespace: "ns", Annotations: annotations,
			Labels: map[string]string{protocol.ElectLabel: "true", "app": "web"},
		},
		Spec: corev1.PodSpec{
			SchedulerName: corev1.DefaultSchedulerName, RestartPolicy: corev1.RestartPolicyAlways, DNSPolicy: corev1.DNSClusterFirst,
			ServiceAccountName: "default", TerminationGracePeriodSeconds: ptr.To[int64](30),
			Containers: []corev1.Container{{
				Name: "c", Image: "registry.example/web:1.2", ImagePullPolicy: corev1.PullIfNotPresent,
				TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: corev1.TerminationMessageReadFile,
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}},
			}},
			Tolerations: []corev1.Toleration{
				{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
				{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
			},
		},
	}
}

func createRequest(t testing.TB, pod *corev1.Pod) admission.Request {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Create, Namespace: pod.Namespace, Object: runtime.RawExtension{Raw: raw},
	}}
}

// handled is pod as the API server stores it after the webhook's answer,
// its patch applied as the API server applies it, and whether there was a
// patch.
func handled(t *testing.T, m *Mutator, pod *corev1.Pod) (*corev1.Pod, bool) {
	t.Helper()
	req := createRequest(t, pod)
	resp := m.Handle(t.Context(), req)
	if !resp.Allowed {
		t.Fatalf("refused: %+v", resp.Result)
	}
	if len(resp.Patches) == 0 {
		return pod, false
	}
	rawPatch, err := json.Marshal(resp.Patches)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := jsonpatch.DecodePatch(rawPatch)
	if err != nil {
		t.Fatal(err)
	}
	patched, err := patch.Apply(req.Object.Raw)
	if err != nil {
		t.Fatalf("applying %s: %v", rawPatch, err)
	}
	got := &corev1.Pod{}
	if err := json.Unmarshal(patched, got); err != nil {
		t.Fatal(err)
	}
	return got, true
}

// TestHandlePatchMakesTheSourcePod checks that the patch the webhook answers
// with, applied to the pod of the request as the API server applies it,
// gives the source pod MakeSource makes, whether the pod had annotations or
// not (and with keys that must be escaped).
func TestHandlePatchMakesTheSourcePod(t *testing.T) {
	m := &Mutator{Decoder: admission.NewDecoder(clientgoscheme.Scheme), NotReadyTolerationSeconds: ptr.To[int64](60)}
	for _, tt := range []struct {
		name        string
		annotations map[string]string
	}{
		{"no annotations", nil},
		{"empty annotations", map[string]string{}},
		{"annotations", map[string]string{"example.com/a~b": "1", "x": "y"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, patched := handled(t, m, admittedPod(tt.annotations))
			if !patched {
				t.Fatal("allowed without a patch")
			}
			want := admittedPod(tt.annotations)
			if _, err := MakeSource(want, ptr.To[int64](60)); err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(got, want) {
				t.Errorf("patched pod differs from the source pod:\ngot  %+v\nwant %+v", *got, *want)
			}
			if again := m.Handle(t.Context(), createRequest(t, got)); !again.Allowed || len(again.Patches) != 0 {
				t.Errorf("reinvocation patches the source pod again: %+v", again.Patches)
			}
		})
	}
}

// BenchmarkHandle is the webhook's work for one opted-in pod, to its
// patch's encoding.
func BenchmarkHandle(b *testing.B) {
	m := &Mutator{Decoder: admission.NewDecoder(clientgoscheme.Scheme), NotReadyTolerationSeconds: ptr.To[int64](60)}
	req := createRequest(b, admittedPod(nil))
	b.ReportAllocs()
	for b.Loop() {
		resp := m.Handle(b.Context(), req)
		if !resp.Allowed {
			b.Fatal(resp.Result)
		}
		// As the webhook server encodes it.
		if _, err := json.Marshal(resp.Patches); err != nil {
			b.Fatal(err)
		}
	}
}

// TestHandleDropsSourcePodsManagedFields checks that the webhook's patch,
// applied as the API server applies it, leaves a source pod without
// managedFields (the API server then tracks no manager on the writes that
// follow), that KeepManagedFields keeps them, and that a pod the webhook
// does not make a source pod keeps them.
func TestHandleDropsSourcePodsManagedFields(t *testing.T) {
	managed := []metav1.ManagedFieldsEntry{{
		Manager: "kubectl-create", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", FieldsType: "FieldsV1",
		FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{"f:labels":{".":{},"f:app":{}}}}`),
	}}
	withManaged := func(pod *corev1.Pod) *corev1.Pod {
		pod.ManagedFields = managed
		return pod
	}
	notOptedIn := withManaged(admittedPod(nil))
	delete(notOptedIn.Labels, protocol.ElectLabel)
	for _, tt := range []struct {
		name     string
		keep     bool
		pod      *corev1.Pod
		wantKept bool
	}{
		{"a source pod", false, withManaged(admittedPod(nil)), false},
		{"a source pod, managedFields kept", true, withManaged(admittedPod(nil)), true},
		{"a pod not opted in", false, notOptedIn, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := &Mutator{Decoder: admission.NewDecoder(clientgoscheme.Scheme), NotReadyTolerationSeconds: ptr.To[int64](60), KeepManagedFields: tt.keep}
			got, _ := handled(t, m, tt.pod)
			if kept := len(got.ManagedFields) > 0; kept != tt.wantKept {
				t.Errorf("managedFields kept: %t, want %t (%+v)", kept, tt.wantKept, got.ManagedFields)
			}
			if again := m.Handle(t.Context(), createRequest(t, got)); !again.Allowed || len(again.Patches) != 0 {
				t.Errorf("reinvocation patches the pod again: %+v", again.Patches)
			}
		})
	}
}
