// Package kubeconfig judges a kubeconfig that a peer handed over (the
// kubeconfig Secret of a Target or ClusterTarget, the file given to
// `kubectl flotilla join`) and turns it into a client configuration.
//
// A kubeconfig is data written by someone else: the target's admin, or a
// tenant who may write a Secret and a Target in one namespace. The only
// thing it may make the reader do is "connect to this server, verified by
// this CA, with this inline credential". It is judged as client-go will use
// it, not as it is written: client-go resolves the current context, falls
// back to empty names, merges fields, reads files and opens them while it
// validates, and runs exec plugins when a request goes out. So the check is
// made twice:
//
//  1. before client-go sees the file, on every cluster and user it holds
//     (not only the ones the current context names): nothing anywhere in it
//     may name a file, a command, a plugin, a proxy or an impersonation, so
//     that resolving it cannot touch the disk or run anything whichever
//     entry client-go ends up using;
//  2. after client-go resolved it, on the rest.Config the caller gets: a
//     TLS connection to one server with an inline bearer token or client
//     certificate, and nothing else.
//
// This package imports no agent package, so the kubectl plugin links it
// alone.
package kubeconfig

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ErrRefused wraps what a kubeconfig asks that Flotilla will not do: run a
// command, read a file of its own disk, trust any server, go through a
// proxy, impersonate, or authenticate otherwise than with an inline token
// or client certificate.
var ErrRefused = errors.New("kubeconfig refused")

