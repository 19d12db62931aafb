package e2e

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// TestCRDValidation applies malformed invitations to a real API server and
// checks that each is refused with a message naming the field, and that
// the well-formed ones pass.
func TestCRDValidation(t *testing.T) {
	t.Parallel()
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{{Name: "c1", WithoutScheduler: true}}})
	cl := s.Cluster("c1").CRClient()
	const head = "apiVersion: multicluster.flotilla.dev/v1alpha1\n"
	for _, tc := range []struct {
		name, object string
		// want is "" for an object that must be accepted, else words the
		// refusal must contain.
		want []string
	}{
		{"cluster target with a secret", "kind: ClusterTarget\nmetadata: {name: ok1}\nspec: {kubeconfigSecretRef: {name: s}, labels: {topology.kubernetes.io/region: eu-west-1}, namespaceMapping: [{source: a, target: b}]}", nil},
		{"self target", "kind: Target\nmetadata: {name: ok2, namespace: default}\nspec: {self: true, targetNamespace: other}", nil},
		{"both self and a secret", "kind: ClusterTarget\nmetadata: {name: bad1}\nspec: {self: true, kubeconfigSecretRef: {name: s}}", []string{"spec.kubeconfigSecretRef", "exactly one of spec.self, spec.kubeconfigSecretRef and spec.clusterProfileRef"}},
		{"cluster target with a cluster profile", "kind: ClusterTarget\nmetadata: {name: ok-profile}\nspec: {clusterProfileRef: {namespace: fleet, name: spoke-1, accessProvider: secretreader, tokenSecretRef: {name: t}, allowedServers: ['https://spoke-1.example.com:6443']}}", nil},
		{"a secret and a cluster profile", "kind: ClusterTarget\nmetadata: {name: bad-profile1}\nspec: {kubeconfigSecretRef: {name: s}, clusterProfileRef: {namespace: fleet, name: spoke-1}}", []string{"spec.kubeconfigSecretRef", "exactly one of spec.self, spec.kubeconfigSecretRef and spec.clusterProfileRef"}},
		{"self and a cluster profile", "kind: ClusterTarget\nmetadata: {name: bad-profile2}\nspec: {self: true, clusterProfileRef: {namespace: fleet, name: spoke-1}}", []string{"exactly one of spec.self, spec.kubeconfigSecretRef and spec.clusterProfileRef"}},
		{"a cluster profile without its namespace", "kind: ClusterTarget\nmetadata: {name: bad-profile3}\nspec: {clusterProfileRef: {name: spoke-1}}", []string{"spec.clusterProfileRef.namespace"}},
		{"a namespaced Target naming a cluster profile", "kind: Target\nmetadata: {name: bad-profile4, namespace: default}\nspec: {clusterProfileRef: {namespace: fleet, name: spoke-1}}", []string{"spec.clusterProfileRef", "unknown field"}},
		{"neither self nor a secret", "kind: Target\nmetadata: {name: bad2, namespace: default}\nspec: {labels: {a: b}}", []string{"exactly one of spec.self and spec.kubeconfigSecretRef"}},
		{"unknown field", "kind: ClusterTarget\nmetadata: {name: bad3}\nspec: {self: true, selff: true}", []string{"spec.selff", "unknown field"}},
		{"namespace mapped to an invalid name", "kind: ClusterTarget\nmetadata: {name: bad4}\nspec: {self: true, namespaceMapping: [{source: a, target: Not_A_Namespace}]}", []string{"spec.namespaceMapping[0].target"}},
		{"invalid target namespace", "kind: Target\nmetadata: {name: bad5, namespace: default}\nspec: {self: true, targetNamespace: UPPER}", []string{"spec.targetNamespace"}},
		{"invalid label key", "kind: ClusterTarget\nmetadata: {name: bad6}\nspec: {self: true, labels: {'bad key!': x}}", []string{"spec.labels", "label key"}},
		{"secret without a name", "kind: ClusterTarget\nmetadata: {name: bad7}\nspec: {kubeconfigSecretRef: {key: k}}", []string{"spec.kubeconfigSecretRef.name"}},

		{"cluster source", "kind: ClusterSource\nmetadata: {name: ok3}\nspec: {clusterName: c2, identity: {managedServiceAccount: {}}, namespaces: [shop], createNamespaces: true, quota: {cpu: '8', memory: 16Gi, pods: 20}}", nil},
		{"source for a user", "kind: Source\nmetadata: {name: ok4, namespace: default}\nspec: {clusterName: c2, identity: {user: alice}}", nil},
		{"negative cpu quota", "kind: Source\nmetadata: {name: bad10, namespace: default}\nspec: {clusterName: c2, identity: {user: alice}, quota: {cpu: '-1'}}", []string{"spec.quota.cpu", "must not be negative"}},
		{"unparseable memory quota", "kind: Source\nmetadata: {name: bad11, namespace: default}\nspec: {clusterName: c2, identity: {user: alice}, quota: {memory: lots}}", []string{"spec.quota.memory"}},
		{"negative pods quota", "kind: Source\nmetadata: {name: bad12, namespace: default}\nspec: {clusterName: c2, identity: {user: alice}, quota: {pods: -3}}", []string{"spec.quota.pods"}},
		{"two identities", "kind: Source\nmetadata: {name: bad13, namespace: default}\nspec: {clusterName: c2, identity: {user: alice, managedServiceAccount: {}}}", []string{"spec.identity", "exactly one of"}},
		{"no identity", "kind: Source\nmetadata: {name: bad14, namespace: default}\nspec: {clusterName: c2, identity: {}}", []string{"spec.identity", "exactly one of"}},
		{"no cluster name", "kind: Source\nmetadata: {name: bad15, namespace: default}\nspec: {identity: {user: alice}}", []string{"spec.clusterName"}},
		{"namespaces and a selector", "kind: ClusterSource\nmetadata: {name: bad16}\nspec: {clusterName: c2, identity: {user: a}, namespaces: [a], namespaceSelector: {matchLabels: {a: b}}}", []string{"spec.namespaces", "exactly one of spec.namespaces and spec.namespaceSelector"}},
		{"invalid invited namespace", "kind: ClusterSource\nmetadata: {name: bad17}\nspec: {clusterName: c2, identity: {user: a}, namespaces: [Bad_NS]}", []string{"spec.namespaces[0]"}},
		{"placement policy", "kind: PlacementPolicy\nmetadata: {name: ok5, namespace: default}\nspec: {podSelector: {matchLabels: {app: web}}, clusterSelector: {matchLabels: {provider: onprem}}, clusterAffinity: {preferred: [{weight: 10, selector: {matchLabels: {tier: gold}}}], fallbackGroups: [{matchLabels: {site: a}}, {}]}, spreadConstraints: [{topologyKey: topology.kubernetes.io/region}, {topologyKey: topology.kubernetes.io/zone, maxSkew: 2, whenUnsatisfiable: DoNotSchedule}], scoring: {spreadWeight: 2, window: {candidates: 2, timeoutMilliseconds: 300}}, capacityType: {maxOnDemand: 3}}", nil},
		{"maxSkew of 0", "kind: PlacementPolicy\nmetadata: {name: bad20, namespace: default}\nspec: {spreadConstraints: [{topologyKey: zone, maxSkew: 0}]}", []string{"spec.spreadConstraints[0].maxSkew"}},
		{"unknown whenUnsatisfiable", "kind: PlacementPolicy\nmetadata: {name: bad21, namespace: default}\nspec: {spreadConstraints: [{topologyKey: zone, whenUnsatisfiable: Maybe}]}", []string{"spec.spreadConstraints[0].whenUnsatisfiable"}},
		{"topology key that is no label key", "kind: PlacementPolicy\nmetadata: {name: bad22, namespace: default}\nspec: {spreadConstraints: [{topologyKey: 'not a key!'}]}", []string{"spec.spreadConstraints[0].topologyKey"}},
		{"one topology key twice", "kind: PlacementPolicy\nmetadata: {name: bad23, namespace: default}\nspec: {spreadConstraints: [{topologyKey: zone}, {topologyKey: zone}]}", []string{"spec.spreadConstraints[1]", "Duplicate"}},
		{"negative maxOnDemand", "kind: PlacementPolicy\nmetadata: {name: bad24, namespace: default}\nspec: {capacityType: {maxOnDemand: -1}}", []string{"spec.capacityType.maxOnDemand"}},
		{"a value both on-demand and spot", "kind: PlacementPolicy\nmetadata: {name: bad25, namespace: default}\nspec: {capacityType: {maxOnDemand: 1, onDemandValues: [x], spotValues: [x]}}", []string{"spec.capacityType", "must not share a value"}},
		{"preferred weight out of range", "kind: PlacementPolicy\nmetadata: {name: bad26, namespace: default}\nspec: {clusterAffinity: {preferred: [{weight: 0, selector: {}}]}}", []string{"spec.clusterAffinity.preferred[0].weight"}},
		{"unknown source field", "kind: ClusterSource\nmetadata: {name: bad18}\nspec: {clusterName: c2, identity: {user: a}, namespaces: [a], allowEverything: true}", []string{"spec.allowEverything", "unknown field"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(head+tc.object), &obj.Object); err != nil {
				t.Fatal(err)
			}
			err := cl.Create(t.Context(), obj, sandboxStrict)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("refusal does not say %q: %v", w, err)
				}
			}
		})
	}
}

// sandboxStrict makes the API server refuse unknown fields, as kubectl
// apply does by default.
var sandboxStrict = client.FieldValidation(metav1.FieldValidationStrict)
