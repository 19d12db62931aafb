package invitation

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// pod is a pod of namespace shop as the API server admitted it.
func pod(name, node, scheduler string, labels map[string]string) corev1.Pod {
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, Labels: labels},
		Spec:       corev1.PodSpec{NodeName: node, SchedulerName: scheduler},
	}
}

func candidateOf(cluster string) map[string]string {
	return map[string]string{protocol.CandidateLabel: "true", protocol.SourceClusterLabel: cluster}
}

// TestStreamRules: the streams Role of source c1 names its bound
// candidates, and nothing else: not another source's, not one that waits,
// not a pod of the target's that merely has a candidate's name, and no
// rule at all without a delegate, since a rule without names would grant
// every pod. A grant by name shape, or of the whole namespace, fails here.
func TestStreamRules(t *testing.T) {
	for _, tc := range []struct {
		name string
		pods []corev1.Pod
		want []string // names granted; nil: no rule
	}{
		{name: "no pod"},
		{
			name: "no delegate: a waiting candidate",
			pods: []corev1.Pod{pod("web-aaaaaaaaaa", "", protocol.SchedulerName, candidateOf("c1"))},
		},
		{
			name: "only this source's bound candidates, sorted",
			pods: []corev1.Pod{
				pod("web-bbbbbbbbbb", "node-1", protocol.SchedulerName, candidateOf("c1")),
				pod("api-cccccccccc", "node-2", protocol.SchedulerName, candidateOf("c1")),
			},
			want: []string{"api-cccccccccc", "web-bbbbbbbbbb"},
		},
		{
			name: "another source's candidate, an unbound one, a target's pod named like a candidate",
			pods: []corev1.Pod{
				pod("web-bbbbbbbbbb", "node-1", protocol.SchedulerName, candidateOf("c1")),
				pod("web-dddddddddd", "node-1", protocol.SchedulerName, candidateOf("c2")),
				pod("web-eeeeeeeeee", "", protocol.SchedulerName, candidateOf("c1")),
				pod("web-0123456789", "node-1", "default-scheduler", map[string]string{"app": "web"}),
				pod("web-0123456788", "node-1", protocol.SchedulerName, nil),
			},
			want: []string{"web-bbbbbbbbbb"},
		},
		{
			name: "a candidate's labels on a pod another scheduler bound",
			pods: []corev1.Pod{pod("web-ffffffffff", "node-1", "default-scheduler", candidateOf("c1"))},
		},
		{
			name: "a source label without the candidate label, or with it not true",
			pods: []corev1.Pod{
				pod("a-1111111111", "node-1", protocol.SchedulerName, map[string]string{protocol.SourceClusterLabel: "c1"}),
				pod("b-2222222222", "node-1", protocol.SchedulerName, map[string]string{protocol.SourceClusterLabel: "c1", protocol.CandidateLabel: "false"}),
			},
		},
		{
			name: "a source whose name another's begins with",
			pods: []corev1.Pod{pod("web-1212121212", "node-1", protocol.SchedulerName, candidateOf("c10"))},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := make([]StreamPod, 0, len(tc.pods))
			for i := range tc.pods {
				in = append(in, StreamPodOf(&tc.pods[i]))
			}
			rules := StreamRules("c1", in)
			for _, r := range rules {
				if len(r.ResourceNames) == 0 {
					t.Fatalf("rule %+v names no pod: it grants every pod", r)
				}
			}
			if tc.want == nil {
				if rules != nil {
					t.Fatalf("rules %+v, want none", rules)
				}
				return
			}
			want := []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"pods/log"}, Verbs: []string{"get"}, ResourceNames: tc.want},
				{APIGroups: []string{""}, Resources: []string{"pods/exec", "pods/attach", "pods/portforward"}, Verbs: []string{"get", "create"}, ResourceNames: tc.want},
			}
			if !reflect.DeepEqual(rules, want) {
				t.Fatalf("rules\n%+v\nwant\n%+v", rules, want)
			}
		})
	}
	unnamed := pod("x-1111111111", "n", protocol.SchedulerName, candidateOf(""))
	if got := StreamRules("", []StreamPod{StreamPodOf(&unnamed)}); got != nil {
		t.Errorf("an invitation without a cluster name grants %+v", got)
	}
}

