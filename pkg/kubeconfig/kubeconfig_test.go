package kubeconfig

import (
	"errors"
	"strings"
	"testing"
)

// good is a kubeconfig as a target's agent writes it.
const good = `apiVersion: v1
kind: Config
current-context: t
contexts:
- name: t
  context: {cluster: t, user: t}
clusters:
- name: t
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority-data: Zm9v
users:
- name: t
  user:
    token: abc
`

// evilUser is a user entry that runs a command.
const evilUser = `- name: %q
  user:
    exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh, args: [-c, "touch /tmp/pwned"], interactiveMode: Never}
`

func with(old, new string) string { return strings.Replace(good, old, new, 1) }

func TestRESTConfig(t *testing.T) {
	cfg, err := RESTConfig([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://127.0.0.1:6443" || cfg.BearerToken != "abc" || string(cfg.CAData) != "foo" {
		t.Fatalf("got host %q token %q CA %q", cfg.Host, cfg.BearerToken, cfg.CAData)
	}
	certUser := with("    token: abc\n", "    client-certificate-data: Zm9v\n    client-key-data: Zm9v\n")
	if cfg, err := RESTConfig([]byte(certUser)); err != nil || len(cfg.CertData) == 0 {
		t.Fatalf("a client certificate: %v", err)
	}

	for _, tc := range []struct {
		name, data string
		refused    bool // ErrRefused, rather than a plain error
	}{
		{"garbled", "{{{ not yaml", false},
		{"no credential", with("    token: abc\n", "    {}\n"), false},
		{"a certificate without its key", with("    token: abc\n", "    client-certificate-data: Zm9v\n"), false},
		{"no server", with("    server: https://127.0.0.1:6443\n", ""), false},
		{"current context missing", with("current-context: t", "current-context: nope"), false},
		{"context names a missing user", with("context: {cluster: t, user: t}", "context: {cluster: t, user: u}"), false},
		{"exec plugin", with("    token: abc\n", "    exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh}\n"), true},
		{"token file", with("    token: abc\n", "    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token\n"), true},
		{"token file beside a token", with("    token: abc\n", "    token: abc\n    tokenFile: /etc/passwd\n"), true},
		{"client cert file", with("    token: abc\n", "    client-certificate: /etc/key.pem\n    client-key: /etc/key.pem\n"), true},
		{"auth provider", with("    token: abc\n", "    auth-provider: {name: gcp}\n"), true},
		{"basic auth", with("    token: abc\n", "    username: a\n    password: b\n"), true},
		{"impersonation", with("    token: abc\n", "    token: abc\n    as: system:admin\n"), true},
		{"impersonated group", with("    token: abc\n", "    token: abc\n    as-groups: [system:masters]\n"), true},
		{"insecure", with("certificate-authority-data: Zm9v", "insecure-skip-tls-verify: true"), true},
		{"CA file", with("certificate-authority-data: Zm9v", "certificate-authority: /etc/ca.pem"), true},
		{"proxy", with("    server: https://127.0.0.1:6443\n", "    server: https://127.0.0.1:6443\n    proxy-url: http://127.0.0.1:3128\n"), true},
		{"plain http", with("server: https://", "server: http://"), true},
		{"exec config in a cluster extension", with("    server: https://127.0.0.1:6443\n",
			"    server: https://127.0.0.1:6443\n    extensions:\n    - name: client.authentication.k8s.io/exec\n      extension: {a: b}\n"), true},

		// What client-go uses is not what a reader of the current context
		// sees: an empty current-context resolves to the entries named "".
		{"empty current-context falls to the entries named \"\"", strings.Replace(with("current-context: t", `current-context: ""`),
			"clusters:\n", "clusters:\n- name: \"\"\n  cluster: {server: https://127.0.0.1:6443}\n", 1) +
			strings.Replace(evilUser, "%q", `""`, 1), true},
		{"an unused user runs a command", good + strings.Replace(evilUser, "%q", `"spare"`, 1), true},
		{"an unused cluster reads a file", with("clusters:\n", "clusters:\n- name: spare\n  cluster: {server: https://x, certificate-authority: /etc/shadow}\n"), true},
		{"two users of one name, the second runs a command", good + strings.Replace(evilUser, "%q", `"t"`, 1), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := RESTConfig([]byte(tc.data))
			if err == nil {
				t.Fatal("accepted")
			}
			if got := errors.Is(err, ErrRefused); got != tc.refused {
				t.Fatalf("refused=%v, want %v: %v", got, tc.refused, err)
			}
		})
	}
}

func TestWithToken(t *testing.T) {
	renewed, err := WithToken([]byte(good), "fresh")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := RESTConfig(renewed)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.BearerToken != "fresh" || cfg.Host != "https://127.0.0.1:6443" || string(cfg.CAData) != "foo" {
		t.Fatalf("renewed: host %q token %q CA %q", cfg.Host, cfg.BearerToken, cfg.CAData)
	}
}
