package webhook

import (
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/flotilla-dev/flotilla/pkg/candidate"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// hiddenSpec is a privileged spec with the host's root mounted: what a
// user would hide in the saved spec of a benign pod.
func hiddenSpec(t *testing.T) string {
	t.Helper()
	spec := admittedPod(nil).Spec
	spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
	spec.Volumes = []corev1.Volume{{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
	spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "host", MountPath: "/host"}}
	raw, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// TestHandleReplacesFlotillaKeys checks that what a pod's author writes
// of the keys Flotilla alone writes never reaches the stored pod, so that
// the saved spec, which the targets run, is the spec the cluster's
// admission let in.
func TestHandleReplacesFlotillaKeys(t *testing.T) {
	m := &Mutator{Decoder: admission.NewDecoder(clientgoscheme.Scheme), NotReadyTolerationSeconds: ptr.To[int64](60)}
	// The source pod the webhook makes of a pod that came without any.
	honest, _ := handled(t, m, admittedPod(nil))
	honestSpec := honest.Annotations[protocol.SourceSpecAnnotation]

	looksLikeASourcePod := admittedPod(map[string]string{protocol.SourceSpecAnnotation: hiddenSpec(t)})
	if _, err := MakeSource(&corev1.Pod{Spec: looksLikeASourcePod.Spec}, ptr.To[int64](60)); err != nil {
		t.Fatal(err)
	}
	prepareSpec(&looksLikeASourcePod.Spec, ptr.To[int64](60))

	splitOnly := admittedPod(map[string]string{protocol.SourceSpecAnnotation: hiddenSpec(t)})
	delete(splitOnly.Labels, protocol.ElectLabel)
	splitOnly.Labels[protocol.LocalLabel] = "true"

	for _, tt := range []struct {
		name string
		pod  *corev1.Pod
		// wantSource: the pod is made a source pod whose saved spec is
		// honestSpec; else it is left an ordinary pod.
		wantSource bool
	}{
		{"a saved spec hiding a privileged hostPath spec", admittedPod(map[string]string{protocol.SourceSpecAnnotation: hiddenSpec(t)}), true},
		{"a saved spec that is no spec", admittedPod(map[string]string{protocol.SourceSpecAnnotation: "{not json"}), true},
		{"an election", admittedPod(map[string]string{protocol.ElectionAnnotation: "7/c2/nonce", protocol.ElectedDomainAnnotation: `{"topology.kubernetes.io/zone":"a"}`}), true},
		{"a candidate's annotations", admittedPod(map[string]string{
			protocol.AllowedAnnotation: "u/1/n", protocol.DeniedAnnotation: "u/1", protocol.StateAnnotation: `{"phase":"Bound","nonce":"n"}`,
			protocol.TargetAnnotation: "c2", protocol.SourceNameAnnotation: "x", protocol.SourceLabelsAnnotation: "{}",
		}), true},
		{"a candidate's labels", func() *corev1.Pod {
			p := admittedPod(nil)
			p.Labels[protocol.CandidateLabel] = "true"
			p.Labels[protocol.SourceClusterLabel] = "c1"
			p.Labels[protocol.SourceUIDLabel] = "someone-elses"
			return p
		}(), true},
		{"a local mark, with no self target to keep it", func() *corev1.Pod {
			p := admittedPod(nil)
			p.Labels[protocol.LocalLabel] = "true"
			return p
		}(), true},
		{"a forged saved spec on a pod dressed as a source pod", looksLikeASourcePod, true},
		{"a saved spec and a local mark on a pod of the split alone", splitOnly, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := handled(t, m, tt.pod)
			for k := range got.Labels {
				if protocol.WrittenByFlotilla(k) {
					t.Errorf("label %s=%q stayed", k, got.Labels[k])
				}
			}
			for k := range got.Annotations {
				if protocol.WrittenByFlotilla(k) && !(tt.wantSource && k == protocol.SourceSpecAnnotation) {
					t.Errorf("annotation %s=%q stayed", k, got.Annotations[k])
				}
			}
			// The agent's records of an election, named, whatever
			// WrittenByFlotilla says.
			for _, k := range []string{protocol.ElectionAnnotation, protocol.ElectedDomainAnnotation} {
				if v, ok := got.Annotations[k]; ok {
					t.Errorf("annotation %s=%q stayed", k, v)
				}
			}
			if !tt.wantSource {
				if got.Spec.SchedulerName == protocol.SourceSchedulerName {
					t.Error("made a source pod")
				}
				return
			}
			if got.Spec.SchedulerName != protocol.SourceSchedulerName {
				t.Errorf("schedulerName %q: not a source pod", got.Spec.SchedulerName)
			}
			saved := got.Annotations[protocol.SourceSpecAnnotation]
			if tt.pod == looksLikeASourcePod {
				// Nothing tells what the author's tolerations were: the
				// ones MakeSource gives are left out of the saved spec.
				var spec corev1.PodSpec
				if err := json.Unmarshal([]byte(saved), &spec); err != nil {
					t.Fatal(err)
				}
				want := candidate.WithoutServiceAccountToken(tt.pod.Spec)
				want.Tolerations = nil
				if !equality.Semantic.DeepEqual(spec, want) {
					t.Errorf("saved spec %s, want the visible spec %+v", saved, want)
				}
				return
			}
			if saved != honestSpec {
				t.Errorf("saved spec %s, want the admitted spec %s", saved, honestSpec)
			}
		})
	}
}

// TestHandleKeepsASavedSpecThatFits checks that a saved spec the pod came
// with stays when making a source pod of it gives the pod's own spec (as
// an earlier invocation of the webhook for the request left it), and is
// replaced as soon as it differs in anything else.
func TestHandleKeepsASavedSpecThatFits(t *testing.T) {
	m := &Mutator{Decoder: admission.NewDecoder(clientgoscheme.Scheme), NotReadyTolerationSeconds: ptr.To[int64](60)}
	first, _ := handled(t, m, admittedPod(nil))
	saved := first.Annotations[protocol.SourceSpecAnnotation]
	for _, tt := range []struct {
		name   string
		change func(*corev1.Pod)
		kept   bool
	}{
		{"a reinvocation", func(*corev1.Pod) {}, true},
		{"another image", func(p *corev1.Pod) { p.Spec.Containers[0].Image = "registry.example/other:1" }, false},
		{"the host's network", func(p *corev1.Pod) { p.Spec.HostNetwork = true }, false},
		{"another toleration", func(p *corev1.Pod) {
			p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists})
		}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pod := first.DeepCopy()
			tt.change(pod)
			got, _ := handled(t, m, pod)
			if kept := got.Annotations[protocol.SourceSpecAnnotation] == saved; kept != tt.kept {
				t.Errorf("saved spec kept %v, want %v", kept, tt.kept)
			}
			if !savedSpecFits(got.Annotations[protocol.SourceSpecAnnotation], got.Spec, m.NotReadyTolerationSeconds) {
				t.Errorf("the saved spec does not fit the pod's: %s", got.Annotations[protocol.SourceSpecAnnotation])
			}
		})
	}
}
