package webhook

import "testing"

func TestValidDNSNames(t *testing.T) {
	for _, tc := range []struct {
		names []string
		ok    bool
	}{
		{names: []string{"localhost"}, ok: true},
		{names: []string{"flotilla-agent.flotilla-system.svc", "flotilla-agent.flotilla-system.svc.cluster.local"}, ok: true},
		{names: nil},
		{names: []string{"127.0.0.1", "localhost"}},
		{names: []string{"localhost", "::1"}},
	} {
		if err := validDNSNames(tc.names); (err == nil) != tc.ok {
			t.Errorf("validDNSNames(%q) = %v, want ok %v", tc.names, err, tc.ok)
		}
	}
}
