package target

import (
	"context"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	clientfeatures "k8s.io/client-go/features"
	clientfeaturestesting "k8s.io/client-go/features/testing"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// TestRefusedSpec: a namespaced self Target acts with the agent's own
// identity, so it may send its namespace's pods nowhere but that
// namespace; a ClusterTarget (a cluster admin's) and a Target of another
// cluster (whose invitation decides) may map namespaces.
func TestRefusedSpec(t *testing.T) {
	selfTarget := func(targetNamespace string) view {
		tg := &v1alpha1.Target{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "home"}}
		tg.Spec.Self, tg.Spec.TargetNamespace = true, targetNamespace
		return targetView(tg)
	}
	remoteTarget := targetView(&v1alpha1.Target{
		ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "away"},
		Spec: v1alpha1.TargetSpec{
			KubeconfigSecretRef: &v1alpha1.LocalSecretKeyRef{Name: "kc"},
			TargetNamespace:     "tenant-in-there",
		},
	})
	c := &Controller{Namespace: "flotilla-system"}
	clusterSelf := c.clusterTargetView(&v1alpha1.ClusterTarget{
		ObjectMeta: metav1.ObjectMeta{Name: "self"},
		Spec: v1alpha1.ClusterTargetSpec{
			TargetCommon:     v1alpha1.TargetCommon{Self: true},
			NamespaceMapping: []v1alpha1.NamespaceMapping{{Source: "a", Target: "kube-system"}},
		},
	})
	withCIDRs := func(v view, cidrs ...string) view { v.podCIDRs = cidrs; return v }
	tenantNets := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00::/56")}
	for _, tt := range []struct {
		name    string
		v       view
		refused string
	}{
		{name: "namespaced self Target, no targetNamespace", v: selfTarget("")},
		{name: "namespaced self Target, its own namespace", v: selfTarget("tenant")},
		{name: "namespaced self Target into kube-system", v: selfTarget("kube-system"), refused: `spec.targetNamespace "kube-system" must be empty or "tenant"`},
		{name: "namespaced self Target into a neighbour's namespace", v: selfTarget("other-tenant"), refused: `spec.targetNamespace "other-tenant"`},
		{name: "namespaced Target of another cluster maps its namespace", v: remoteTarget},
		{name: "self ClusterTarget maps namespaces", v: clusterSelf},
		{name: "pod networks", v: withCIDRs(clusterSelf, "10.244.0.0/16", "fd00::/64")},
		{name: "a tenant's pod networks inside the admin's", v: withCIDRs(remoteTarget, "10.244.1.0/24", "fd00::/64")},
		{name: "a tenant's pod network wider than the admin's", v: withCIDRs(remoteTarget, "10.0.0.0/8"), refused: "spec.podCIDRs[0] 10.0.0.0/8"},
		{name: "a tenant's pod network elsewhere", v: withCIDRs(selfTarget(""), "10.244.0.0/16", "192.168.0.0/16"), refused: "spec.podCIDRs[1] 192.168.0.0/16"},
		{name: "a pod network that does not parse", v: withCIDRs(remoteTarget, "10.244.0.0"), refused: "spec.podCIDRs"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := refusedSpec(tt.v, tenantNets)
			switch {
			case tt.refused == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.refused != "" && (err == nil || !strings.Contains(err.Error(), tt.refused)):
				t.Fatalf("got %v, want a refusal saying %q", err, tt.refused)
			}
		})
	}
}

func TestWatched(t *testing.T) {
	for _, tt := range []struct {
		name    string
		home    string
		invited []string
		all     bool
		want    []string
	}{
		{name: "ClusterTarget, every namespace open", all: true, want: []string{metav1.NamespaceAll}},
		{name: "ClusterTarget, invited namespaces", invited: []string{"a", "b"}, want: []string{"a", "b"}},
		{name: "namespaced self Target: its namespace, not every one", home: "tenant", all: true, want: []string{"tenant"}},
		{name: "namespaced Target, its namespace invited among others", home: "tenant", invited: []string{"a", "tenant"}, want: []string{"tenant"}},
		{name: "namespaced Target, its namespace not invited", home: "tenant", invited: []string{"a"}, want: nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := watched(tt.home, tt.invited, tt.all); !slices.Equal(got, tt.want) {
				t.Errorf("watched(%q, %q, %v) = %q, want %q", tt.home, tt.invited, tt.all, got, tt.want)
			}
		})
	}
}

