package cli

import (
	"bytes"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/kubeconfig"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// admiraltyKubeconfig has two contexts: "c2" with an inline token, which
// Flotilla accepts, and "eks", whose user runs a command, which it does
// not. The current context is c2.
const admiraltyKubeconfig = `apiVersion: v1
kind: Config
current-context: c2
contexts:
- name: c2
  context: {cluster: c2, user: c2}
- name: eks
  context: {cluster: c2, user: eks}
clusters:
- name: c2
  cluster:
    server: https://c2.example.com:6443
    certificate-authority-data: Zm9v
users:
- name: c2
  user:
    token: abc
- name: eks
  user:
    exec: {apiVersion: client.authentication.k8s.io/v1, command: aws, args: [eks, get-token]}
`

// execCurrent is admiraltyKubeconfig whose current context runs a command.
var execCurrent = strings.Replace(admiraltyKubeconfig, "current-context: c2", "current-context: eks", 1)

func admiraltyObject(t *testing.T, text string) unstructured.Unstructured {
	t.Helper()
	u := unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte("apiVersion: multicluster.admiralty.io/v1alpha1\n"+text), &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

func secretOf(namespace, name, key, data string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Data: map[string][]byte{key: []byte(data)}}
}

func TestConvertAdmiralty(t *testing.T) {
	admiraltySecret := types.NamespacedName{Namespace: "admiralty", Name: "c2"}
	for _, tc := range []struct {
		name    string
		objects []string
		secrets []*corev1.Secret
		// forbidden Secrets could not be read.
		forbidden []types.NamespacedName
		opts      migrateAdmiraltyOptions
		// want are the Flotilla objects, as describe names them, in order.
		want []string
		// result, notes and commands: words of the first finding.
		result   string
		notes    []string
		commands []string
		check    func(t *testing.T, objs []client.Object)
	}{
		{
			name:    "self cluster target",
			objects: []string{"kind: ClusterTarget\nmetadata: {name: c1}\nspec: {self: true}"},
			want:    []string{"ClusterTarget c1"},
			result:  "virtual node flotilla-c1",
			check: func(t *testing.T, objs []client.Object) {
				if ct := objs[0].(*v1alpha1.ClusterTarget); !ct.Spec.Self || ct.Spec.KubeconfigSecretRef != nil {
					t.Errorf("spec %+v", ct.Spec)
				}
			},
		},
		{
			name:    "self namespaced target",
			objects: []string{"kind: Target\nmetadata: {name: c1, namespace: shop}\nspec: {self: true}"},
			want:    []string{"Target shop/c1"},
			result:  "virtual node flotilla.shop.c1",
		},
		{
			name:     "cluster target with a kubeconfig Flotilla accepts, default key",
			objects:  []string{"kind: ClusterTarget\nmetadata: {name: c2}\nspec: {kubeconfigSecret: {name: c2, namespace: admiralty}}"},
			secrets:  []*corev1.Secret{secretOf("admiralty", "c2", "config", admiraltyKubeconfig)},
			opts:     migrateAdmiraltyOptions{AgentNamespace: "flotilla-system"},
			want:     []string{"Secret flotilla-system/flotilla-target-c2", "ClusterTarget c2"},
			result:   "Secret admiralty/c2 (key config) in Secret flotilla-system/flotilla-target-c2",
			notes:    []string{"ClusterSummary"},
			commands: []string{`kubectl -n flotilla-system patch secret flotilla-target-c2 --type merge -p '{"stringData":{"summary":"SUMMARY"}}'`},
			check: func(t *testing.T, objs []client.Object) {
				s := objs[0].(*corev1.Secret)
				copied := s.Data[protocol.InvitationKubeconfigKey]
				cfg, err := kubeconfig.RESTConfig(copied)
				if err != nil || cfg.Host != "https://c2.example.com:6443" || cfg.BearerToken != "abc" {
					t.Errorf("copied kubeconfig: %v %+v", err, cfg)
				}
				if bytes.Contains(copied, []byte("aws")) {
					t.Errorf("the copy carries the unused exec user:\n%s", copied)
				}
				ct := objs[1].(*v1alpha1.ClusterTarget)
				if ref := ct.Spec.KubeconfigSecretRef; ref == nil || ref.Name != "flotilla-target-c2" || ref.Namespace != "flotilla-system" || ref.Key != "kubeconfig" || ct.Spec.Self {
					t.Errorf("spec %+v", ct.Spec)
				}
			},
		},
		{
			name:    "the context Admiralty names is the one copied",
			objects: []string{"kind: ClusterTarget\nmetadata: {name: c2}\nspec: {kubeconfigSecret: {name: c2, namespace: admiralty, key: kc, context: c2}}"},
			secrets: []*corev1.Secret{secretOf("admiralty", "c2", "kc", execCurrent)},
			opts:    migrateAdmiraltyOptions{AgentNamespace: "flotilla-system"},
			want:    []string{"Secret flotilla-system/flotilla-target-c2", "ClusterTarget c2"},
			result:  "(key kc, context c2)",
		},
		{
			name:     "an exec plugin is refused and join is named",
			objects:  []string{"kind: ClusterTarget\nmetadata: {name: c2}\nspec: {kubeconfigSecret: {name: c2, namespace: admiralty, context: eks}}"},
			secrets:  []*corev1.Secret{secretOf("admiralty", "c2", "config", admiraltyKubeconfig)},
			result:   notMigrated,
			notes:    []string{"Secret admiralty/c2", "exec plugins run commands"},
			commands: []string{"kubectl flotilla join c2 --kubeconfig-from"},
		},
		{
			name:     "the current context runs a command",
			objects:  []string{"kind: ClusterTarget\nmetadata: {name: c2}\nspec: {kubeconfigSecret: {name: c2, namespace: admiralty}}"},
			secrets:  []*corev1.Secret{secretOf("admiralty", "c2", "config", execCurrent)},
			result:   notMigrated,
			notes:    []string{"refuse", "exec"},
			commands: []string{"kubectl flotilla join c2"},
		},
		{
			name:    "a context the kubeconfig lacks",
			objects: []string{"kind: ClusterTarget\nmetadata: {name: c2}\nspec: {kubeconfigSecret: {name: c2, namespace: admiralty, context: nope}}"},
			secrets: []*corev1.Secret{secretOf("admiralty", "c2", "config", admiraltyKubeconfig)},
			result:  notMigrated,
			notes:   []string{`no context "nope"`},
		},
		{
			name:    "the Secret does not exist",
			objects: []string{"kind: ClusterTarget\nmetadata: {name: c2}\nspec: {kubeconfigSecret: {name: c2, namespace: admiralty}}"},
			result:  notMigrated,
			notes:   []string{"Secret admiralty/c2", "does not exist"},
		},
		{
			name:      "the Secret may not be read",
			objects:   []string{"kind: ClusterTarget\nmetadata: {name: c2}\nspec: {kubeconfigSecret: {name: c2, namespace: admiralty}}"},
			forbidden: []types.NamespacedName{admiraltySecret},
			result:    notMigrated,
			notes:     []string{`reading Secret admiralty/c2: secrets "c2" is forbidden`},
		},
		{
			name:    "the Secret lacks the key",
			objects: []string{"kind: ClusterTarget\nmetadata: {name: c2}\nspec: {kubeconfigSecret: {name: c2, namespace: admiralty, key: kubeconfig}}"},
			secrets: []*corev1.Secret{secretOf("admiralty", "c2", "config", admiraltyKubeconfig)},
			result:  notMigrated,
			notes:   []string{`no key "kubeconfig"`},
		},
		{
			name:    "a cluster target's Secret without a namespace",
			objects: []string{"kind: ClusterTarget\nmetadata: {name: c2}\nspec: {kubeconfigSecret: {name: c2}}"},
			result:  notMigrated,
			notes:   []string{"spec.kubeconfigSecret.namespace"},
		},
		{
			name:    "self and a Secret",
			objects: []string{"kind: ClusterTarget\nmetadata: {name: c2}\nspec: {self: true, kubeconfigSecret: {name: c2, namespace: admiralty}}"},
			result:  notMigrated,
			notes:   []string{"both spec.self and spec.kubeconfigSecret"},
		},
		{
			name:    "neither self nor a Secret",
			objects: []string{"kind: Target\nmetadata: {name: c2, namespace: shop}\nspec: {}"},
			result:  notMigrated,
			notes:   []string{"neither spec.self nor spec.kubeconfigSecret"},
		},
		{
			name:    "self of the wrong type",
			objects: []string{"kind: ClusterTarget\nmetadata: {name: c2}\nspec: {self: 'yes'}"},
			result:  notMigrated,
			notes:   []string{"spec.self is a string, not a boolean"},
		},
		{
			name:    "a field of another release is ignored and named; excludedLabelsRegexp has no equivalent",
			objects: []string{"kind: ClusterTarget\nmetadata: {name: c1}\nspec: {self: true, excludedLabelsRegexp: '^kubernetes\\.azure\\.com/', nodeSelector: {a: b}}"},
			want:    []string{"ClusterTarget c1"},
			result:  "self",
			notes:   []string{"spec.nodeSelector is not a field of Admiralty's ClusterTarget", "spec.excludedLabelsRegexp has no equivalent"},
		},
		{
			name:    "namespaced target: its Secret stays in its namespace",
			objects: []string{"kind: Target\nmetadata: {name: c2, namespace: shop}\nspec: {kubeconfigSecret: {name: c2}}"},
			secrets: []*corev1.Secret{secretOf("shop", "c2", "config", admiraltyKubeconfig)},
			opts:    migrateAdmiraltyOptions{AgentNamespace: "flotilla-system"},
			want:    []string{"Secret shop/flotilla-target-c2", "Target shop/c2"},
			check: func(t *testing.T, objs []client.Object) {
				if ref := objs[1].(*v1alpha1.Target).Spec.KubeconfigSecretRef; ref == nil || ref.Name != "flotilla-target-c2" || ref.Key != "kubeconfig" {
					t.Errorf("ref %+v", ref)
				}
			},
		},
		{
			name:    "source of a ServiceAccount",
			objects: []string{"kind: Source\nmetadata: {name: c1, namespace: shop}\nspec: {serviceAccountName: c1}"},
			want:    []string{"Source shop/c1"},
			result:  "inviting ServiceAccount shop/c1 into namespace shop",
			notes:   []string{"clusterName c1"},
			check: func(t *testing.T, objs []client.Object) {
				s := objs[0].(*v1alpha1.Source)
				if s.Spec.ClusterName != "c1" || s.Spec.Identity.ServiceAccount == nil || *s.Spec.Identity.ServiceAccount != (v1alpha1.ServiceAccountRef{Namespace: "shop", Name: "c1"}) ||
					s.Spec.Identity.User != "" || s.Spec.Identity.ManagedServiceAccount != nil {
					t.Errorf("spec %+v", s.Spec)
				}
			},
		},
		{
			name:    "source of a user",
			objects: []string{"kind: Source\nmetadata: {name: c1, namespace: shop}\nspec: {userName: alice}"},
			want:    []string{"Source shop/c1"},
			result:  "inviting user alice",
		},
		{
			name:    "source of no one",
			objects: []string{"kind: Source\nmetadata: {name: c1, namespace: shop}\nspec: {}"},
			result:  notMigrated,
			notes:   []string{"neither a user nor a ServiceAccount"},
		},
		{
			name:    "a name that is no clusterName",
			objects: []string{"kind: Source\nmetadata: {name: " + strings.Repeat("a", 70) + ", namespace: shop}\nspec: {userName: alice}"},
			result:  notMigrated,
			notes:   []string{"cannot be a Flotilla clusterName", "kubectl flotilla invite"},
		},
		{
			name:    "cluster source without namespaces to invite into",
			objects: []string{"kind: ClusterSource\nmetadata: {name: c1}\nspec: {serviceAccount: {name: c1, namespace: admiralty}}"},
			result:  notMigrated,
			notes:   []string{"every namespace", "--namespaces or --namespace-selector"},
		},
		{
			name:    "cluster source into named namespaces; a user beside the ServiceAccount is named",
			objects: []string{"kind: ClusterSource\nmetadata: {name: c1}\nspec: {userName: bob, serviceAccount: {name: c1, namespace: admiralty}}"},
			opts:    migrateAdmiraltyOptions{InviteNamespaces: []string{"shop", "web"}},
			want:    []string{"ClusterSource c1"},
			result:  "inviting ServiceAccount admiralty/c1 into namespaces shop, web",
			notes:   []string{`user "bob"`},
			check: func(t *testing.T, objs []client.Object) {
				cs := objs[0].(*v1alpha1.ClusterSource)
				if strings.Join(cs.Spec.Namespaces, ",") != "shop,web" || cs.Spec.NamespaceSelector != nil || cs.Spec.Identity.User != "" || cs.Spec.ClusterName != "c1" {
					t.Errorf("spec %+v", cs.Spec)
				}
			},
		},
		{
			name:    "cluster source into selected namespaces",
			objects: []string{"kind: ClusterSource\nmetadata: {name: c1}\nspec: {userName: bob}"},
			opts:    migrateAdmiraltyOptions{InviteSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "web"}}},
			want:    []string{"ClusterSource c1"},
			result:  "namespaces labelled team=web",
		},
		{
			name:    "service account of the wrong shape",
			objects: []string{"kind: ClusterSource\nmetadata: {name: c1}\nspec: {serviceAccount: c1}"},
			opts:    migrateAdmiraltyOptions{InviteNamespaces: []string{"shop"}},
			result:  notMigrated,
			notes:   []string{"spec.serviceAccount"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := admiraltyState{Secrets: map[types.NamespacedName]*corev1.Secret{}, SecretErrors: map[types.NamespacedName]string{}}
			for _, o := range tc.objects {
				st.Objects = append(st.Objects, admiraltyObject(t, o))
			}
			for _, s := range tc.secrets {
				st.Secrets[types.NamespacedName{Namespace: s.Namespace, Name: s.Name}] = s
			}
			for _, s := range tc.forbidden {
				st.SecretErrors[s] = `secrets "c2" is forbidden`
			}
			m := convertAdmiralty(st, tc.opts)
			var got []string
			for _, o := range m.Objects {
				got = append(got, describe(o))
			}
			if strings.Join(got, "; ") != strings.Join(tc.want, "; ") {
				t.Errorf("objects %q, want %q", got, tc.want)
			}
			if len(m.Findings) == 0 {
				t.Fatal("no finding")
			}
			f := m.Findings[0]
			text := func() string { var b bytes.Buffer; writeFindings(&b, m.Findings); return b.String() }
			if !strings.Contains(f.Result, tc.result) {
				t.Errorf("result %q lacks %q", f.Result, tc.result)
			}
			if (tc.result == notMigrated) == f.migrated() {
				t.Errorf("migrated %v:\n%s", f.migrated(), text())
			}
			for _, n := range tc.notes {
				if !strings.Contains(strings.Join(f.Notes, "\n"), n) {
					t.Errorf("notes lack %q:\n%s", n, text())
				}
			}
			for _, c := range tc.commands {
				if !strings.Contains(strings.Join(f.Commands, "\n"), c) {
					t.Errorf("commands lack %q:\n%s", c, text())
				}
			}
			if tc.check != nil && len(m.Objects) == len(tc.want) {
				tc.check(t, m.Objects)
			}
		})
	}
}

