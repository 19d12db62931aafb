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
// namespaced Target's cache, lookups and handlers show only those of its
// own namespace's pods, so that it never elects, mirrors or deletes the
// pods of another namespace.
func TestNamespacedTargetSeesOnlyItsCandidates(t *testing.T) {
	candidate := func(namespace, name, sourceNamespace string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace, Name: name,
			Labels: map[string]string{protocol.CandidateLabel: "true", protocol.SourceClusterLabel: "src", protocol.SourceUIDLabel: name + "-uid"},
			Annotations: map[string]string{
				protocol.SourceNamespaceAnnotation: sourceNamespace, protocol.SourceNameAnnotation: name,
			},
		}}
	}
	own := candidate("tenant", "mine", "tenant")
	// The fake clientset does not stream a watch's initial list.
	clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.WatchListClient, false)
	for _, tt := range []struct {
		name string
		cfg  Config
		// cached are the candidates the target's informers list.
		cached []string
	}{{
		name:   "self Target of namespace tenant",
		cfg:    Config{Name: "tenant/home", Namespace: "tenant", Self: true},
		cached: []string{"tenant/mine", "tenant/smuggled"},
	}, {
		name:   "a ClusterTarget sees them all",
		cfg:    Config{Name: "self", Self: true},
		cached: []string{"prod/theirs", "tenant/mine", "tenant/smuggled"},
	}} {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.REST, tt.cfg.SourceCluster = &rest.Config{Host: "https://127.0.0.1:1"}, "src"
			tg, err := New(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			// A pod of prod placed through a ClusterTarget, and one that
			// claims prod's pod while sitting in the tenant's namespace.
			tg.client = fake.NewClientset(own, candidate("prod", "theirs", "prod"), candidate("tenant", "smuggled", "prod"))
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
			if _, ok := tg.Candidate("tenant", "mine"); !ok {
				t.Error("its own candidate is not found")
			}
			if _, ok := tg.Candidate("tenant", "smuggled"); ok == ns {
				t.Errorf("Candidate of another namespace's pod found: %v", ok)
			}
			if _, ok := tg.Candidate("prod", "theirs"); ok == ns {
				t.Errorf("Candidate in another namespace found: %v", ok)
			}
			if got := len(tg.CandidatesOf("prod", "smuggled")) + len(tg.CandidatesOf("prod", "theirs")); (got == 0) != ns {
				t.Errorf("CandidatesOf another namespace's pods: %d", got)
			}
			want := 3
			if ns {
				want = 1
			}
			if got := len(tg.Candidates()); got != want {
				t.Errorf("Candidates: %d, want %d", got, want)
			}
			if got := tg.CandidateCount(); got != want {
				t.Errorf("CandidateCount: %d, want %d", got, want)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(handled) != want {
				t.Errorf("handlers saw %v, want %d candidates", handled, want)
			}
			d := Delegates{Target: tg, SourceCluster: "src"}
			prodPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "theirs"}}
			if _, err := d.Get(prodPod); (err != nil) != ns {
				t.Errorf("Delegates.Get of a prod pod: %v", err)
			}
		})
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
		"tenant/home": "flotilla-tenant-home",
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