// TestNamespacedTargetSeesOnlyItsCandidates: other candidates of this
// source live in the cluster a namespaced Target reaches (a ClusterTarget's
// of the same cluster, or the source's own for a self Target). The
// namespaced Target's cache, lookups and handlers show only its own, of
// its own namespace's pods, so that it never elects, mirrors or deletes
// the pods of another namespace; the ClusterTarget beside it sees none of
// the namespaced Target's either, though they are candidates of the same
// source in the same namespace.
func TestNamespacedTargetSeesOnlyItsCandidates(t *testing.T) {
	candidate := func(target, namespace, name, sourceNamespace string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace, Name: name,
			Labels: map[string]string{
				protocol.CandidateLabel: "true", protocol.SourceClusterLabel: "src", protocol.SourceUIDLabel: name + "-uid",
				protocol.TargetLabel: protocol.TargetLabelValue(target),
			},
			Annotations: map[string]string{
				protocol.SourceNamespaceAnnotation: sourceNamespace, protocol.SourceNameAnnotation: name,
			},
		}}
	}
	const tenantTarget, clusterTarget = "tenant/home", "self"
	// The fake clientset does not stream a watch's initial list.
	clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.WatchListClient, false)
	for _, tt := range []struct {
		name string
		cfg  Config
		// cached are the candidates the target's informers list.
		cached []string
		// own is the candidate of a tenant pod it made; others is how
		// many it sees in all.
		own  string
		seen int
	}{{
		name:   "self Target of namespace tenant",
		cfg:    Config{Name: tenantTarget, Namespace: "tenant", Self: true},
		cached: []string{"tenant/mine", "tenant/smuggled"},
		own:    "mine",
		seen:   1,
	}, {
		name:   "the self ClusterTarget beside it",
		cfg:    Config{Name: clusterTarget, Self: true},
		cached: []string{"prod/theirs", "tenant/web-c"},
		own:    "web-c",
		seen:   2,
	}} {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.REST, tt.cfg.SourceCluster = &rest.Config{Host: "https://127.0.0.1:1"}, "src"
			tg, err := New(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			// The namespaced Target's candidate of a tenant pod; the
			// ClusterTarget's of a tenant pod and of a prod pod; one that
			// claims prod's pod while sitting in the tenant's namespace
			// with the namespaced Target's label; one of another source.
			other := candidate(tenantTarget, "tenant", "elsewhere", "tenant")
			other.Labels[protocol.SourceClusterLabel] = "other-src"
			tg.client = fake.NewClientset(
				candidate(tenantTarget, "tenant", "mine", "tenant"),
				candidate(clusterTarget, "tenant", "web-c", "tenant"),
				candidate(clusterTarget, "prod", "theirs", "prod"),
				candidate(tenantTarget, "tenant", "smuggled", "prod"),
				other,
			)
			var mu sync.Mutex
			var handled []string
			tg.OnCandidate(func(p *corev1.Pod) {
				mu.Lock()
				defer mu.Unlock()
				handled = append(handled, p.Namespace+"/"+p.Name)
			})
			tg.Start(t.Context())
			defer tg.Shutdown()
			if err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
				return tg.HasSynced() && cachedKeys(tg) == strings.Join(tt.cached, ","), nil
			}); err != nil {
				t.Fatalf("cache %s, want %v: %v", cachedKeys(tg), tt.cached, err)
			}

			ns := tt.cfg.Namespace != ""
			if _, ok := tg.Candidate("tenant", tt.own); !ok {
				t.Error("its own candidate is not found")
			}
			for _, name := range []string{"mine", "web-c"} {
				if _, ok := tg.Candidate("tenant", name); ok != (name == tt.own) {
					t.Errorf("Candidate tenant/%s (the other target's of the same namespace) found: %v", name, ok)
				}
			}
			if _, ok := tg.Candidate("tenant", "smuggled"); ok {
				t.Error("Candidate of another namespace's pod found")
			}
			if _, ok := tg.Candidate("prod", "theirs"); ok == ns {
				t.Errorf("Candidate in another namespace found: %v", ok)
			}
			if got := len(tg.CandidatesOf("prod", "smuggled")) + len(tg.CandidatesOf("prod", "theirs")); (got == 0) != ns {
				t.Errorf("CandidatesOf another namespace's pods: %d", got)
			}
			if got := len(tg.Candidates()); got != tt.seen {
				t.Errorf("Candidates: %d, want %d", got, tt.seen)
			}
			if got := tg.CandidateCount(); got != tt.seen {
				t.Errorf("CandidateCount: %d, want %d", got, tt.seen)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(handled) != tt.seen {
				t.Errorf("handlers saw %v, want %d candidates", handled, tt.seen)
			}
			d := Delegates{Target: tg, SourceCluster: "src"}
			prodPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "theirs"}}
			if _, err := d.Get(prodPod); (err != nil) != ns {
				t.Errorf("Delegates.Get of a prod pod: %v", err)
			}
		})
	}
}