// RESTConfig reads a peer's kubeconfig (its current context) into the
// client configuration client-go resolves from it, or refuses it.
func RESTConfig(data []byte) (*rest.Config, error) {
	kc, err := clientcmd.Load(data)
	if err != nil {
		return nil, fmt.Errorf("parsing kubeconfig: %w", err)
	}
	if err := checkEntries(kc); err != nil {
		return nil, err
	}
	if err := checkCurrent(kc); err != nil {
		return nil, err
	}
	// No configAccess: nothing client-go resolves may be persisted to a
	// file of this process's disk; no fallback reader: nothing prompts.
	cfg, err := clientcmd.NewNonInteractiveClientConfig(*kc, "", &clientcmd.ConfigOverrides{}, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("reading kubeconfig: %w", err)
	}
	if err := Check(cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

func refuse(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrRefused, fmt.Sprintf(format, args...))
}

// checkEntries refuses a kubeconfig any of whose clusters or users names a
// file, a command, a plugin, a proxy or an impersonation, whether or not
// the current context uses it: client-go opens the files it names while it
// validates, and which entry it uses is decided by rules (an empty or
// missing current context, empty names) that a check of "the current
// context" easily reads otherwise.
func checkEntries(kc *clientcmdapi.Config) error {
	for _, name := range slices.Sorted(maps.Keys(kc.Clusters)) {
		c := kc.Clusters[name]
		if c == nil {
			continue
		}
		switch {
		case c.CertificateAuthority != "":
			return refuse("cluster %q: certificate-authority is a file path; use certificate-authority-data", name)
		case c.InsecureSkipTLSVerify:
			return refuse("cluster %q: insecure-skip-tls-verify would trust any server", name)
		case c.ProxyURL != "":
			return refuse("cluster %q: proxy-url is not supported", name)
		case len(c.Extensions) > 0:
			return refuse("cluster %q: extensions are not supported (they configure exec plugins)", name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(kc.AuthInfos)) {
		u := kc.AuthInfos[name]
		if u == nil {
			continue
		}
		switch {
		case u.Exec != nil:
			return refuse("user %q: exec plugins run commands; Flotilla never runs a peer's command", name)
		case u.AuthProvider != nil:
			return refuse("user %q: auth-provider plugins are not supported", name)
		case u.TokenFile != "":
			return refuse("user %q: tokenFile is a file path; put the token in the kubeconfig", name)
		case u.ClientCertificate != "" || u.ClientKey != "":
			return refuse("user %q: client-certificate and client-key are file paths; use client-certificate-data and client-key-data", name)
		case u.Username != "" || u.Password != "":
			return refuse("user %q: basic authentication is not supported", name)
		case u.Impersonate != "" || len(u.ImpersonateGroups) > 0 || u.ImpersonateUID != "" || len(u.ImpersonateUserExtra) > 0:
			return refuse("user %q: impersonation is not supported", name)
		case len(u.Extensions) > 0:
			return refuse("user %q: extensions are not supported", name)
		}
	}
	return nil
}

// checkCurrent asks that the current context, its cluster and its user
// exist by the names written. client-go would quietly use empty entries
// (or entries named "") where they do not; a kubeconfig that relies on
// that is refused, so that what a reader of the file sees is what is used.
func checkCurrent(kc *clientcmdapi.Config) error {
	ctx, ok := kc.Contexts[kc.CurrentContext]
	if !ok || ctx == nil {
		return fmt.Errorf("parsing kubeconfig: current-context %q names no context", kc.CurrentContext)
	}
	if _, ok := kc.Clusters[ctx.Cluster]; !ok {
		return fmt.Errorf("parsing kubeconfig: context %q names cluster %q, which it does not define", kc.CurrentContext, ctx.Cluster)
	}
	if _, ok := kc.AuthInfos[ctx.AuthInfo]; !ok {
		return fmt.Errorf("parsing kubeconfig: context %q names user %q, which it does not define", kc.CurrentContext, ctx.AuthInfo)
	}
	return nil
}

// Check judges a resolved client configuration: a TLS connection, verified,
// to one server, with an inline bearer token or client certificate and key,
// and nothing that runs a command, reads a file, proxies, impersonates or
// replaces the transport.
func Check(cfg *rest.Config) error {
	tls := cfg.TLSClientConfig
	switch {
	case cfg.Host == "":
		return errors.New("parsing kubeconfig: the cluster has no server")
	case cfg.ExecProvider != nil:
		return refuse("exec plugins run commands; Flotilla never runs a peer's command")
	case cfg.AuthProvider != nil || cfg.AuthConfigPersister != nil:
		return refuse("auth-provider plugins are not supported")
	case cfg.BearerTokenFile != "" || tls.CAFile != "" || tls.CertFile != "" || tls.KeyFile != "":
		return refuse("the configuration reads files; every credential and CA must be inline")
	case tls.Insecure:
		return refuse("insecure-skip-tls-verify would trust any server")
	case cfg.Proxy != nil:
		return refuse("proxies are not supported")
	case cfg.Impersonate.UserName != "" || cfg.Impersonate.UID != "" || len(cfg.Impersonate.Groups) > 0 || len(cfg.Impersonate.Extra) > 0:
		return refuse("impersonation is not supported")
	case cfg.Username != "" || cfg.Password != "":
		return refuse("basic authentication is not supported")
	case cfg.Transport != nil || cfg.WrapTransport != nil || cfg.Dial != nil:
		return refuse("a custom transport is not supported")
	}
	tlsTransport, err := isTLS(cfg)
	if err != nil {
		return fmt.Errorf("parsing kubeconfig: server %q: %w", cfg.Host, err)
	}
	if !tlsTransport {
		return refuse("server %q is not https: the credential would cross the network in clear", cfg.Host)
	}
	if cfg.BearerToken == "" && (len(tls.CertData) == 0 || len(tls.KeyData) == 0) {
		return errors.New("parsing kubeconfig: the user has no token and no client certificate with its key")
	}
	return nil
}

// isTLS reports whether client-go will speak TLS to the configured server.
func isTLS(cfg *rest.Config) (bool, error) {
	u, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		return false, err
	}
	return strings.EqualFold(u.Scheme, "https"), nil
}

// WithToken returns kubeconfig data with the current context's user token
// replaced: the user RESTConfig reads the credential from. The data must
// be one RESTConfig accepts.
func WithToken(data []byte, token string) ([]byte, error) {
	kc, err := clientcmd.Load(data)
	if err != nil {
		return nil, err
	}
	if err := checkCurrent(kc); err != nil {
		return nil, err
	}
	user := kc.AuthInfos[kc.Contexts[kc.CurrentContext].AuthInfo]
	if user == nil {
		return nil, errors.New("parsing kubeconfig: the current context's user is empty")
	}
	user.Token = token
	return clientcmd.Write(*kc)
}
