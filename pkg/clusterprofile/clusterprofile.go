// Package clusterprofile reads a ClusterProfile of SIG-Multicluster's
// Cluster Inventory API (multicluster.x-k8s.io/v1alpha1, as published in
// sigs.k8s.io/cluster-inventory-api v0.1.0) for a ClusterTarget that names
// one: the client configuration of the cluster it stands for, and the
// labels its virtual node carries.
//
// A profile is written by a cluster manager (OCM, Fleet, Clusternet...) or
// by whoever may write ClusterProfiles' status in its namespace, not by the
// agent's admin, so it is peer input and judged as the code will use it:
// the access provider's cluster entry, with the token of the Secret the
// ClusterTarget names, is assembled into a kubeconfig and passed through
// pkg/kubeconfig, the same check every kubeconfig Secret passes. Flotilla
// runs no credential plugin: the inputs the API's access conventions give
// to a consumer's exec plugin (KEP-5339's cluster extensions) address a
// plugin that does not run here and are left out; any other extension, a
// CA file, skipping TLS verification, a proxy or a server that is not
// https is refused.
//
// The types here mirror only the fields Flotilla reads, so the agent does
// not link the API's module and starts in a cluster without its CRD.
package clusterprofile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/pkg/kubeconfig"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// GroupVersionKind of the ClusterProfile.
var GroupVersionKind = schema.GroupVersionKind{Group: "multicluster.x-k8s.io", Version: "v1alpha1", Kind: "ClusterProfile"}

// ClusterProfile is what Flotilla reads of a ClusterProfile.
type ClusterProfile struct {
	Namespace string            `json:"-"`
	Name      string            `json:"-"`
	Labels    map[string]string `json:"-"`
	Status    Status            `json:"status"`
}

// Status is what Flotilla reads of a ClusterProfile's status.
type Status struct {
	// CredentialProviders is the deprecated name of AccessProviders; an
	// entry of AccessProviders of the same name is preferred.
	CredentialProviders []AccessProvider `json:"credentialProviders,omitempty"`
	AccessProviders     []AccessProvider `json:"accessProviders,omitempty"`
	Properties          []Property       `json:"properties,omitempty"`
}

// AccessProvider is a named way to reach the cluster: its server and CA.
type AccessProvider struct {
	Name    string              `json:"name"`
	Cluster clientcmdv1.Cluster `json:"cluster,omitempty"`
}

// Property is a name and value the cluster manager observed of the cluster.
type Property struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Read gets a ClusterProfile. Without the API in the cluster the error is
// a no-match error (meta.IsNoMatchError).
func Read(ctx context.Context, r client.Reader, key client.ObjectKey) (*ClusterProfile, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(GroupVersionKind)
	if err := r.Get(ctx, key, u); err != nil {
		return nil, err
	}
	return FromUnstructured(u)
}

// FromUnstructured reads a ClusterProfile object.
func FromUnstructured(u *unstructured.Unstructured) (*ClusterProfile, error) {
	p := &ClusterProfile{}
	status, _, err := unstructured.NestedFieldNoCopy(u.Object, "status")
	if err != nil {
		return nil, fmt.Errorf("ClusterProfile %s/%s: status: %w", u.GetNamespace(), u.GetName(), err)
	}
	if status != nil {
		data, err := json.Marshal(map[string]any{"status": status})
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(data, p); err != nil {
			return nil, fmt.Errorf("ClusterProfile %s/%s: status: %w", u.GetNamespace(), u.GetName(), err)
		}
	}
	p.Namespace, p.Name, p.Labels = u.GetNamespace(), u.GetName(), u.GetLabels()
	return p, nil
}

// ErrInvalid wraps what makes a profile unusable as written (no such access
// provider, no token); kubeconfig.ErrRefused wraps what Flotilla refuses.
var ErrInvalid = errors.New("ClusterProfile unusable")