// TestCandidateSelector: a target lists and watches only the candidates
// it made: those of its source, with its own target label.
func TestCandidateSelector(t *testing.T) {
	sel, err := labels.Parse(CandidateSelector("src", "tenant/home"))
	if err != nil {
		t.Fatal(err)
	}
	own := labels.Set{protocol.CandidateLabel: "true", protocol.SourceClusterLabel: "src", protocol.TargetLabel: protocol.TargetLabelValue("tenant/home")}
	if !sel.Matches(own) {
		t.Errorf("%s does not select the target's own candidate %v", sel, own)
	}
	for what, change := range map[string]func(labels.Set){
		"the ClusterTarget's beside it": func(l labels.Set) { l[protocol.TargetLabel] = protocol.TargetLabelValue("self") },
		"an older agent's, unlabelled":  func(l labels.Set) { delete(l, protocol.TargetLabel) },
		"another source's":              func(l labels.Set) { l[protocol.SourceClusterLabel] = "other" },
		"a pod that is no candidate":    func(l labels.Set) { delete(l, protocol.CandidateLabel) },
	} {
		l := labels.Set{}
		for k, v := range own {
			l[k] = v
		}
		change(l)
		if sel.Matches(l) {
			t.Errorf("%s selects %s %v", sel, what, l)
		}
	}
}

// cachedKeys lists every candidate the target's informers hold, sorted.
func cachedKeys(tg *Target) string {
	var keys []string
	for _, idx := range tg.informers.indexers() {
		keys = append(keys, idx.ListKeys()...)
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}

func TestNodeNameOf(t *testing.T) {
	for name, want := range map[string]string{
		"t1":          "flotilla-t1",
		"tenant/home": "flotilla.tenant.home",
	} {
		if got := NodeNameOf(name); got != want {
			t.Errorf("NodeNameOf(%q) = %q, want %q", name, got, want)
		}
		ns, _, namespaced := strings.Cut(name, "/")
		if !namespaced {
			ns = ""
		}
		tg, err := New(Config{Name: name, Namespace: ns, REST: &rest.Config{Host: "https://127.0.0.1:1"}, SourceCluster: "src"})
		if err != nil {
			t.Fatal(err)
		}
		if tg.NodeName != NodeNameOf(name) {
			t.Errorf("target %s runs node %s, but its elections bind to %s", name, tg.NodeName, NodeNameOf(name))
		}
	}
}
