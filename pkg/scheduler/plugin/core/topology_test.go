package core

import (
	"context"
	"encoding/json"
	"maps"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// equalState compares states field by field (a State holds a map).
func equalState(a, b protocol.State) bool {
	return a.Phase == b.Phase && a.Nonce == b.Nonce && a.Node == b.Node && a.Score == b.Score &&
		a.Reason == b.Reason && maps.Equal(a.Topology, b.Topology) && (a.Topology == nil) == (b.Topology == nil)
}

// TestReportedTopology: a reservation reports its node's values of the
// configured topology keys, Reserved and then Bound (by the binding itself
// or by PostBind), so that the source counts the pod where it runs; a key
// the node has no label of, or a label that is no topology key, is not
// reported.
func TestReportedTopology(t *testing.T) {
	const (
		region = "topology.kubernetes.io/region"
		zone   = "topology.kubernetes.io/zone"
	)
	ctx := context.Background()
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "uid-c"}}
	for _, tt := range []struct {
		name string
		keys []string // nil: the default keys
		node map[string]string
		want map[string]string
	}{
		{
			name: "zone and region",
			node: map[string]string{region: "eu", zone: "eu-1a", "kubernetes.io/hostname": "node-1"},
			want: map[string]string{region: "eu", zone: "eu-1a"},
		},
		{
			name: "capacity type among the defaults",
			node: map[string]string{region: "eu", zone: "eu-1a", protocol.DefaultCapacityNodeLabel: "spot"},
			want: map[string]string{region: "eu", zone: "eu-1a", protocol.DefaultCapacityNodeLabel: "spot"},
		},
		{
			name: "a node without a zone reports none",
			node: map[string]string{region: "eu"},
			want: map[string]string{region: "eu"},
		},
		{
			name: "a node with none of the keys reports no topology",
			node: map[string]string{"kubernetes.io/hostname": "node-1"},
			want: nil,
		},
		{
			name: "keys not configured are not reported",
			keys: []string{zone, "example.com/rack"},
			node: map[string]string{region: "eu", zone: "eu-1a", "example.com/rack": "r7", "example.com/row": "3"},
			want: map[string]string{zone: "eu-1a", "example.com/rack": "r7"},
		},
		{
			name: "no keys configured",
			keys: []string{},
			node: map[string]string{region: "eu", zone: "eu-1a"},
			want: nil,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			reserve := func(t *testing.T) (*StateWriter, *Manager, string) {
				t.Helper()
				w := NewStateWriter("test", newRecordingPatcher(nil), nil)
				m := NewManager(Options{PluginName: "p", SchedulerName: "s", TopologyKeys: tt.keys}, nil, nil, w)
				nonce, err := m.Reserve(ctx, pod, "node-1", maps.Clone(tt.node), 7)
				if err != nil {
					t.Fatal(err)
				}
				return w, m, nonce
			}
			pending := func(w *StateWriter) protocol.State {
				w.mu.Lock()
				defer w.mu.Unlock()
				return w.pending[pod.UID].state
			}

			w, m, nonce := reserve(t)
			if got, want := pending(w), (protocol.State{Phase: protocol.PhaseReserved, Nonce: nonce, Node: "node-1", Score: 7, Topology: tt.want}); !equalState(got, want) {
				t.Errorf("Reserve reported %+v, want %+v", got, want)
			}

			// The binding's own report, as the API server stores it.
			annotations, err := m.BindingAnnotations(pod, "node-1")
			if err != nil {
				t.Fatal(err)
			}
			var bound protocol.State
			if err := json.Unmarshal([]byte(annotations[protocol.StateAnnotation]), &bound); err != nil {
				t.Fatalf("binding's state %q: %v", annotations[protocol.StateAnnotation], err)
			}
			if want := (protocol.State{Phase: protocol.PhaseBound, Nonce: nonce, Node: "node-1", Topology: tt.want}); !equalState(bound, want) {
				t.Errorf("the binding reports %+v, want %+v", bound, want)
			}

			// Another binder bound it: PostBind reports the same.
			w, m, nonce = reserve(t)
			m.Bound(ctx, pod, "node-1")
			if got, want := pending(w), (protocol.State{Phase: protocol.PhaseBound, Nonce: nonce, Node: "node-1", Topology: tt.want}); !equalState(got, want) {
				t.Errorf("PostBind reported %+v, want %+v", got, want)
			}
		})
	}
}

// TestReservedTopologyIsTheNodesAtReserve: the Bound report carries the
// values the reservation was made with, the node's at Reserve.
func TestReservedTopologyIsTheNodesAtReserve(t *testing.T) {
	ctx := context.Background()
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "uid-c"}}
	w := NewStateWriter("test", newRecordingPatcher(nil), nil)
	m := NewManager(Options{PluginName: "p", SchedulerName: "s"}, nil, nil, w)
	labels := map[string]string{"topology.kubernetes.io/zone": "a"}
	if _, err := m.Reserve(ctx, pod, "node-1", labels, 0); err != nil {
		t.Fatal(err)
	}
	labels["topology.kubernetes.io/zone"] = "changed"
	m.Bound(ctx, pod, "node-1")
	w.mu.Lock()
	got := w.pending[pod.UID].state
	w.mu.Unlock()
	if got.Topology["topology.kubernetes.io/zone"] != "a" {
		t.Errorf("Bound reports %v, want zone a", got.Topology)
	}
}