// pluginInputs are the cluster extensions through which the Cluster
// Inventory API's access conventions hand data to a consumer's exec
// credential plugin: the plugin's cluster config (KEP-5339's secretreader
// reads the Secret's name from it) and the arguments and environment a
// profile may add to the plugin's command. Flotilla runs no plugin, so
// they are not used; they are dropped rather than refused so that the
// profiles of producers that write them can be used.
var pluginInputs = []string{
	"client.authentication.k8s.io/exec",
	"clusterprofiles.multicluster.x-k8s.io/exec/additional-args",
	"clusterprofiles.multicluster.x-k8s.io/exec/additional-envs",
}

// Access is what a ClusterTarget says of how to reach a profile's cluster.
type Access struct {
	// Provider names the access provider; empty: the profile's only one.
	Provider string
	// Token is the bearer token, from the Secret the ClusterTarget names.
	Token string
	// AllowedServers, when not empty, are the only servers the profile
	// may name.
	AllowedServers []string
}

// Provider returns the access provider of the profile that a names.
func (p *ClusterProfile) Provider(name string) (*AccessProvider, error) {
	byName := map[string]*AccessProvider{}
	for i := range p.Status.CredentialProviders {
		byName[p.Status.CredentialProviders[i].Name] = &p.Status.CredentialProviders[i]
	}
	for i := range p.Status.AccessProviders {
		byName[p.Status.AccessProviders[i].Name] = &p.Status.AccessProviders[i]
	}
	names := slices.Sorted(maps.Keys(byName))
	switch {
	case name != "":
		if ap, ok := byName[name]; ok {
			return ap, nil
		}
		return nil, fmt.Errorf("%w: ClusterProfile %s/%s has no access provider %q (spec.clusterProfileRef.accessProvider); it has %s", ErrInvalid, p.Namespace, p.Name, name, describe(names))
	case len(names) == 1:
		return byName[names[0]], nil
	case len(names) == 0:
		return nil, fmt.Errorf("%w: ClusterProfile %s/%s lists no access provider in status.accessProviders (its cluster manager has not said how to reach the cluster yet)", ErrInvalid, p.Namespace, p.Name)
	}
	return nil, fmt.Errorf("%w: ClusterProfile %s/%s has several access providers (%s): name one in spec.clusterProfileRef.accessProvider", ErrInvalid, p.Namespace, p.Name, describe(names))
}

func describe(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return `"` + strings.Join(names, `", "`) + `"`
}

// Kubeconfig assembles the kubeconfig of the profile's cluster as a names
// it: the access provider's cluster entry as written, less the exec
// plugin's inputs, and a user with the token alone.
func (p *ClusterProfile) Kubeconfig(a Access) ([]byte, error) {
	ap, err := p.Provider(a.Provider)
	if err != nil {
		return nil, err
	}
	if a.Token == "" {
		return nil, fmt.Errorf("%w: the token Secret holds no token", ErrInvalid)
	}
	cluster := *ap.Cluster.DeepCopy()
	cluster.Extensions = slices.DeleteFunc(cluster.Extensions, func(e clientcmdv1.NamedExtension) bool {
		return slices.Contains(pluginInputs, e.Name)
	})
	kc := clientcmdv1.Config{
		Kind: "Config", APIVersion: "v1",
		Clusters:       []clientcmdv1.NamedCluster{{Name: "profile", Cluster: cluster}},
		AuthInfos:      []clientcmdv1.NamedAuthInfo{{Name: "token", AuthInfo: clientcmdv1.AuthInfo{Token: a.Token}}},
		Contexts:       []clientcmdv1.NamedContext{{Name: "profile", Context: clientcmdv1.Context{Cluster: "profile", AuthInfo: "token"}}},
		CurrentContext: "profile",
	}
	return json.Marshal(kc)
}

