package invitation

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// ensureServiceAccount makes a managed ServiceAccount. It has no rights
// until apply grants them.
func (c *Controller) ensureServiceAccount(ctx context.Context, inv Invitation) error {
	if inv.Spec.Identity.ManagedServiceAccount == nil {
		return nil
	}
	ns, name := inv.ServiceAccount()
	sa := &corev1.ServiceAccount{ObjectMeta: inv.meta(ns)}
	sa.Name = name
	if err := c.Client.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ServiceAccount %s/%s: %w", ns, name, err)
	}
	return nil
}

// apiAudiences are the audiences this API server gives a token whose
// request names none: the admission policy lets the identity ask for
// those only. The API server fills them into a TokenRequest before
// admission sees it, and tells them in its answer, so the agent learns
// them from a token it requests, once: they change only with the API
// server's flags, and each kubeconfig token refreshes them (learn). The
// first is a short token of the invited ServiceAccount, which has no
// rights yet and is thrown away. Nil when there is no ServiceAccount to
// ask with yet: the policy then refuses every token request.
func (c *Controller) apiAudiences(ctx context.Context, inv Invitation) []string {
	c.audiencesMu.Lock()
	known := c.audiences
	c.audiencesMu.Unlock()
	if known != nil {
		return known
	}
	ns, name := inv.ServiceAccount()
	if name == "" {
		return nil
	}
	tr, err := c.Kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(v1alpha1.MinTokenLifetime.Seconds()))},
	}, metav1.CreateOptions{})
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Could not learn the API server's token audiences yet", "serviceAccount", klog.KRef(ns, name), "err", err)
		return nil
	}
	c.learn(tr.Spec.Audiences)
	return tr.Spec.Audiences
}

// learn keeps the audiences the API server gave a token that asked for
// none.
func (c *Controller) learn(audiences []string) {
	if len(audiences) == 0 {
		return
	}
	c.audiencesMu.Lock()
	c.audiences = slices.Clone(audiences)
	c.audiencesMu.Unlock()
}

// ensureKubeconfig writes, beside a managed ServiceAccount, a kubeconfig for
// it with a token of TokenTTL, or of the invitation's longest token when
// that is shorter, renewed here once half of it has passed, so that a
// source joining late still gets a valid one. The source renews its own
// copy itself, for the lifetime of the token it holds: one the policy
// accepts.
func (c *Controller) ensureKubeconfig(ctx context.Context, inv Invitation) error {
	ns, name := inv.ServiceAccount()
	life := min(c.TokenTTL, inv.Spec.TokenLifetime())
	secret := &corev1.Secret{}
	err := c.Reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: inv.KubeconfigSecretName()}, secret)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if err == nil {
		if exp, ok := secret.Annotations[protocol.InvitationExpiresAnnotation]; ok {
			if t, perr := time.Parse(time.RFC3339, exp); perr == nil && t.Sub(c.now()) > life/2 {
				return nil
			}
		}
	}
	ttl := int64(life.Seconds())
	tr, terr := c.Kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &ttl},
	}, metav1.CreateOptions{})
	if terr != nil {
		return fmt.Errorf("requesting a token for ServiceAccount %s/%s: %w", ns, name, terr)
	}
	c.learn(tr.Spec.Audiences)
	data, kerr := Kubeconfig(c.Server, c.CAData, tr.Status.Token, inv.Namespaces)
	if kerr != nil {
		return kerr
	}
	want := &corev1.Secret{ObjectMeta: inv.meta(ns)}
	want.Name = inv.KubeconfigSecretName()
	want.Annotations = map[string]string{protocol.InvitationExpiresAnnotation: tr.Status.ExpirationTimestamp.UTC().Format(time.RFC3339)}
	want.Data = map[string][]byte{protocol.InvitationKubeconfigKey: data, protocol.InvitationSummaryKey: []byte(inv.SummaryName())}
	if apierrors.IsNotFound(err) {
		return c.Client.Create(ctx, want)
	}
	want.ResourceVersion = secret.ResourceVersion
	return c.Client.Update(ctx, want)
}

// Keys of the kubeconfig Secret a source receives, spelled in pkg/protocol
// (the invitation handshake) and named here too for the agent's tests.
const (
	// KubeconfigKey is protocol.InvitationKubeconfigKey.
	KubeconfigKey = protocol.InvitationKubeconfigKey
	// SummaryKey is protocol.InvitationSummaryKey.
	SummaryKey = protocol.InvitationSummaryKey
	// ExpiresAnnotation is protocol.InvitationExpiresAnnotation.
	ExpiresAnnotation = protocol.InvitationExpiresAnnotation
)

// Kubeconfig renders a kubeconfig for a source. Its context's namespace is
// the first invited one.
func Kubeconfig(server string, caData []byte, token string, namespaces []string) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["target"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caData}
	cfg.AuthInfos["source"] = &clientcmdapi.AuthInfo{Token: token}
	ctx := &clientcmdapi.Context{Cluster: "target", AuthInfo: "source"}
	if len(namespaces) > 0 {
		ctx.Namespace = namespaces[0]
	}
	cfg.Contexts["target"] = ctx
	cfg.CurrentContext = "target"
	return clientcmd.Write(*cfg)
}

// ServerOf is what a kubeconfig for sources says about this cluster when
// no address is configured: the agent's own connection.
func ServerOf(cfg *rest.Config) (string, []byte, error) {
	ca := cfg.CAData
	if len(ca) == 0 && cfg.CAFile != "" {
		var err error
		if ca, err = os.ReadFile(cfg.CAFile); err != nil {
			return "", nil, fmt.Errorf("reading the API server's CA %s: %w", cfg.CAFile, err)
		}
	}
	return cfg.Host, ca, nil
}
