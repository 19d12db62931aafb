package target

import (
	"encoding/base64"
	"errors"
	"slices"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
)

func jwt(payload string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc([]byte(payload)) + "." + enc([]byte("sig"))
}

func TestTokenClaims(t *testing.T) {
	c, err := parseToken(jwt(`{"sub":"system:serviceaccount:flotilla-system:flotilla-source-c1","iat":1000,"exp":1600}`))
	if err != nil {
		t.Fatal(err)
	}
	ns, name, ok := c.serviceAccount()
	if !ok || ns != "flotilla-system" || name != "flotilla-source-c1" {
		t.Fatalf("service account %q/%q %v", ns, name, ok)
	}
	for _, bad := range []string{"abc", "a.!!.c", jwt(`not json`)} {
		if _, err := parseToken(bad); err == nil {
			t.Errorf("parseToken(%q) accepted it", bad)
		}
	}
	for _, sub := range []string{"alice", "system:serviceaccount:only-namespace", "system:serviceaccount::name"} {
		if _, _, ok := (tokenClaims{Subject: sub}).serviceAccount(); ok {
			t.Errorf("subject %q taken for a ServiceAccount", sub)
		}
	}
}

func TestRenewDue(t *testing.T) {
	c := tokenClaims{IssuedAt: 1000, Expiry: 1600} // ten minutes
	at := func(s int64) time.Time { return time.Unix(s, 0) }
	for _, tc := range []struct {
		now   int64
		after float64
		want  bool
	}{
		{1000, 0.5, false},
		{1299, 0.5, false},
		{1301, 0.5, true},
		{1013, 0.02, true},
		{1011, 0.02, false},
		{1700, 0.5, true}, // expired: still try
	} {
		if got := renewDue(c, at(tc.now), tc.after); got != tc.want {
			t.Errorf("renewDue at %d after %g = %v, want %v", tc.now, tc.after, got, tc.want)
		}
	}
	if renewDue(tokenClaims{}, at(5000), 0.5) {
		t.Error("a token without times is never due: it is not one we can renew")
	}
}

// TestRenewTokenWithinALoweredBound: a target that lowered its
// invitation's maxTokenLifetime below the lifetime of the token the source
// holds refuses a renewal of that lifetime; the source asks for the
// shortest token instead of losing the target.
func TestRenewTokenWithinALoweredBound(t *testing.T) {
	tg, err := New(Config{Name: "t", REST: &rest.Config{Host: "https://127.0.0.1:1"}, SourceCluster: "src"})
	if err != nil {
		t.Fatal(err)
	}
	kube := fake.NewClientset()
	var asked []int64
	kube.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		tr := a.(k8stesting.CreateActionImpl).GetObject().(*authenticationv1.TokenRequest)
		asked = append(asked, *tr.Spec.ExpirationSeconds)
		if *tr.Spec.ExpirationSeconds > 1800 {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "serviceaccounts/token"}, "flotilla-source-src",
				errors.New("spec.expirationSeconds: above the invitation's maxTokenLifetime"))
		}
		tr = tr.DeepCopy()
		tr.Status = authenticationv1.TokenRequestStatus{Token: "short", ExpirationTimestamp: metav1.NewTime(time.Unix(2000, 0))}
		return true, tr, nil
	})
	tg.client = kube
	token, _, err := tg.renewToken(t.Context(), tokenClaims{Subject: "system:serviceaccount:flotilla-system:flotilla-source-src", IssuedAt: 1000, Expiry: 1000 + 12*3600})
	if err != nil {
		t.Fatal(err)
	}
	if token != "short" || !slices.Equal(asked, []int64{12 * 3600, shortestToken}) {
		t.Fatalf("token %q after asking for %v, want the shortest token after the held lifetime", token, asked)
	}
}
