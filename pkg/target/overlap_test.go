package target

import (
	"reflect"
	"strings"
	"testing"
)

func TestClusterOf(t *testing.T) {
	for _, tc := range []struct {
		self bool
		host string
		want string
	}{
		{self: true, host: "https://10.96.0.1:443", want: SelfCluster},
		{host: "https://API.example.com", want: "https://api.example.com:443"},
		{host: "https://api.example.com:443/", want: "https://api.example.com:443"},
		{host: "api.example.com:6443", want: "https://api.example.com:6443"},
		{host: "10.0.0.1:6443", want: "https://10.0.0.1:6443"},
		{host: "http://127.0.0.1", want: "http://127.0.0.1:80"},
		{host: "https://lb.example.com/k8s/", want: "https://lb.example.com:443/k8s"},
	} {
		if got := ClusterOf(tc.self, tc.host); got != tc.want {
			t.Errorf("ClusterOf(%t, %q) = %q, want %q", tc.self, tc.host, got, tc.want)
		}
	}
	if ClusterOf(false, "https://a.example.com:6443") == ClusterOf(false, "https://b.example.com:6443") {
		t.Error("two API servers compare as one cluster")
	}
}

func TestOverlaps(t *testing.T) {
	const remote = "https://api.example.com:443"
	clusterSelf := Reach{Name: "self", Cluster: SelfCluster}
	tenantSelf := Reach{Name: "team-a/self", Cluster: SelfCluster, Namespace: "team-a"}
	for _, tc := range []struct {
		name   string
		me     Reach
		others []Reach
		want   []Overlap
	}{{
		name:   "a namespaced self Target beside the self ClusterTarget",
		me:     tenantSelf,
		others: []Reach{clusterSelf, tenantSelf},
		want:   []Overlap{{Other: "self", SourceNamespace: "team-a", TargetNamespace: "team-a"}},
	}, {
		name:   "the self ClusterTarget beside a namespaced self Target",
		me:     clusterSelf,
		others: []Reach{tenantSelf, clusterSelf},
		want:   []Overlap{{Other: "team-a/self", SourceNamespace: "team-a", TargetNamespace: "team-a"}},
	}, {
		name:   "two ClusterTargets with kubeconfigs of one API server",
		me:     Reach{Name: "east", Cluster: remote},
		others: []Reach{{Name: "east-again", Cluster: remote}, {Name: "west", Cluster: "https://west.example.com:443"}},
		want:   []Overlap{{Other: "east-again"}},
	}, {
		name:   "two Targets of one namespace into one cluster",
		me:     Reach{Name: "shop/a", Cluster: remote, Namespace: "shop"},
		others: []Reach{{Name: "shop/b", Cluster: remote, Namespace: "shop"}},
		want:   []Overlap{{Other: "shop/b", SourceNamespace: "shop", TargetNamespace: "shop"}},
	}, {
		name:   "Targets of two namespaces take no pod in common",
		me:     Reach{Name: "shop/a", Cluster: remote, Namespace: "shop"},
		others: []Reach{{Name: "blog/a", Cluster: remote, Namespace: "blog", Mapping: map[string]string{"blog": "shop"}}},
	}, {
		name:   "a Target whose namespace the ClusterTarget maps elsewhere",
		me:     Reach{Name: "shop/a", Cluster: remote, Namespace: "shop"},
		others: []Reach{{Name: "east", Cluster: remote, Mapping: map[string]string{"shop": "shop-from-src"}}},
	}, {
		name:   "a Target and a ClusterTarget that map the namespace to the same place",
		me:     Reach{Name: "shop/a", Cluster: remote, Namespace: "shop", Mapping: map[string]string{"shop": "guests"}},
		others: []Reach{{Name: "east", Cluster: remote, Mapping: map[string]string{"shop": "guests"}}},
		want:   []Overlap{{Other: "east", SourceNamespace: "shop", TargetNamespace: "guests"}},
	}, {
		name:   "a self target and a remote one",
		me:     tenantSelf,
		others: []Reach{{Name: "east", Cluster: remote}},
	}, {
		name: "alone",
		me:   clusterSelf, others: []Reach{clusterSelf},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := Overlaps(tc.me, tc.others)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Overlaps = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestOverlapMessageNamesTheOtherAndTheNamespace(t *testing.T) {
	me := Reach{Name: "team-a/self", Cluster: SelfCluster, Namespace: "team-a"}
	msg := OverlapMessage(me, Overlaps(me, []Reach{{Name: "self", Cluster: SelfCluster}}))
	for _, want := range []string{"ClusterTarget self", "namespace team-a", "this cluster (self)"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not say %q", msg, want)
		}
	}
}
