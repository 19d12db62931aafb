package target

import (
	"errors"
	"strings"
	"testing"
)

const goodKubeconfig = `apiVersion: v1
kind: Config
current-context: t
contexts:
- name: t
  context: {cluster: t, user: t}
clusters:
- name: t
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority-data: %s
users:
- name: t
  user:
%s
`

func kubeconfigWith(ca, user string) []byte {
	if ca == "" {
		ca = "Zm9v"
	}
	return []byte(strings.Replace(strings.Replace(goodKubeconfig, "%s", ca, 1), "%s", user, 1))
}

func TestRESTConfigFromKubeconfig(t *testing.T) {
	cfg, err := RESTConfigFromKubeconfig(kubeconfigWith("", "    token: abc"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://127.0.0.1:6443" || cfg.BearerToken != "abc" {
		t.Fatalf("got host %q token %q", cfg.Host, cfg.BearerToken)
	}
	for _, tc := range []struct {
		name, data string
		refused    bool
	}{
		{"garbled", "{{{ not yaml", false},
		{"no user credential", string(kubeconfigWith("", "    {}")), false},
		{"exec plugin", string(kubeconfigWith("", "    exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh}")), true},
		{"token file", string(kubeconfigWith("", "    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token")), true},
		{"client cert file", string(kubeconfigWith("", "    client-certificate: /etc/key.pem\n    client-key: /etc/key.pem")), true},
		{"auth provider", string(kubeconfigWith("", "    auth-provider: {name: gcp}")), true},
		{"basic auth", string(kubeconfigWith("", "    username: a\n    password: b")), true},
		{"insecure", strings.Replace(string(kubeconfigWith("", "    token: abc")), "certificate-authority-data: Zm9v", "insecure-skip-tls-verify: true", 1), true},
		{"CA file", strings.Replace(string(kubeconfigWith("", "    token: abc")), "certificate-authority-data: Zm9v", "certificate-authority: /etc/ca.pem", 1), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := RESTConfigFromKubeconfig([]byte(tc.data))
			if err == nil {
				t.Fatal("accepted")
			}
			if got := errors.Is(err, ErrKubeconfigRefused); got != tc.refused {
				t.Fatalf("refused=%v, want %v: %v", got, tc.refused, err)
			}
		})
	}
}
