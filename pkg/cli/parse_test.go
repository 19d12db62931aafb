package cli

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

func TestParseLabels(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    map[string]v1alpha1.LabelValue
		wantErr bool
	}{
		{in: "region=eu,zone=a", want: map[string]v1alpha1.LabelValue{"region": "eu", "zone": "a"}},
		{in: " topology.kubernetes.io/region = eu-west ", want: map[string]v1alpha1.LabelValue{"topology.kubernetes.io/region": "eu-west"}},
		{in: "", want: map[string]v1alpha1.LabelValue{}},
		{in: "empty=", want: map[string]v1alpha1.LabelValue{"empty": ""}},
		{in: "region", wantErr: true},
		{in: "=eu", wantErr: true},
		{in: "a=1,a=2", wantErr: true},
		{in: "bad key=1", wantErr: true},
		{in: "k=not valid", wantErr: true},
	} {
		got, err := parseLabels(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("parseLabels(%q): error %v, want error %v", tc.in, err, tc.wantErr)
			continue
		}
		if err != nil {
			if !errors.As(err, &usageError{}) {
				t.Errorf("parseLabels(%q): %v is not a usage error", tc.in, err)
			}
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("parseLabels(%q) (-want +got):\n%s", tc.in, diff)
		}
	}
}

func TestParseMapping(t *testing.T) {
	got, err := parseMapping("web=web-c1,shop=shop-c1")
	if err != nil {
		t.Fatal(err)
	}
	want := []v1alpha1.NamespaceMapping{{Source: "shop", Target: "shop-c1"}, {Source: "web", Target: "web-c1"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	for _, bad := range []string{"shop", "shop=Shop", "shop=a,shop=b", "sh_op=x"} {
		if _, err := parseMapping(bad); err == nil {
			t.Errorf("parseMapping(%q): want an error", bad)
		}
	}
}

func TestParseQuota(t *testing.T) {
	got, err := parseQuota("cpu=8,memory=32Gi,pods=100")
	if err != nil {
		t.Fatal(err)
	}
	if got.CPU.Cmp(resource.MustParse("8")) != 0 || got.Memory.Cmp(resource.MustParse("32Gi")) != 0 || *got.Pods != 100 {
		t.Errorf("got cpu %v memory %v pods %v", got.CPU, got.Memory, got.Pods)
	}
	if q, err := parseQuota(""); err != nil || q != nil {
		t.Errorf("empty quota: got %v, %v; want nil, nil", q, err)
	}
	for _, bad := range []string{"cpu=-1", "cpu=lots", "pods=1.5", "pods=-1", "gpus=1", "cpu"} {
		if _, err := parseQuota(bad); err == nil {
			t.Errorf("parseQuota(%q): want an error", bad)
		}
	}
}

func TestBuildInvitation(t *testing.T) {
	managed := v1alpha1.SourceIdentity{ManagedServiceAccount: &v1alpha1.ManagedServiceAccount{}}
	for _, tc := range []struct {
		name    string
		opts    inviteOptions
		want    any
		wantErr bool
	}{
		{
			name: "namespaces, created, managed identity",
			opts: inviteOptions{namespaces: "shop, web", createNamespaces: true},
			want: &v1alpha1.ClusterSource{
				ObjectMeta: metav1.ObjectMeta{Name: "c1"},
				Spec: v1alpha1.ClusterSourceSpec{
					SourceCommon: v1alpha1.SourceCommon{ClusterName: "c1", Identity: managed, CreateNamespaces: true},
					Namespaces:   []string{"shop", "web"},
				},
			},
		},
		{
			name: "selector, user, quota, privileged",
			opts: inviteOptions{namespaceSelector: "team=web", user: "c1-admin", quota: "pods=5", allowPrivileged: true},
			want: &v1alpha1.ClusterSource{
				ObjectMeta: metav1.ObjectMeta{Name: "c1"},
				Spec: v1alpha1.ClusterSourceSpec{
					SourceCommon: v1alpha1.SourceCommon{
						ClusterName: "c1", Identity: v1alpha1.SourceIdentity{User: "c1-admin"},
						AllowPrivileged: true, Quota: &v1alpha1.SourceQuota{Pods: ptr.To[int32](5)},
					},
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "web"}},
				},
			},
		},
		{
			name: "namespaced Source with an existing ServiceAccount",
			opts: inviteOptions{namespaced: true, serviceAccount: "ops/c1"},
			want: &v1alpha1.Source{
				ObjectMeta: metav1.ObjectMeta{Name: "c1", Namespace: "team"},
				Spec: v1alpha1.SourceSpec{SourceCommon: v1alpha1.SourceCommon{
					ClusterName: "c1", Identity: v1alpha1.SourceIdentity{ServiceAccount: &v1alpha1.ServiceAccountRef{Namespace: "ops", Name: "c1"}},
				}},
			},
		},
		{name: "no namespaces", opts: inviteOptions{}, wantErr: true},
		{name: "both namespaces and selector", opts: inviteOptions{namespaces: "a", namespaceSelector: "b=c"}, wantErr: true},
		{name: "namespaced with namespaces", opts: inviteOptions{namespaced: true, namespaces: "a"}, wantErr: true},
		{name: "user and ServiceAccount", opts: inviteOptions{namespaces: "a", user: "u", serviceAccount: "a/b"}, wantErr: true},
		{name: "ServiceAccount without namespace", opts: inviteOptions{namespaces: "a", serviceAccount: "b"}, wantErr: true},
		{name: "bad selector", opts: inviteOptions{namespaceSelector: "a in (b"}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := buildInvitation("c1", "team", &tc.opts)
			if tc.wantErr {
				if !errors.As(err, &usageError{}) {
					t.Fatalf("want a usage error, got %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, any(got), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
