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
	"k8s.io/client-go/tools/clientcmd"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/summary"
)

// FuzzRESTConfigFromKubeconfig: a kubeconfig Secret is a peer's data.
// Whatever it holds, the agent gets an error or a client that connects to
// one server with one credential it carries: no command, no file of the
// agent's disk, no trust in any server, no proxy, no impersonation.
func FuzzRESTConfigFromKubeconfig(f *testing.F) {
	for _, seed := range []string{
		string(kubeconfigWith("", "    token: abc")),
		string(kubeconfigWith("", "    client-certificate-data: Zm9v\n    client-key-data: Zm9v")),
		string(kubeconfigWith("", "    token: abc\n    exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh}")),
		string(kubeconfigWith("", "    token: abc\n    tokenFile: /etc/passwd")),
		string(kubeconfigWith("", "    token: abc\n    as: system:admin")),
		strings.Replace(string(kubeconfigWith("", "    token: abc")), "current-context: t", "current-context: \"\"", 1),
		strings.Replace(string(kubeconfigWith("", "    token: abc")), "server: https://127.0.0.1:6443", "server: https://127.0.0.1:6443\n    proxy-url: http://evil", 1),
		`{"apiVersion":"v1","kind":"Config","current-context":"t","contexts":[{"name":"t","context":{"cluster":"t","user":"t"}},{"name":"t","context":{"cluster":"u","user":"u"}}],` +
			`"clusters":[{"name":"t","cluster":{"server":"https://a"}},{"name":"u","cluster":{"server":"https://b","insecure-skip-tls-verify":true}}],` +
			`"users":[{"name":"t","user":{"token":"x"}},{"name":"u","user":{"exec":{"command":"sh"}}}]}`,
		"a: &a [x, x, x, x]\nb: &b [*a, *a, *a, *a]\nc: &c [*b, *b, *b, *b]\nd: [*c, *c, *c, *c]\n",
		"", "{}", "null", "[]", strings.Repeat("- ", 5000),
	} {
		f.Add(seed, "renewed-token")
	}
	f.Fuzz(func(t *testing.T, data, token string) {
		cfg, err := RESTConfigFromKubeconfig([]byte(data))
		if err != nil {
			return
		}
		tls := cfg.TLSClientConfig
		switch {
		case cfg.Host == "":
			t.Fatalf("accepted a kubeconfig with no server: %q", data)
		case cfg.ExecProvider != nil || cfg.AuthProvider != nil || cfg.AuthConfigPersister != nil:
			t.Fatalf("accepted a kubeconfig that runs a plugin: %q", data)
		case cfg.BearerTokenFile != "" || tls.CAFile != "" || tls.CertFile != "" || tls.KeyFile != "":
			t.Fatalf("accepted a kubeconfig that reads the agent's files: %q", data)
		case tls.Insecure:
			t.Fatalf("accepted a kubeconfig that trusts any server: %q", data)
		case cfg.Proxy != nil:
			t.Fatalf("accepted a kubeconfig with a proxy: %q", data)
		case cfg.Impersonate.UserName != "" || cfg.Impersonate.UID != "" || len(cfg.Impersonate.Groups) > 0 || len(cfg.Impersonate.Extra) > 0:
			t.Fatalf("accepted a kubeconfig that impersonates: %q", data)
		case cfg.Username != "" || cfg.Password != "":
			t.Fatalf("accepted a kubeconfig with basic authentication: %q", data)
		case cfg.BearerToken == "" && len(tls.CertData) == 0:
			t.Fatalf("accepted a kubeconfig with no credential: %q", data)
		}
		// Renewing the token keeps the kubeconfig as it was but the token.
		secret := &corev1.Secret{Data: map[string][]byte{"kubeconfig": []byte(data)}}
		renewed, err := withToken(secret, "kubeconfig", token)
		if err != nil {
			return
		}
		kc, err := clientcmd.Load(renewed)
		if err != nil {
			t.Fatalf("the kubeconfig with a renewed token does not load: %v", err)
		}
		if user := kc.AuthInfos[kc.Contexts[kc.CurrentContext].AuthInfo]; user.Token != token {
			t.Fatalf("the renewed kubeconfig has token %q, want %q", user.Token, token)
		}
	})
}

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
			return // --token-renew-after is validated to be within (0, 1)
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
