package clusterprofile

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/pkg/kubeconfig"
)

// profileOf reads a ClusterProfile written as its producer writes it.
func profileOf(t *testing.T, doc string) *ClusterProfile {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
		t.Fatal(err)
	}
	p, err := FromUnstructured(u)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// good is a profile as a cluster manager following the secretreader
// convention writes it: the exec plugin's cluster config names the Secret.
const good = `apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ClusterProfile
metadata:
  name: spoke-1
  namespace: fleet
  labels:
    x-k8s.io/cluster-manager: ocm
    region: eu-west
spec:
  clusterManager: {name: ocm}
status:
  accessProviders:
  - name: secretreader
    cluster:
      server: https://spoke-1.example.com:6443
      certificate-authority-data: Zm9v
      extensions:
      - name: client.authentication.k8s.io/exec
        extension: {clusterName: spoke-1}
      - name: clusterprofiles.multicluster.x-k8s.io/exec/additional-args
        extension: ["--exec", "/bin/sh"]
      - name: clusterprofiles.multicluster.x-k8s.io/exec/additional-envs
        extension: {LD_PRELOAD: /tmp/evil.so}
  properties:
  - {name: zone, value: eu-west-1a}
  - {name: region, value: eu-central}
`

func with(old, new string) string {
	if !strings.Contains(good, old) {
		panic("not in good: " + old)
	}
	return strings.Replace(good, old, new, 1)
}

func TestRESTConfig(t *testing.T) {
	for _, tc := range []struct {
		name    string
		profile string
		access  Access
		// host is the server of an accepted profile; otherwise err is
		// the error's class and why a word of its message.
		host string
		err  error
		why  string
	}{
		{name: "secretreader convention: server and CA from the provider, plugin inputs unused", profile: good,
			access: Access{Token: "tok"}, host: "https://spoke-1.example.com:6443"},
		{name: "the provider named", profile: good,
			access: Access{Provider: "secretreader", Token: "tok"}, host: "https://spoke-1.example.com:6443"},
		{name: "a deprecated credentialProviders entry", profile: with("  accessProviders:", "  credentialProviders:"),
			access: Access{Token: "tok"}, host: "https://spoke-1.example.com:6443"},
		{name: "accessProviders win over credentialProviders of the same name",
			profile: with("  properties:", "  credentialProviders:\n  - name: secretreader\n    cluster: {server: 'https://old.example.com'}\n  properties:"),
			access:  Access{Token: "tok"}, host: "https://spoke-1.example.com:6443"},
		{name: "allowed server, default port and case normalized",
			profile: with("https://spoke-1.example.com:6443", "https://Spoke-1.example.com"),
			access:  Access{Token: "tok", AllowedServers: []string{"https://other.example.com", "https://spoke-1.example.com:443/"}}, host: "https://Spoke-1.example.com"},

		{name: "no token", profile: good, access: Access{}, err: ErrInvalid, why: "no token"},
		{name: "a provider it does not have", profile: good, access: Access{Provider: "kubelogin", Token: "tok"}, err: ErrInvalid, why: `"kubelogin"`},
		{name: "no provider yet", profile: strings.Split(good, "status:")[0], access: Access{Token: "tok"}, err: ErrInvalid, why: "no access provider"},
		{name: "several providers and none named",
			profile: with("  properties:", "  - name: token\n    cluster: {server: 'https://b.example.com'}\n  properties:"),
			access:  Access{Token: "tok"}, err: ErrInvalid, why: "several access providers"},
		{name: "an allowed server that is no URL", profile: good, access: Access{Token: "tok", AllowedServers: []string{"spoke-1.example.com"}}, err: ErrInvalid, why: "allowedServers[0]"},

		{name: "plain http: the token in clear", profile: with("https://spoke-1.example.com:6443", "http://spoke-1.example.com:6443"),
			access: Access{Token: "tok"}, err: kubeconfig.ErrRefused, why: "not https"},
		{name: "host:port without a scheme, which client-go does not read as https", profile: with("https://spoke-1.example.com:6443", "spoke-1.example.com:80"),
			access: Access{Token: "tok"}, err: kubeconfig.ErrRefused, why: "not https"},
		{name: "TLS not verified", profile: with("      certificate-authority-data: Zm9v\n", "      insecure-skip-tls-verify: true\n"),
			access: Access{Token: "tok"}, err: kubeconfig.ErrRefused, why: "insecure-skip-tls-verify"},
		{name: "the agent's own CA file", profile: with("      certificate-authority-data: Zm9v\n", "      certificate-authority: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt\n"),
			access: Access{Token: "tok"}, err: kubeconfig.ErrRefused, why: "file path"},
		{name: "a proxy", profile: with("      certificate-authority-data: Zm9v\n", "      certificate-authority-data: Zm9v\n      proxy-url: http://attacker.example.com:3128\n"),
			access: Access{Token: "tok"}, err: kubeconfig.ErrRefused, why: "proxy"},
		{name: "another extension", profile: with("      - name: client.authentication.k8s.io/exec\n", "      - name: example.com/exec-elsewhere\n"),
			access: Access{Token: "tok"}, err: kubeconfig.ErrRefused, why: "extensions"},
		{name: "a server outside allowedServers", profile: with("https://spoke-1.example.com:6443", "https://attacker.example.com:6443"),
			access: Access{Token: "tok", AllowedServers: []string{"https://spoke-1.example.com:6443"}}, err: kubeconfig.ErrRefused, why: "allowedServers"},
		{name: "the allowed host on another port", profile: good,
			access: Access{Token: "tok", AllowedServers: []string{"https://spoke-1.example.com"}}, err: kubeconfig.ErrRefused, why: "allowedServers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := profileOf(t, tc.profile).RESTConfig(tc.access)
			if tc.err == nil {
				if err != nil {
					t.Fatal(err)
				}
				if cfg.Host != tc.host || cfg.BearerToken != "tok" || string(cfg.CAData) != "foo" || cfg.ExecProvider != nil || cfg.Proxy != nil {
					t.Fatalf("got host %q token %q CA %q exec %v proxy %v", cfg.Host, cfg.BearerToken, cfg.CAData, cfg.ExecProvider, cfg.Proxy != nil)
				}
				return
			}
			if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.why) {
				t.Fatalf("got %v (config %+v), want %v saying %q", err, cfg, tc.err, tc.why)
			}
			if tc.err == ErrInvalid && errors.Is(err, kubeconfig.ErrRefused) {
				t.Fatalf("%v: both invalid and refused", err)
			}
		})
	}
}

