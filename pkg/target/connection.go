package target

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/clusterprofile"
	"github.com/flotilla-dev/flotilla/pkg/kubeconfig"
)

// resolve reads the connection of a target; hash covers everything but the
// token, which is renewed in place.
func (c *Controller) resolve(ctx context.Context, v *view) (cfg *rest.Config, hash, reason string, err error) {
	var profile *clusterprofile.ClusterProfile
	if v.profile != nil {
		// Its labels are the node's: read it first, so that a change
		// of them changes the hash.
		if profile, reason, err = c.readProfile(ctx, v); err != nil {
			return nil, "", reason, err
		}
	}
	h := sha256.New()
	fmt.Fprintf(h, "%t\x00%s\x00", v.self, v.namespace)
	for _, k := range slices.Sorted(maps.Keys(v.labels)) {
		fmt.Fprintf(h, "l\x00%s\x00%s\x00", k, v.labels[k])
	}
	for _, k := range slices.Sorted(maps.Keys(v.mapping)) {
		fmt.Fprintf(h, "m\x00%s\x00%s\x00", k, v.mapping[k])
	}
	// A change of the pod networks starts the virtual node again, which
	// looks at every pod of it: IPs appear or go at once.
	for _, cidr := range slices.Sorted(slices.Values(v.podCIDRs)) {
		fmt.Fprintf(h, "c\x00%s\x00", cidr)
	}
	if v.self {
		return c.Self, hex.EncodeToString(h.Sum(nil)), "", nil
	}
	secret := &corev1.Secret{}
	if err := c.Reader.Get(ctx, v.secret, secret); err != nil {
		switch {
		case apierrors.IsNotFound(err):
			return nil, "", v1alpha1.ReasonSecretNotFound, fmt.Errorf("Secret %s not found", v.secret)
		case apierrors.IsForbidden(err):
			return nil, "", v1alpha1.ReasonSecretForbidden, fmt.Errorf("the agent may not read Secret %s: %w", v.secret, err)
		}
		return nil, "", v1alpha1.ReasonSecretNotFound, fmt.Errorf("reading Secret %s: %w", v.secret, err)
	}
	key := v.secretKey
	if key == "" {
		key = "kubeconfig"
	}
	data, ok := secret.Data[key]
	switch {
	case !ok && profile != nil:
		return nil, "", v1alpha1.ReasonClusterProfileInvalid, fmt.Errorf("the token Secret %s of ClusterProfile %s/%s has no key %q", v.secret, profile.Namespace, profile.Name, key)
	case !ok:
		return nil, "", v1alpha1.ReasonKubeconfigInvalid, fmt.Errorf("Secret %s has no key %q", v.secret, key)
	case profile != nil:
		cfg, err = profile.RESTConfig(clusterprofile.Access{
			Provider: v.profile.AccessProvider, Token: strings.TrimSpace(string(data)), AllowedServers: v.profile.AllowedServers,
		})
		if err != nil {
			reason = v1alpha1.ReasonClusterProfileInvalid
			if errors.Is(err, kubeconfig.ErrRefused) {
				reason = v1alpha1.ReasonClusterProfileRefused
			}
			return nil, "", reason, fmt.Errorf("%w (token from Secret %s)", err, v.secret)
		}
	default:
		cfg, err = kubeconfig.RESTConfig(data)
	}
	if err != nil {
		reason = v1alpha1.ReasonKubeconfigInvalid
		if errors.Is(err, kubeconfig.ErrRefused) {
			reason = v1alpha1.ReasonKubeconfigRefused
		}
		return nil, "", reason, fmt.Errorf("Secret %s: %w", v.secret, err)
	}
	v.secretObj, v.secretKey = secret, key
	if name, ok := secret.Data[SummaryKey]; ok {
		v.summary = string(name)
		fmt.Fprintf(h, "s\x00%s\x00", v.summary)
	}
	cfg.QPS, cfg.Burst = c.Self.QPS, c.Self.Burst
	cfg.ContentType, cfg.AcceptContentTypes = c.Self.ContentType, c.Self.AcceptContentTypes
	fmt.Fprintf(h, "%s\x00%s\x00%x\x00%x\x00%x\x00", cfg.Host, cfg.ServerName, cfg.CAData, cfg.CertData, cfg.KeyData)
	return cfg, hex.EncodeToString(h.Sum(nil)), "", nil
}

// readProfile reads the ClusterProfile v names and makes its labels the
// node's, under the ClusterTarget's own.
func (c *Controller) readProfile(ctx context.Context, v *view) (*clusterprofile.ClusterProfile, string, error) {
	key := client.ObjectKey{Namespace: v.profile.Namespace, Name: v.profile.Name}
	p, err := clusterprofile.Read(ctx, c.Reader, key)
	if err != nil {
		switch {
		case meta.IsNoMatchError(err):
			return nil, v1alpha1.ReasonClusterProfileAPIMissing, fmt.Errorf("this cluster serves no ClusterProfile API (%s): install the Cluster Inventory API's CRD, or name a kubeconfig Secret instead", clusterprofile.GroupVersionKind.GroupVersion())
		case apierrors.IsNotFound(err):
			return nil, v1alpha1.ReasonClusterProfileNotFound, fmt.Errorf("ClusterProfile %s not found", key)
		case apierrors.IsForbidden(err):
			return nil, v1alpha1.ReasonForbidden, fmt.Errorf("the agent may not read ClusterProfile %s: %w", key, err)
		}
		return nil, v1alpha1.ReasonClusterProfileInvalid, fmt.Errorf("reading ClusterProfile %s: %w", key, err)
	}
	labels, skipped := p.NodeLabels()
	v.labels = clusterprofile.Merge(labels, v.labels)
	provider, err := p.Provider(v.profile.AccessProvider)
	if err != nil {
		return nil, v1alpha1.ReasonClusterProfileInvalid, err
	}
	v.read = fmt.Sprintf("Reached through ClusterProfile %s (access provider %q), with the token of Secret %s", key, provider.Name, v.secret)
	if len(skipped) > 0 {
		v.read += "; not made node labels: " + strings.Join(skipped, ", ")
	}
	return p, "", nil
}
