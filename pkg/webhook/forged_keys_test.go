package webhook

import (
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/sourcespec"
)

// hiddenSpec is a privileged spec with the host's root mounted: what a
// user would hide in the saved spec of a benign pod, as agents before
// original-fields read it.
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

// controlPlaneFields are original fields that would have a pod's
// candidates tolerate every taint of a target's control-plane nodes and be
// scheduled by another scheduler.
func controlPlaneFields(t *testing.T) string {
	t.Helper()
	raw, err := sourcespec.Fields{SchedulerName: "my-scheduler", Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// runs is the spec a source pod's candidates run.
func runs(t *testing.T, pod *corev1.Pod) *corev1.PodSpec {
	t.Helper()
	spec, err := sourcespec.Original(pod)
	if err != nil {
		t.Fatalf("what the candidates run: %v", err)
	}
	return spec
}

// TestHandleReplacesFlotillaKeys checks that what a pod's author writes
// of the keys Flotilla alone writes never reaches the stored pod, so that
// what its candidates run in the targets is the spec the cluster's
// admission let in.
func TestHandleReplacesFlotillaKeys(t *testing.T) {
	m := &Mutator{Decoder: admission.NewDecoder(clientgoscheme.Scheme), NotReadyTolerationSeconds: ptr.To[int64](60)}
	// The source pod the webhook makes of a pod that came without any.
	honest, _ := handled(t, m, admittedPod(nil))
	honestRuns := runs(t, honest)

	looksLikeASourcePod := admittedPod(map[string]string{protocol.OriginalFieldsAnnotation: controlPlaneFields(t)})
	prepareSpec(&looksLikeASourcePod.Spec, ptr.To[int64](60))

	splitOnly := admittedPod(map[string]string{protocol.SourceSpecAnnotation: hiddenSpec(t), protocol.OriginalFieldsAnnotation: controlPlaneFields(t)})
	delete(splitOnly.Labels, protocol.ElectLabel)
	splitOnly.Labels[protocol.LocalLabel] = "true"

	for _, tt := range []struct {
		name string
		pod  *corev1.Pod
		// wantSource: the pod is made a source pod whose candidates run
		// honestRuns; else it is left an ordinary pod.
		wantSource bool
	}{
		{"a saved spec hiding a privileged hostPath spec", admittedPod(map[string]string{protocol.SourceSpecAnnotation: hiddenSpec(t)}), true},
		{"a saved spec that is no spec", admittedPod(map[string]string{protocol.SourceSpecAnnotation: "{not json"}), true},
		{"original fields tolerating every taint", admittedPod(map[string]string{protocol.OriginalFieldsAnnotation: controlPlaneFields(t)}), true},
		{"original fields and a saved spec", admittedPod(map[string]string{protocol.OriginalFieldsAnnotation: controlPlaneFields(t), protocol.SourceSpecAnnotation: hiddenSpec(t)}), true},
		{"original fields that are no JSON", admittedPod(map[string]string{protocol.OriginalFieldsAnnotation: "{not json"}), true},
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
		{"forged original fields on a pod dressed as a source pod", looksLikeASourcePod, true},
		{"a saved spec, original fields and a local mark on a pod of the split alone", splitOnly, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := handled(t, m, tt.pod)
			for k := range got.Labels {
				if protocol.WrittenByFlotilla(k) {
					t.Errorf("label %s=%q stayed", k, got.Labels[k])
				}
			}
			for k := range got.Annotations {
				if protocol.WrittenByFlotilla(k) && !(tt.wantSource && k == protocol.OriginalFieldsAnnotation) {
					t.Errorf("annotation %s=%q stayed", k, got.Annotations[k])
				}
			}
			// The agent's records of an election and the saved spec that
			// agents before original-fields read, named, whatever
			// WrittenByFlotilla says.
			for _, k := range []string{protocol.ElectionAnnotation, protocol.ElectedDomainAnnotation, protocol.SourceSpecAnnotation} {
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
			spec := runs(t, got)
			if tt.pod == looksLikeASourcePod {
				// Nothing tells what the author's scheduler and tolerations
				// were: the candidates run the visible spec without the
				// tolerations MakeSource gives.
				want := sourcespec.WithoutServiceAccountToken(*tt.pod.Spec.DeepCopy())
				want.Tolerations = nil
				if !equality.Semantic.DeepEqual(*spec, want) {
					t.Errorf("candidates run %+v, want the visible spec %+v", *spec, want)
				}
				return
			}
			if !equality.Semantic.DeepEqual(spec, honestRuns) {
				t.Errorf("candidates run %+v, want the admitted spec %+v", *spec, *honestRuns)
			}
		})
	}
}

// TestHandleKeepsOriginalFieldsThatFit checks that original fields the pod
// came with stay when making a source pod of them gives the pod's own spec
// (as an earlier invocation of the webhook for the request left them), and
// are replaced as soon as they do not; either way the candidates run what
// the pod's spec is once admitted.
func TestHandleKeepsOriginalFieldsThatFit(t *testing.T) {
	m := &Mutator{Decoder: admission.NewDecoder(clientgoscheme.Scheme), NotReadyTolerationSeconds: ptr.To[int64](60)}
	first, _ := handled(t, m, admittedPod(nil))
	saved := first.Annotations[protocol.OriginalFieldsAnnotation]
	controlPlane := corev1.Toleration{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists}
	for _, tt := range []struct {
		name   string
		change func(*corev1.Pod)
		kept   bool
		// want is what the candidates run, from the admitted spec.
		want func(*corev1.PodSpec)
	}{
		{"a reinvocation", func(*corev1.Pod) {}, true, func(*corev1.PodSpec) {}},
		// Another webhook's change of a field that is not one of the
		// original fields is what the candidates run.
		{"another image", func(p *corev1.Pod) { p.Spec.Containers[0].Image = "registry.example/other:1" },
			true, func(s *corev1.PodSpec) { s.Containers[0].Image = "registry.example/other:1" }},
		{"the host's network", func(p *corev1.Pod) { p.Spec.HostNetwork = true }, true, func(s *corev1.PodSpec) { s.HostNetwork = true }},
		// Nothing tells which scheduler and tolerations the pod had before
		// (the candidates are given their own scheduler): those MakeSource
		// gives are left out, and the target's admission gives the
		// candidates its defaults.
		{"another toleration", func(p *corev1.Pod) { p.Spec.Tolerations = append(p.Spec.Tolerations, controlPlane) },
			false, func(s *corev1.PodSpec) {
				s.SchedulerName, s.Tolerations = protocol.SourceSchedulerName, []corev1.Toleration{controlPlane}
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pod := first.DeepCopy()
			tt.change(pod)
			got, _ := handled(t, m, pod)
			if kept := got.Annotations[protocol.OriginalFieldsAnnotation] == saved; kept != tt.kept {
				t.Errorf("original fields kept %v, want %v", kept, tt.kept)
			}
			if !originalFieldsFit(got.Annotations[protocol.OriginalFieldsAnnotation], got.Spec, m.NotReadyTolerationSeconds) {
				t.Errorf("the original fields do not fit the pod's: %s", got.Annotations[protocol.OriginalFieldsAnnotation])
			}
			want := runs(t, first)
			tt.want(want)
			if spec := runs(t, got); !equality.Semantic.DeepEqual(spec, want) {
				t.Errorf("candidates run %+v, want %+v", *spec, *want)
			}
		})
	}
}