// TestConvertAdmiraltyOrder: Secrets come before the targets that name
// them, and targets before invitations, whatever the order read.
func TestConvertAdmiraltyOrder(t *testing.T) {
	st := admiraltyState{Secrets: map[types.NamespacedName]*corev1.Secret{
		{Namespace: "admiralty", Name: "c2"}: secretOf("admiralty", "c2", "config", admiraltyKubeconfig),
	}}
	for _, o := range []string{
		"kind: Source\nmetadata: {name: c3, namespace: shop}\nspec: {userName: alice}",
		"kind: ClusterTarget\nmetadata: {name: c2}\nspec: {kubeconfigSecret: {name: c2, namespace: admiralty}}",
		"kind: ClusterTarget\nmetadata: {name: c1}\nspec: {self: true}",
	} {
		st.Objects = append(st.Objects, admiraltyObject(t, o))
	}
	m := convertAdmiralty(st, migrateAdmiraltyOptions{AgentNamespace: "flotilla-system"})
	var got []string
	for _, o := range m.Objects {
		got = append(got, describe(o))
	}
	if want := "Secret flotilla-system/flotilla-target-c2; ClusterTarget c1; ClusterTarget c2; Source shop/c3"; strings.Join(got, "; ") != want {
		t.Errorf("order %q, want %q", strings.Join(got, "; "), want)
	}
	var subjects []string
	for _, f := range m.Findings {
		subjects = append(subjects, f.Subject)
	}
	if want := "Admiralty ClusterTarget c1; Admiralty ClusterTarget c2; Admiralty Source shop/c3"; strings.Join(subjects, "; ") != want {
		t.Errorf("findings %q, want %q", strings.Join(subjects, "; "), want)
	}
}

