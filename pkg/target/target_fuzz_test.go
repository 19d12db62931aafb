package target

import (
	"encoding/base64"
	"encoding/json"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/summary"
)

// FuzzTokenClaims: the source reads the claims of the token a target
// issued it. Whatever they say, a renewal is never due before the token
// was issued, and is always due once it has expired.
func FuzzTokenClaims(f *testing.F) {
	f.Add(`{"sub":"system:serviceaccount:flotilla-system:flotilla-source-c1","iat":1000,"exp":1600}`, int64(1300), 0.8)
	f.Add(`{"sub":"system:serviceaccount:a:b","nbf":1000,"exp":1600}`, int64(1599), 0.8)
	f.Add(`{"iat":-9223372036854775808,"exp":9223372036854775807}`, int64(0), 0.8)
	f.Add(`{"iat":1,"exp":9223372036854775807}`, int64(1700000000), 0.8)
	f.Add(`{"iat":1000,"exp":1600}`, int64(1300), math.NaN())
	f.Add(`{"iat":1e30}`, int64(0), 0.5)
	f.Add(`not json`, int64(0), 0.5)
	f.Add(`{"sub":"system:serviceaccount::"}`, int64(0), 0.5)
	f.Fuzz(func(t *testing.T, payload string, now int64, after float64) {
		enc := base64.RawURLEncoding.EncodeToString
		c, err := parseToken(enc([]byte(`{"alg":"RS256"}`)) + "." + enc([]byte(payload)) + "." + enc([]byte("sig")))
		if err != nil {
			return
		}
		if ns, name, ok := c.serviceAccount(); ok && (ns == "" || name == "" || strings.Contains(ns, ":")) {
			t.Fatalf("subject %q read as ServiceAccount %q/%q", c.Subject, ns, name)
		}
		if math.IsNaN(after) || after < 0 || after > 1 {
			return // targets.tokenRenewAfter is validated to be within (0, 1)
		}
		due := renewDue(c, time.Unix(now, 0), after)
		if due && now < c.IssuedAt {
			t.Fatalf("renewal of a token issued at %d, expiring at %d, due at %d (after %v)", c.IssuedAt, c.Expiry, now, after)
		}
		if !due && c.IssuedAt != 0 && c.Expiry > c.IssuedAt && now > c.Expiry {
			t.Fatalf("renewal of a token issued at %d, expired at %d, not due at %d (after %v)", c.IssuedAt, c.Expiry, now, after)
		}
	})
}

// longExponent is a quantity's exponent of six digits or more, which
// resource.ParseQuantity may take hours to read (see FuzzValidate).
var longExponent = regexp.MustCompile(`[eE][+-]?[0-9]{6,}`)

// FuzzSummaryView: what a virtual node shows of a summary that Validate
// accepted: capacity within the summary and the invitation's quota, free
// at most allocatable, and the nodes' common labels without roles or
// Flotilla's own.
func FuzzSummaryView(f *testing.F) {
	f.Add(`{"nodes":2,"allocatable":{"cpu":"8","memory":"16Gi"},"free":{"cpu":"6","memory":"12Gi"},"quota":{"cpu":"4"},` +
		`"commonLabels":{"topology.kubernetes.io/region":"eu","node-role.kubernetes.io/worker":"","multicluster.flotilla.dev/x":"y"}}`)
	f.Add(`{"allocatable":{"cpu":"1"},"free":{"cpu":"1"},"quota":{"cpu":"0","memory":"1"}}`)
	f.Add(`{"allocatable":{"nvidia.com/gpu":"1"},"quota":{"nvidia.com/gpu":"-1"}}`)
	f.Add(`{}`)
	f.Fuzz(func(t *testing.T, raw string) {
		if longExponent.MatchString(raw) {
			return
		}
		var s v1alpha1.ClusterSummaryStatus
		if json.Unmarshal([]byte(raw), &s) != nil || summary.Validate(&s) != nil {
			return
		}
		allocatable, free := Capacity(&s)
		for _, view := range []struct {
			name      string
			got, from corev1.ResourceList
		}{{"allocatable", allocatable, s.Allocatable}, {"free", free, s.Free}} {
			for name, q := range view.got {
				from, ok := view.from[name]
				if !ok || q.Cmp(from) > 0 {
					t.Fatalf("%s %s=%s is more than the summary's %s in %q", view.name, name, q.String(), from.String(), raw)
				}
				if limit, ok := s.Quota[name]; ok && q.Cmp(limit) > 0 {
					t.Fatalf("%s %s=%s is more than the quota %s in %q", view.name, name, q.String(), limit.String(), raw)
				}
			}
		}
		for name, q := range free {
			if a := allocatable[name]; q.Cmp(a) > 0 {
				t.Fatalf("free %s=%s is more than allocatable %s in %q", name, q.String(), a.String(), raw)
			}
		}
		for k, v := range NodeLabels(&s) {
			if strings.HasPrefix(k, "node-role.kubernetes.io/") || strings.HasPrefix(k, protocol.Prefix) || s.CommonLabels[k] != v {
				t.Fatalf("virtual node label %s=%q from %q", k, v, raw)
			}
		}
	})
}
