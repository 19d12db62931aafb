package target

import (
	"encoding/base64"
	"testing"
	"time"
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