func TestAdmiraltyOptInFindings(t *testing.T) {
	st := admiraltyState{
		Namespaces: []string{"web", "shop"},
		Workloads: []admiraltyWorkload{
			{Kind: "deployment", Namespace: "shop", Name: "api", Annotations: map[string]string{admiraltyElect: "", admiraltyGroup + "/no-reservation": ""}},
			{Kind: "cronjob", Namespace: "shop", Name: "nightly", Annotations: map[string]string{admiraltyElect: ""}},
			{Kind: "pod", Namespace: "web", Name: "once", Annotations: map[string]string{admiraltyElect: "", admiraltyGroup + "/clustername": "c2"}},
		},
		VirtualNodes:     map[string]int{"admiralty-cluster-c2": 3},
		ReroutedServices: []types.NamespacedName{{Namespace: "shop", Name: "api"}},
	}
	want := []struct {
		subject  string
		notes    []string
		commands []string
	}{
		{"namespace shop", nil, []string{"kubectl label namespace shop multicluster-scheduler- multicluster.flotilla.dev/enabled=true"}},
		{"namespace web", nil, []string{"kubectl label namespace web multicluster-scheduler- multicluster.flotilla.dev/enabled=true"}},
		{"cronjob shop/nightly", nil, []string{`kubectl -n shop patch cronjob nightly --type merge -p '{"spec":{"jobTemplate":{"spec":{"template":{"metadata":{"annotations":{"multicluster.admiralty.io/elect":null},"labels":{"multicluster.flotilla.dev/elect":"true"}}}}}}}'`}},
		{"deployment shop/api", []string{"annotation multicluster.admiralty.io/no-reservation: Flotilla has no equivalent", "replaces its pods"},
			[]string{`kubectl -n shop patch deployment api --type merge -p '{"spec":{"template":{"metadata":{"annotations":{"multicluster.admiralty.io/elect":null},"labels":{"multicluster.flotilla.dev/elect":"true"}}}}}'`}},
		{"pod web/once", []string{"recreate it with the label multicluster.flotilla.dev/elect=true", "clustername: Admiralty ignores it since v0.8"}, nil},
		{"node admiralty-cluster-c2", []string{"keep Admiralty installed"}, nil},
		{"service shop/api", []string{"Flotilla reroutes no Service"}, []string{"kubectl -n shop edit service api"}},
	}
	got := optInFindings(st)
	if len(got) != len(want) {
		var b bytes.Buffer
		writeFindings(&b, got)
		t.Fatalf("%d findings, want %d:\n%s", len(got), len(want), b.String())
	}
	for i, w := range want {
		f := got[i]
		if f.Subject != w.subject {
			t.Errorf("finding %d is of %q, want %q", i, f.Subject, w.subject)
		}
		for _, n := range w.notes {
			if !strings.Contains(strings.Join(f.Notes, "\n"), n) {
				t.Errorf("%s: notes lack %q: %q", f.Subject, n, f.Notes)
			}
		}
		if strings.Join(f.Commands, "\n") != strings.Join(w.commands, "\n") {
			t.Errorf("%s: commands\n%q\nwant\n%q", f.Subject, f.Commands, w.commands)
		}
	}
}