// RESTConfig is the client configuration of the profile's cluster: the
// kubeconfig Kubeconfig assembles, judged by kubeconfig.RESTConfig, and
// a server among AllowedServers when they are given.
func (p *ClusterProfile) RESTConfig(a Access) (*rest.Config, error) {
	data, err := p.Kubeconfig(a)
	if err != nil {
		return nil, err
	}
	cfg, err := kubeconfig.RESTConfig(data)
	if err != nil {
		return nil, fmt.Errorf("ClusterProfile %s/%s, access provider %q: %w", p.Namespace, p.Name, providerName(p, a), err)
	}
	if len(a.AllowedServers) == 0 {
		return cfg, nil
	}
	got, err := normalServer(cfg.Host)
	if err != nil {
		return nil, fmt.Errorf("ClusterProfile %s/%s: server %q: %w", p.Namespace, p.Name, cfg.Host, err)
	}
	for i, s := range a.AllowedServers {
		want, err := normalServer(s)
		if err != nil {
			return nil, fmt.Errorf("%w: spec.clusterProfileRef.allowedServers[%d] %q: %v", ErrInvalid, i, s, err)
		}
		if got == want {
			return cfg, nil
		}
	}
	return nil, fmt.Errorf("%w: ClusterProfile %s/%s names server %q, which is not in spec.clusterProfileRef.allowedServers (%s): the token would be sent there",
		kubeconfig.ErrRefused, p.Namespace, p.Name, cfg.Host, strings.Join(a.AllowedServers, ", "))
}

func providerName(p *ClusterProfile, a Access) string {
	if ap, err := p.Provider(a.Provider); err == nil {
		return ap.Name
	}
	return a.Provider
}

// normalServer is a server URL as scheme://host:port/path, lower case, with
// the scheme's default port and no trailing slash.
func normalServer(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", err
	}
	if u.Scheme == "" || u.Host == "" {
		return "", errors.New("not a URL with a scheme and a host, such as https://api.example.com:6443")
	}
	scheme := strings.ToLower(u.Scheme)
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = map[string]string{"https": "443", "http": "80"}[scheme]
	}
	return scheme + "://" + net.JoinHostPort(strings.ToLower(host), port) + strings.TrimSuffix(u.EscapedPath(), "/"), nil
}

// NodeLabels are the virtual node's labels a profile gives: its properties
// (status.properties, name as the key), then its own labels, which win.
// A property or label that is not a valid node label, or that is under
// Flotilla's prefix, is skipped; skipped says which and why, sorted.
func (p *ClusterProfile) NodeLabels() (labels map[string]string, skipped []string) {
	labels = map[string]string{}
	add := func(what, key, value string) {
		if strings.HasPrefix(key, protocol.Prefix) || strings.Contains(key, "."+protocol.Prefix) {
			skipped = append(skipped, fmt.Sprintf("%s %q: Flotilla's own keys are set by Flotilla", what, key))
			return
		}
		if errs := validation.IsQualifiedName(key); len(errs) > 0 {
			skipped = append(skipped, fmt.Sprintf("%s %q: not a label key: %s", what, key, strings.Join(errs, "; ")))
			return
		}
		if errs := validation.IsValidLabelValue(value); len(errs) > 0 {
			skipped = append(skipped, fmt.Sprintf("%s %q: value %q is not a label value: %s", what, key, truncate(value), strings.Join(errs, "; ")))
			return
		}
		labels[key] = value
	}
	for _, prop := range p.Status.Properties {
		add("property", prop.Name, prop.Value)
	}
	for _, k := range slices.Sorted(maps.Keys(p.Labels)) {
		add("label", k, p.Labels[k])
	}
	slices.Sort(skipped)
	return labels, skipped
}

func truncate(s string) string {
	if len(s) <= 40 {
		return s
	}
	return s[:40] + "..."
}

// Merge is the virtual node's labels: the profile's, and the
// ClusterTarget's own spec.labels, which win.
func Merge(profile, own map[string]string) map[string]string {
	out := maps.Clone(profile)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, own)
	return out
}
