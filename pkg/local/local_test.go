package local

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// TestLocalFirstCovers: a ClusterTarget with localFirst covers every
// namespace, a Target only its own; neither does without self, or while
// being deleted; namespace "" (Overflow's question) is any namespace.
func TestLocalFirstCovers(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	common := func(self, first bool) v1alpha1.TargetCommon {
		return v1alpha1.TargetCommon{Self: self, LocalFirst: first}
	}
	target := func(ns, name string, c v1alpha1.TargetCommon, deleting bool) *v1alpha1.Target {
		tg := &v1alpha1.Target{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		tg.Spec.TargetCommon = c
		if deleting {
			now := metav1.Now()
			tg.DeletionTimestamp = &now
			tg.Finalizers = []string{"test"}
		}
		return tg
	}
	cluster := func(name string, c v1alpha1.TargetCommon) *v1alpha1.ClusterTarget {
		ct := &v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: name}}
		ct.Spec.TargetCommon = c
		return ct
	}
	for _, tc := range []struct {
		name    string
		objects []client.Object
		covered map[string]bool // by namespace; "" is any
	}{
		{"none", nil, map[string]bool{"shop": false, "": false}},
		{"a ClusterTarget covers every namespace", []client.Object{cluster("c1", common(true, true))}, map[string]bool{"shop": true, "other": true, "": true}},
		{"a Target covers its own", []client.Object{target("shop", "c1", common(true, true), false)}, map[string]bool{"shop": true, "other": false, "": true}},
		{"localFirst off", []client.Object{cluster("c1", common(true, false)), target("shop", "c1", common(true, false), false)}, map[string]bool{"shop": false, "": false}},
		{"not self", []client.Object{cluster("c1", common(false, true))}, map[string]bool{"shop": false, "": false}},
		{"being deleted", []client.Object{target("shop", "c1", common(true, true), true)}, map[string]bool{"shop": false, "": false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := &Keeper{Reader: fake.NewClientBuilder().WithScheme(scheme).WithObjects(tc.objects...).Build()}
			for ns, want := range tc.covered {
				got, err := k.localFirst(context.Background(), ns)
				if err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Errorf("localFirst(%q) = %v, want %v", ns, got, want)
				}
			}
		})
	}
}

// TestGangMembersAreNotKeptHere: with a self target's localFirst, a gang's
// member is never kept in this cluster on its own (it would escape its
// gang's all or nothing); a malformed declaration is no gang.
func TestGangMembersAreNotKeptHere(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	ct := &v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: "home"}}
	ct.Spec.Self, ct.Spec.LocalFirst = true, true
	// No view: a gang member must be decided before the view is asked.
	k := &Keeper{Reader: fake.NewClientBuilder().WithScheme(scheme).WithObjects(ct).Build()}
	member := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "w-0",
		Labels:      map[string]string{protocol.PodGroupLabel: "train"},
		Annotations: map[string]string{protocol.GangMinMemberAnnotation: "4"}}}
	v, err := k.Keep(context.Background(), member, true)
	if err != nil || v.Fits || !strings.Contains(v.Reason, "pod group train") {
		t.Fatalf("Keep(gang member) = %+v, %v; want it sent through the targets", v, err)
	}
}
