package target

import (
	"errors"
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ErrKubeconfigRefused wraps what a kubeconfig asks that the agent will not
// do: run a command, read a file of its own disk, or trust any server.
var ErrKubeconfigRefused = errors.New("kubeconfig refused")

// RESTConfigFromKubeconfig reads a peer's kubeconfig (its current context).
// A kubeconfig is data a peer handed over, so everything that would make the
// agent act beyond "connect to this server with this credential" is
// refused: exec plugins and auth providers (commands, cloud SDKs), paths to
// files (token, certificates, CA), skipping TLS verification, proxies,
// impersonation and basic auth.
func RESTConfigFromKubeconfig(data []byte) (*rest.Config, error) {
	kc, err := clientcmd.Load(data)
	if err != nil {
		return nil, fmt.Errorf("parsing kubeconfig: %w", err)
	}
	if err := checkKubeconfig(kc); err != nil {
		return nil, err
	}
	cfg, err := clientcmd.NewDefaultClientConfig(*kc, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("reading kubeconfig: %w", err)
	}
	return cfg, nil
}

func checkKubeconfig(kc *clientcmdapi.Config) error {
	name := kc.CurrentContext
	if name == "" && len(kc.Contexts) == 1 {
		for n := range kc.Contexts {
			name = n
		}
	}
	ctx, ok := kc.Contexts[name]
	if !ok {
		return fmt.Errorf("parsing kubeconfig: no current context %q", name)
	}
	cluster, ok := kc.Clusters[ctx.Cluster]
	if !ok {
		return fmt.Errorf("parsing kubeconfig: context %q names cluster %q, which it does not define", name, ctx.Cluster)
	}
	user, ok := kc.AuthInfos[ctx.AuthInfo]
	if !ok {
		return fmt.Errorf("parsing kubeconfig: context %q names user %q, which it does not define", name, ctx.AuthInfo)
	}
	refuse := func(what string) error { return fmt.Errorf("%w: %s", ErrKubeconfigRefused, what) }
	switch {
	case cluster.Server == "":
		return fmt.Errorf("parsing kubeconfig: cluster %q has no server", ctx.Cluster)
	case cluster.CertificateAuthority != "":
		return refuse("certificate-authority is a file path; use certificate-authority-data")
	case cluster.InsecureSkipTLSVerify:
		return refuse("insecure-skip-tls-verify would trust any server")
	case cluster.ProxyURL != "":
		return refuse("proxy-url is not supported")
	case user.Exec != nil:
		return refuse("exec plugins run commands; the agent never runs a peer's command")
	case user.AuthProvider != nil:
		return refuse("auth-provider plugins are not supported")
	case user.TokenFile != "":
		return refuse("tokenFile is a file path; put the token in the kubeconfig")
	case user.ClientCertificate != "" || user.ClientKey != "":
		return refuse("client-certificate and client-key are file paths; use client-certificate-data and client-key-data")
	case user.Username != "" || user.Password != "":
		return refuse("basic authentication is not supported")
	case user.Impersonate != "" || len(user.ImpersonateGroups) > 0 || user.ImpersonateUID != "" || len(user.ImpersonateUserExtra) > 0:
		return refuse("impersonation is not supported")
	case user.Token == "" && len(user.ClientCertificateData) == 0:
		return fmt.Errorf("parsing kubeconfig: user %q has no token and no client certificate", ctx.AuthInfo)
	}
	return nil
}