func TestRerouted(t *testing.T) {
	svc := func(annotations, selector map[string]string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Annotations: annotations}, Spec: corev1.ServiceSpec{Selector: selector}}
	}
	global := map[string]string{"io.cilium/global-service": "true"}
	for _, tc := range []struct {
		name string
		svc  *corev1.Service
		want bool
	}{
		{"rewritten", svc(global, map[string]string{"multicluster.admiralty.io/app": "api"}), true},
		{"a global service of its own", svc(global, map[string]string{"app": "api"}), false},
		{"prefixed keys without the mark", svc(nil, map[string]string{"multicluster.admiralty.io/app": "api"}), false},
		{"no selector", svc(global, nil), false},
	} {
		if got := rerouted(tc.svc); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestWriteMigrationYAMLHidesSecrets(t *testing.T) {
	st := admiraltyState{Secrets: map[types.NamespacedName]*corev1.Secret{
		{Namespace: "admiralty", Name: "c2"}: secretOf("admiralty", "c2", "config", admiraltyKubeconfig),
	}}
	st.Objects = append(st.Objects, admiraltyObject(t, "kind: ClusterTarget\nmetadata: {name: c2}\nspec: {kubeconfigSecret: {name: c2, namespace: admiralty}}"))
	m := convertAdmiralty(st, migrateAdmiraltyOptions{AgentNamespace: "flotilla-system"})
	var b bytes.Buffer
	if err := writeMigrationYAML(&b, m.Objects); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if strings.Contains(out, "abc") || strings.Contains(out, "kind: Secret") {
		t.Errorf("the YAML shows the credential:\n%s", out)
	}
	for _, want := range []string{"# Secret flotilla-system/flotilla-target-c2", "kind: ClusterTarget", "apiVersion: multicluster.flotilla.dev/v1alpha1", "name: flotilla-target-c2"} {
		if !strings.Contains(out, want) {
			t.Errorf("the YAML lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "status") || strings.Contains(out, "creationTimestamp") {
		t.Errorf("the YAML carries status or creationTimestamp:\n%s", out)
	}
}

func TestMigrateUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
		out  string
	}{
		{args: []string{"migrate"}, want: ExitUsage, out: "kubectl flotilla migrate admiralty"},
		{args: []string{"migrate", "karmada"}, want: ExitUsage, out: `no system "karmada"`},
		{args: []string{"migrate", "admiralty", "--help"}, want: ExitOK, out: "--apply"},
		{args: []string{"migrate", "admiralty", "extra"}, want: ExitUsage, out: "no arguments"},
		{args: []string{"migrate", "admiralty", "--namespaces", "a", "--namespace-selector", "b=c"}, want: ExitUsage, out: "exclude each other"},
		{args: []string{"migrate", "admiralty", "--namespace-selector", "a in"}, want: ExitUsage, out: "--namespace-selector"},
	} {
		var stdout, stderr bytes.Buffer
		if got := Main(tc.args, &stdout, &stderr); got != tc.want {
			t.Errorf("%v: exit %d, want %d (stderr %q)", tc.args, got, tc.want, stderr.String())
		}
		if !strings.Contains(stdout.String()+stderr.String(), tc.out) {
			t.Errorf("%v: output lacks %q: stdout %q stderr %q", tc.args, tc.out, stdout.String(), stderr.String())
		}
	}
}
