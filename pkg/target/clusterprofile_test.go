package target

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// TestClusterProfileTokenSecret checks where a ClusterTarget that names a
// ClusterProfile finds its token: by default the Secret of the profile's
// name in the agent's namespace, key "token" (the shape of the Cluster
// Inventory API's secretreader convention), never a Secret the profile
// itself would name.
func TestClusterProfileTokenSecret(t *testing.T) {
	c := &Controller{Namespace: "flotilla-system"}
	for _, tc := range []struct {
		name string
		ref  v1alpha1.ClusterProfileRef
		want types.NamespacedName
		key  string
	}{
		{"default", v1alpha1.ClusterProfileRef{Namespace: "fleet", Name: "spoke-1"},
			types.NamespacedName{Namespace: "flotilla-system", Name: "spoke-1"}, "token"},
		{"named", v1alpha1.ClusterProfileRef{Namespace: "fleet", Name: "spoke-1", TokenSecretRef: &v1alpha1.TokenSecretRef{Name: "s", Namespace: "creds", Key: "k"}},
			types.NamespacedName{Namespace: "creds", Name: "s"}, "k"},
		{"named in the agent's namespace", v1alpha1.ClusterProfileRef{Namespace: "fleet", Name: "spoke-1", TokenSecretRef: &v1alpha1.TokenSecretRef{Name: "s"}},
			types.NamespacedName{Namespace: "flotilla-system", Name: "s"}, "token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ct := &v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: "spoke"}}
			ct.Spec.ClusterProfileRef = &tc.ref
			v := c.clusterTargetView(ct)
			if v.profile == nil || !v.tokenOnly || v.secret != tc.want || v.secretKey != tc.key {
				t.Fatalf("profile %v tokenOnly %v secret %v key %q, want %v %q", v.profile, v.tokenOnly, v.secret, v.secretKey, tc.want, tc.key)
			}
		})
	}
}
