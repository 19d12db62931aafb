package policy

import (
	"slices"
	"testing"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

func TestUnknownKeys(t *testing.T) {
	spread := &v1alpha1.PlacementPolicy{Spec: v1alpha1.PlacementPolicySpec{SpreadConstraints: []v1alpha1.SpreadConstraint{
		{TopologyKey: "topology.kubernetes.io/region"}, {TopologyKey: "topology.kubernetes.io/zone"}, {TopologyKey: "example.com/rack"},
	}}}
	keys := func(k ...string) func() map[string]bool {
		return func() map[string]bool {
			m := map[string]bool{}
			for _, key := range k {
				m[key] = true
			}
			return m
		}
	}
	for _, tc := range []struct {
		name   string
		policy *v1alpha1.PlacementPolicy
		keys   func() map[string]bool
		want   []string
	}{
		{"every key carried", spread, keys("topology.kubernetes.io/region", "topology.kubernetes.io/zone", "example.com/rack"), nil},
		{"two keys on no target, in the policy's order", spread, keys("topology.kubernetes.io/zone", "kubernetes.io/os"), []string{"topology.kubernetes.io/region", "example.com/rack"}},
		{"no target yet: nothing to tell", spread, keys(), nil},
		{"not asked", spread, nil, nil},
		{"no spread", &v1alpha1.PlacementPolicy{}, keys("x"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &StatusController{TopologyKeys: tc.keys}
			if got := s.unknownKeys(tc.policy); !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
