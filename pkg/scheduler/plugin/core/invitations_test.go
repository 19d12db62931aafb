package core

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

func TestInvitationCoverage(t *testing.T) {
	labels := map[string]map[string]string{"shop": {"team": "a"}, "blog": {"team": "b"}}
	nsLabels := func(ns string) (map[string]string, bool) { l, ok := labels[ns]; return l, ok }
	selector := func(sel *metav1.LabelSelector) *v1alpha1.ClusterSource {
		cs := &v1alpha1.ClusterSource{ObjectMeta: metav1.ObjectMeta{Name: "c1"}}
		cs.Spec.NamespaceSelector = sel
		cs.Status.Namespaces = []string{"granted"}
		return cs
	}
	listed := &v1alpha1.ClusterSource{ObjectMeta: metav1.ObjectMeta{Name: "c1"}}
	listed.Spec.Namespaces = []string{"shop"}
	source := &v1alpha1.Source{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "c1"}}

	tests := []struct {
		name string
		inv  Invitation
		want map[string]bool
	}{
		{"a Source covers its namespace", SourceInvitation(source), map[string]bool{"shop": true, "blog": false}},
		{"listed namespaces", ClusterSourceInvitation(listed, nsLabels), map[string]bool{"shop": true, "blog": false, "granted": false}},
		{"a selector matches the namespace's labels", ClusterSourceInvitation(selector(&metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}), nsLabels),
			map[string]bool{"shop": true, "blog": false, "granted": true}},
		{"an invalid selector covers what was granted", ClusterSourceInvitation(selector(&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: "Bad"}}}), nsLabels),
			map[string]bool{"shop": false, "granted": true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for ns, want := range tt.want {
				if got := tt.inv.Covers(ns); got != want {
					t.Errorf("%s covers %s: %v, want %v", tt.inv.Name, ns, got, want)
				}
			}
		})
	}
}

func TestQuotaOf(t *testing.T) {
	cpu, mem := resource.MustParse("2500m"), resource.MustParse("1Gi")
	q := QuotaOf(&v1alpha1.SourceQuota{CPU: &cpu, Memory: &mem, Pods: ptr.To[int32](4)})
	if *q.CPU != 2500 || *q.Memory != 1<<30 || *q.Pods != 4 {
		t.Errorf("QuotaOf = cpu %d, memory %d, pods %d", *q.CPU, *q.Memory, *q.Pods)
	}
	if !QuotaOf(nil).IsZero() || !QuotaOf(&v1alpha1.SourceQuota{}).IsZero() {
		t.Error("no quota bounds something")
	}
}