func TestNodeLabels(t *testing.T) {
	for _, tc := range []struct {
		name    string
		profile string
		want    map[string]string
		skipped []string // a word of each skipped entry, in order
	}{
		{name: "properties, and the profile's labels win", profile: good, want: map[string]string{
			"x-k8s.io/cluster-manager": "ocm", "region": "eu-west", "zone": "eu-west-1a",
		}},
		{name: "a label of the profile under Flotilla's prefix is skipped",
			profile: with("    region: eu-west\n", "    region: eu-west\n    multicluster.flotilla.dev/target: forged\n"),
			want: map[string]string{
				"x-k8s.io/cluster-manager": "ocm", "region": "eu-west", "zone": "eu-west-1a",
			},
			skipped: []string{`label "multicluster.flotilla.dev/target": Flotilla's own`}},
		{name: "what is no label is skipped with its reason",
			profile: with("  - {name: zone, value: eu-west-1a}\n",
				"  - {name: zone, value: eu-west-1a}\n"+
					"  - {name: 'bad key!', value: x}\n"+
					"  - {name: cpu, value: '4 cores, 16 GiB'}\n"+
					"  - {name: multicluster.flotilla.dev/target, value: forged}\n"+
					"  - {name: clusterset.k8s.io, value: prod}\n"),
			want: map[string]string{
				"x-k8s.io/cluster-manager": "ocm", "region": "eu-west", "zone": "eu-west-1a", "clusterset.k8s.io": "prod",
			},
			skipped: []string{`"bad key!": not a label key`, `"cpu": value "4 cores, 16 GiB" is not a label value`, `"multicluster.flotilla.dev/target": Flotilla's own`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, skipped := profileOf(t, tc.profile).NodeLabels()
			if !maps.Equal(got, tc.want) {
				t.Fatalf("labels %v, want %v", got, tc.want)
			}
			if len(skipped) != len(tc.skipped) {
				t.Fatalf("skipped %q, want %d", skipped, len(tc.skipped))
			}
			for i := range skipped {
				if !strings.Contains(skipped[i], tc.skipped[i]) {
					t.Fatalf("skipped[%d] %q, want it to say %q", i, skipped[i], tc.skipped[i])
				}
			}
		})
	}
}

func TestMerge(t *testing.T) {
	got := Merge(map[string]string{"region": "eu-west", "zone": "a"}, map[string]string{"region": "us-east", "tier": "spot"})
	want := map[string]string{"region": "us-east", "zone": "a", "tier": "spot"}
	if !maps.Equal(got, want) {
		t.Fatalf("got %v, want %v (the ClusterTarget's own labels win)", got, want)
	}
	if got := Merge(nil, nil); got == nil || len(got) != 0 {
		t.Fatalf("got %v", got)
	}
}

// TestKubeconfigOnlyTheToken checks what the assembled kubeconfig holds:
// one cluster (the provider's, less the plugin's inputs) and one user with
// the token, nothing of the profile's other providers.
func TestKubeconfigOnlyTheToken(t *testing.T) {
	data, err := profileOf(t, good).Kubeconfig(Access{Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	var kc map[string]any
	if err := yaml.Unmarshal(data, &kc); err != nil {
		t.Fatal(err)
	}
	for _, word := range []string{"exec", "/bin/sh", "LD_PRELOAD", "clusterName"} {
		if strings.Contains(string(data), word) {
			t.Errorf("the kubeconfig carries %q: %s", word, data)
		}
	}
	if keys := slices.Sorted(maps.Keys(kc)); !slices.Equal(keys, []string{"apiVersion", "clusters", "contexts", "current-context", "kind", "users"}) {
		t.Errorf("keys %v", keys)
	}
}
