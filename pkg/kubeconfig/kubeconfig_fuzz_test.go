package kubeconfig

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// FuzzRESTConfig: a kubeconfig is a peer's data. Whatever it holds, the
// caller gets an error or a configuration that connects over verified TLS
// to one server with an inline credential: no command, no file of this
// process's disk, no trust in any server, no proxy, no impersonation. The
// property is asserted on the rest.Config client-go resolved, and by use:
// a request made with every accepted configuration never runs the command
// that the seeds' exec plugins would run (it would create a marker file).
// A token renewed into an accepted kubeconfig keeps it accepted, to the
// same server, with the new token.
func FuzzRESTConfig(f *testing.F) {
	marker := filepath.Join(f.TempDir(), "exec-ran")
	exec := `    exec: {apiVersion: client.authentication.k8s.io/v1, interactiveMode: Never, command: /bin/sh, args: [-c, "touch ` + marker + `"]}` + "\n"
	evil := "- name: %s\n  user:\n" + exec
	for _, seed := range []string{
		good,
		with("    token: abc\n", "    client-certificate-data: Zm9v\n    client-key-data: Zm9v\n"),
		with("    token: abc\n", exec),
		with("    token: abc\n", "    token: abc\n"+exec),
		with("current-context: t", `current-context: ""`) + strings.Replace(evil, "%s", `""`, 1),
		strings.Replace(with("current-context: t", `current-context: ""`), "clusters:\n", "clusters:\n- name: \"\"\n  cluster: {server: https://127.0.0.1:6443}\n", 1) +
			strings.Replace(evil, "%s", `""`, 1),
		with("current-context: t", "current-context: u") + strings.Replace(evil, "%s", "u", 1),
		good + strings.Replace(evil, "%s", "spare", 1),
		with("    token: abc\n", "    tokenFile: /etc/passwd\n"),
		with("    token: abc\n", "    token: abc\n    as: system:admin\n"),
		with("server: https://", "server: http://"),
		with("server: https://127.0.0.1:6443", "server: 127.0.0.1:6443"),
		with("    server: https://127.0.0.1:6443\n", "    server: https://127.0.0.1:6443\n    proxy-url: http://127.0.0.1:3128\n"),
		`{"apiVersion":"v1","kind":"Config","current-context":"t","contexts":[{"name":"t","context":{"cluster":"t","user":"t"}},{"name":"t","context":{"cluster":"u","user":"u"}}],` +
			`"clusters":[{"name":"t","cluster":{"server":"https://a"}},{"name":"u","cluster":{"server":"https://b","insecure-skip-tls-verify":true}}],` +
			`"users":[{"name":"t","user":{"token":"x"}},{"name":"u","user":{"exec":{"command":"sh"}}}]}`,
		"a: &a [x, x, x, x]\nb: &b [*a, *a, *a, *a]\nc: &c [*b, *b, *b, *b]\nd: [*c, *c, *c, *c]\n",
		"", "{}", "null", "[]", strings.Repeat("- ", 5000),
	} {
		f.Add(seed, "renewed-token")
	}
	// Accepted configurations are used against this server, on loopback
	// whatever server they name: the exec plugin, if client-go had one,
	// would run as the request goes out.
	server := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	f.Cleanup(server.Close)

	f.Fuzz(func(t *testing.T, data, token string) {
		cfg, err := RESTConfig([]byte(data))
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
			t.Fatalf("accepted a kubeconfig that reads files: %q", data)
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
		if ok, err := isTLS(cfg); err != nil || !ok {
			t.Fatalf("accepted a kubeconfig that does not speak TLS: %q", data)
		}

		use := rest.CopyConfig(cfg)
		use.Host = server.URL
		use.TLSClientConfig = rest.TLSClientConfig{Insecure: true}
		if len(cfg.CertData) > 0 {
			// The fuzzer's certificate need not parse; the plugin, not the
			// handshake, is what this use is about.
			use.CertData, use.KeyData = nil, nil
		}
		client, err := rest.HTTPClientFor(use)
		if err != nil {
			t.Fatalf("the accepted configuration builds no client: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, server.URL, nil)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatalf("using the accepted kubeconfig ran its exec plugin: %q", data)
		}

		renewed, err := WithToken([]byte(data), token)
		if err != nil {
			t.Fatalf("renewing the token of an accepted kubeconfig: %v", err)
		}
		again, err := RESTConfig(renewed)
		switch {
		case err != nil && token != "":
			t.Fatalf("the kubeconfig with a renewed token is refused: %v", err)
		case err == nil && (again.Host != cfg.Host || string(again.CAData) != string(cfg.CAData) || again.BearerToken != token):
			t.Fatalf("renewed: host %q CA %q token %q, want %q %q %q", again.Host, again.CAData, again.BearerToken, cfg.Host, cfg.CAData, token)
		}
	})
}
