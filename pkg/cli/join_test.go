package cli

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/flotilla-dev/flotilla/pkg/kubeconfig"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// testKubeconfig is a kubeconfig as a target's agent writes one for an
// invited ServiceAccount: one cluster, a token, the first invited
// namespace.
func testKubeconfig(t *testing.T) []byte {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["target"] = &clientcmdapi.Cluster{Server: "https://t1.example:6443", CertificateAuthorityData: []byte("-----BEGIN CERTIFICATE-----\n")}
	cfg.AuthInfos["source"] = &clientcmdapi.AuthInfo{Token: "a-token"}
	cfg.Contexts["target"] = &clientcmdapi.Context{Cluster: "target", AuthInfo: "source", Namespace: "shop"}
	cfg.CurrentContext = "target"
	kc, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return kc
}

// The file invite writes is the file join reads.
func TestInvitationManifestRoundTrip(t *testing.T) {
	kc := testKubeconfig(t)
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: "flotilla-source-c1-kubeconfig", Namespace: "flotilla-system", UID: "123", ResourceVersion: "9",
			Annotations: map[string]string{protocol.InvitationExpiresAnnotation: "2030-01-01T00:00:00Z", "other": "x"},
			Labels:      map[string]string{protocol.InvitationLabel: "clustersource.c1"},
		},
		Data: map[string][]byte{protocol.InvitationKubeconfigKey: kc, protocol.InvitationSummaryKey: []byte("flotilla-clustersource.c1")},
	}
	manifest, err := invitationManifest(secret, "c1", "t1")
	if err != nil {
		t.Fatal(err)
	}
	text := string(manifest)
	for _, gone := range []string{"flotilla-system", "uid", "resourceVersion", "other", "clustersource.c1\n"} {
		if strings.Contains(text, gone) {
			t.Errorf("the manifest carries %q of the target's object:\n%s", gone, text)
		}
	}
	if !strings.Contains(text, "2030-01-01T00:00:00Z") || !strings.HasPrefix(text, "# Flotilla") {
		t.Errorf("the manifest lacks its header or expiry:\n%s", text)
	}
	f, err := readInvitation(manifest)
	if err != nil {
		t.Fatal(err)
	}
	if string(f.kubeconfig) != string(kc) || f.summary != "flotilla-clustersource.c1" {
		t.Errorf("read back kubeconfig %q, summary %q", f.kubeconfig, f.summary)
	}
}

func TestReadInvitation(t *testing.T) {
	kc := testKubeconfig(t)
	t.Run("a plain kubeconfig", func(t *testing.T) {
		f, err := readInvitation(kc)
		if err != nil || f.summary != "" || string(f.kubeconfig) != string(kc) {
			t.Fatalf("got %+v, %v", f, err)
		}
	})
	t.Run("a Secret with stringData, as written by hand", func(t *testing.T) {
		indented := "    " + strings.ReplaceAll(strings.TrimSpace(string(kc)), "\n", "\n    ")
		doc := "apiVersion: v1\nkind: Secret\nmetadata:\n  name: x\nstringData:\n  summary: flotilla-clustersource.c1\n  kubeconfig: |\n" + indented + "\n"
		f, err := readInvitation([]byte(doc))
		if err != nil || f.summary != "flotilla-clustersource.c1" {
			t.Fatalf("got %+v, %v", f, err)
		}
	})
	t.Run("refused", func(t *testing.T) {
		for name, doc := range map[string]string{
			"not YAML":                      "{{{",
			"another kind":                  "apiVersion: v1\nkind: ConfigMap\n",
			"a Secret without a kubeconfig": "apiVersion: v1\nkind: Secret\ndata:\n  summary: eA==\n",
			"an exec plugin": `apiVersion: v1
kind: Config
clusters: [{name: t, cluster: {server: "https://t:6443"}}]
users: [{name: u, user: {exec: {command: steal, apiVersion: client.authentication.k8s.io/v1}}}]
contexts: [{name: c, context: {cluster: t, user: u}}]
current-context: c
`,
		} {
			_, err := readInvitation([]byte(doc))
			if err == nil {
				t.Errorf("%s: want an error", name)
				continue
			}
			if name == "an exec plugin" && !errors.Is(err, kubeconfig.ErrRefused) {
				t.Errorf("%s: want kubeconfig.ErrRefused, got %v", name, err)
			}
		}
	})
}
