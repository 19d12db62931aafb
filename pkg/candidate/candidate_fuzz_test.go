package candidate

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// FuzzBuild: whatever a source pod holds (spec as the pod's own spec with
// value as its original fields, or as the saved spec of agents before
// original-fields), Build fails with a reason or gives a candidate that
// carries nothing of the source cluster's own (token, node, virtual-node
// toleration, priority) and no protocol label or annotation but those
// Build sets: a source pod cannot smuggle an allowance into its
// candidates.
func FuzzBuild(f *testing.F) {
	for _, seed := range []string{
		`{"containers":[{"name":"app","image":"app:1","volumeMounts":[{"name":"kube-api-access-x","mountPath":"/s"}]}],` +
			`"volumes":[{"name":"kube-api-access-x","projected":{}}],"nodeName":"n","priority":7,"serviceAccountName":"sa",` +
			`"tolerations":[{"key":"virtual-kubelet.io/provider","operator":"Exists"}],"readinessGates":[{"conditionType":"x"}],"workloadRef":{"name":"train","podGroup":"workers"}}`,
		`{"initContainers":[{"name":"i","volumeMounts":[{"name":"kube-api-access-x"}]}],"containers":null,"volumes":[{"name":"kube-api-access-x","projected":{"sources":[]}},{"name":"kube-api-access-x","projected":{}}]}`,
		`{}`, `null`, `""`, `[]`, `{"containers":"x"}`, `{"containers":[{"resources":{"requests":{"cpu":"1e999999999"}}}]}`,
		`{"containers":[{"resources":{"limits":{"memory":"99999999999999999999999999999Ei"}}}]}`,
		`{"overhead":{"cpu":".000000000000000000000000000001"}}`,
		`{"containers":[{"name":"a"}],"containers":[{"name":"b"}]}`,
		strings.Repeat(`{"affinity":`, 3000),
		`{"affinity":{"podAntiAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":[{"labelSelector":{"matchLabels":{"app":"web","a/b":"1","a_b":"2"},` +
			`"matchExpressions":[{"key":"tier","operator":"Exists"}]},"matchLabelKeys":["pod-template-hash","x/y","x_y"],"mismatchLabelKeys":["team"],"topologyKey":"h"}],` +
			`"preferredDuringSchedulingIgnoredDuringExecution":[{"weight":1,"podAffinityTerm":{"labelSelector":{},"topologyKey":"z"}}]},` +
			`"podAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":[{"topologyKey":"h"}]}},` +
			`"topologySpreadConstraints":[{"maxSkew":1,"topologyKey":"z","labelSelector":{"matchLabels":{"multicluster.flotilla.dev/elect":"true","app":"web"}},"matchLabelKeys":["v"]},{"maxSkew":1}]}`,
	} {
		f.Add(seed, "web-1", "uid-1", protocol.AllowedAnnotation, "uid-1/1/n")
	}
	f.Add(`{}`, strings.Repeat("a", 300), "", protocol.Prefix+"source-uid", "other")
	f.Add(`{}`, "w", "u", corev1.LastAppliedConfigAnnotation, "{}")
	f.Fuzz(func(t *testing.T, spec, name, uid, key, value string) {
		legacy := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "shop", UID: "uid",
			Labels:      map[string]string{key: value, "app": "web"},
			Annotations: map[string]string{key: value, protocol.SourceSpecAnnotation: spec},
		}}
		legacy.Annotations[protocol.SourceSpecAnnotation] = spec
		legacy.UID = k8stypes.UID(shortUID(uid))
		check(t, legacy, spec, name, key, value, uid == "self")
		var own corev1.PodSpec
		if json.Unmarshal([]byte(spec), &own) != nil {
			return
		}
		source := legacy.DeepCopy()
		delete(source.Annotations, protocol.SourceSpecAnnotation)
		source.Annotations[protocol.OriginalFieldsAnnotation] = value
		source.Spec = own
		check(t, source, spec, name, key, value, uid == "self")
	})
}