// TestRoleGrantsNoStreams: the invitation's main Role, which covers every
// pod of the namespace, grants no logs and no streams: only the streams
// Role does, by name.
func TestRoleGrantsNoStreams(t *testing.T) {
	for _, rule := range sample("ClusterSource").Role("shop").Rules {
		for _, r := range rule.Resources {
			if r == "pods/log" || slices.Contains(streamSubresources, r) || r == "pods/*" || r == "*" {
				t.Errorf("the invitation's Role grants %v on %s of every pod", rule.Verbs, r)
			}
		}
	}
}

// TestStreamsObjects: the streams Role and RoleBinding carry the
// invitation's label and one name, which is how revoking the invitation,
// or its leaving a namespace, finds and deletes both (Controller.revoke
// and apply delete a labelled RoleBinding and the Role of its name).
func TestStreamsObjects(t *testing.T) {
	inv := sample("ClusterSource")
	role, binding := inv.StreamsRole("shop", nil), inv.StreamsRoleBinding("shop")
	if role.Name != binding.Name || binding.RoleRef.Name != role.Name || binding.RoleRef.Kind != "Role" {
		t.Errorf("Role %s, RoleBinding %s to %s %s", role.Name, binding.Name, binding.RoleRef.Kind, binding.RoleRef.Name)
	}
	if role.Name == inv.Role("shop").Name {
		t.Errorf("the streams Role is the invitation's main Role, %s", role.Name)
	}
	for _, labels := range []map[string]string{role.Labels, binding.Labels} {
		if labels[InvitationLabel] != inv.ID() {
			t.Errorf("labels %v lack %s=%s", labels, InvitationLabel, inv.ID())
		}
	}
	if !reflect.DeepEqual(binding.Subjects, inv.RoleBinding("shop").Subjects) {
		t.Errorf("the streams RoleBinding binds %+v, the main one %+v", binding.Subjects, inv.RoleBinding("shop").Subjects)
	}
	if len(role.Rules) != 0 {
		t.Errorf("a Role of no delegate has rules %+v", role.Rules)
	}
	long := sample("Source")
	long.Namespace, long.Name = strings.Repeat("n", 63), strings.Repeat("x", 200)
	if errs := validation.IsDNS1123Subdomain(long.StreamsName()); len(errs) > 0 {
		t.Errorf("name %q: %v", long.StreamsName(), errs)
	}
}

// TestTrimStreamPod: the informer keeps of a pod what StreamRules reads,
// and a pod it already trimmed goes through unchanged.
func TestTrimStreamPod(t *testing.T) {
	p := pod("web-bbbbbbbbbb", "node-1", protocol.SchedulerName, candidateOf("c1"))
	p.ResourceVersion = "7"
	p.Spec.Containers = []corev1.Container{{Name: "app", Image: "app:1"}}
	obj, err := trimStreamPod(&p)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := obj.(*StreamPod)
	if !ok {
		t.Fatalf("trimmed to a %T", obj)
	}
	want := StreamPod{Namespace: "shop", Name: "web-bbbbbbbbbb", ResourceVersion: "7", Candidate: true, SourceCluster: "c1", SchedulerName: protocol.SchedulerName, NodeName: "node-1"}
	if *got != want {
		t.Errorf("trimmed to %+v, want %+v", *got, want)
	}
	again, _ := trimStreamPod(got)
	if again != any(got) {
		t.Errorf("trimming a trimmed pod gave %v", again)
	}
	if m := got.GetObjectMeta(); m.GetNamespace() != "shop" || m.GetName() != "web-bbbbbbbbbb" || m.GetResourceVersion() != "7" {
		t.Errorf("meta %s/%s@%s", m.GetNamespace(), m.GetName(), m.GetResourceVersion())
	}
}