// check is FuzzBuild's verdict on the candidate of source.
func check(t *testing.T, source *corev1.Pod, spec, name, key, value string, self bool) {
	c, err := Build(source, "c1", "c2", "shop", self, false)
	if err != nil {
		if c != nil {
			t.Fatalf("Build(%q) failed (%v) and still gave a candidate", spec, err)
		}
		return
	}
	s := c.Spec
	if s.SchedulerName != protocol.SchedulerName || s.NodeName != "" || s.Priority != nil || s.ServiceAccountName != "" ||
		s.DeprecatedServiceAccount != "" || s.AutomountServiceAccountToken == nil || *s.AutomountServiceAccountToken || s.ReadinessGates != nil || s.SchedulingGroup != nil {
		t.Fatalf("candidate of spec %q keeps what only the source means: %+v", spec, s)
	}
	for _, v := range s.Volumes {
		if strings.HasPrefix(v.Name, "kube-api-access-") && v.Projected != nil {
			t.Fatalf("candidate of spec %q keeps the source's token volume %q", spec, v.Name)
		}
	}
	for _, tol := range s.Tolerations {
		if tol.Key == protocol.VirtualNodeTaintKey {
			t.Fatalf("candidate of spec %q tolerates the virtual nodes", spec)
		}
	}
	want := map[string]string{
		protocol.CandidateLabel: "true", protocol.SourceClusterLabel: "c1", protocol.TargetLabel: protocol.TargetLabelValue("c2"),
		protocol.SourceUIDLabel:  string(source.UID),
		protocol.SourceNameLabel: protocol.SourceNameLabelValue(name),
	}
	carried, _ := protocol.CarriedLabelKey(key)
	for k, v := range c.Labels {
		switch {
		case strings.HasPrefix(k, protocol.SourceLabelPrefix):
			if len(validation.IsQualifiedName(k)) > 0 || (k != carried || v != value) && (k != protocol.SourceLabelPrefix+"app" || v != "web") {
				t.Fatalf("candidate carries label %s=%q of source labels %v: %v", k, v, source.Labels, validation.IsQualifiedName(k))
			}
		case want[k] != v:
			t.Fatalf("candidate carries label %s=%q", k, v)
		}
	}
	if c.Labels[protocol.SourceLabelPrefix+"app"] == "" {
		t.Fatalf("candidate does not carry its source's label app: %v", c.Labels)
	}
	for _, k := range selectedKeys(&c.Spec) {
		if !strings.HasPrefix(k, protocol.Prefix) && !strings.HasPrefix(k, protocol.SourceLabelPrefix) {
			t.Fatalf("candidate of spec %q selects pods by the source's label key %q", spec, k)
		}
	}
	want = map[string]string{
		protocol.SourceNamespaceAnnotation: "shop", protocol.SourceNameAnnotation: name, protocol.TargetAnnotation: "c2",
		protocol.SourceLabelsAnnotation: c.Annotations[protocol.SourceLabelsAnnotation],
	}
	if labels, err := SourceLabels(c); err != nil || labels["app"] != "web" {
		t.Fatalf("candidate's source labels %v (%v), want app=web", labels, err)
	}
	for k, v := range c.Annotations {
		if (strings.HasPrefix(k, protocol.Prefix) && want[k] != v) || k == corev1.LastAppliedConfigAnnotation {
			t.Fatalf("candidate carries annotation %s=%q", k, v)
		}
	}
	if len(c.Name) > 63 || c.Name != CandidateNameOf(source, "c1", "c2") {
		t.Fatalf("candidate of %q is named %q", name, c.Name)
	}
}

// shortUID keeps a fuzzed UID short; its content does not matter to Build.
func shortUID(s string) string {
	if len(s) > 36 {
		return s[:36]
	}
	return s
}
