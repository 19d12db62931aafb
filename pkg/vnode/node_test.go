package vnode

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

func TestNewNode(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name       string
		cfg        Config
		wantLabels map[string]string
	}{{
		name: "fixed labels only",
		cfg:  Config{NodeName: "flotilla-eu", Target: "eu"},
		wantLabels: map[string]string{
			"type": "virtual-kubelet", "kubernetes.io/role": "agent",
			"multicluster.flotilla.dev/target": "eu", "kubernetes.io/hostname": "flotilla-eu",
		},
	}, {
		name: "target labels are added but cannot replace the fixed ones",
		cfg: Config{NodeName: "flotilla-eu", Target: "eu", Labels: map[string]string{
			"topology.kubernetes.io/region":    "eu-west-1",
			"type":                             "kwok",
			"multicluster.flotilla.dev/target": "us",
		}},
		wantLabels: map[string]string{
			"type": "virtual-kubelet", "kubernetes.io/role": "agent",
			"multicluster.flotilla.dev/target": "eu", "kubernetes.io/hostname": "flotilla-eu",
			"topology.kubernetes.io/region": "eu-west-1",
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := tt.cfg.withDefaults()
			if err == nil {
				t.Fatal("withDefaults accepted a config without client and delegates")
			}
			n := newNode(cfg, State{Ready: true}, at)
			if n.Name != tt.cfg.NodeName {
				t.Errorf("name = %q, want %q", n.Name, tt.cfg.NodeName)
			}
			if diff := cmp.Diff(tt.wantLabels, n.Labels); diff != "" {
				t.Errorf("labels (-want +got):\n%s", diff)
			}
			wantTaints := []corev1.Taint{{Key: protocol.VirtualNodeTaintKey, Value: protocol.VirtualNodeTaintValue, Effect: corev1.TaintEffectNoSchedule}}
			if diff := cmp.Diff(wantTaints, n.Spec.Taints); diff != "" {
				t.Errorf("taints (-want +got):\n%s", diff)
			}
			ready := false
			for _, c := range n.Status.Conditions {
				switch {
				case c.Type == corev1.NodeReady:
					ready = c.Status == corev1.ConditionTrue
				case c.Status != corev1.ConditionFalse:
					t.Errorf("condition %s = %s, want False", c.Type, c.Status)
				}
				if !c.LastHeartbeatTime.Equal(&metav1.Time{Time: at}) {
					t.Errorf("condition %s heartbeat = %v, want %v", c.Type, c.LastHeartbeatTime, at)
				}
			}
			if !ready {
				t.Error("node is not Ready")
			}
			for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourcePods} {
				if q := n.Status.Allocatable[r]; q.Cmp(resource.MustParse("10k")) < 0 {
					t.Errorf("allocatable %s = %s, want a generous amount", r, q.String())
				}
			}
		})
	}
}

// TestNewNodeFollowsState checks that the node shows what its target
// publishes: capacity, free resources, its nodes' labels under the target's
// own, and Ready only while the target answers.
func TestNewNodeFollowsState(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	since := at.Add(-time.Minute)
	cfg := Config{NodeName: "flotilla-eu", Target: "eu", Capacity: DefaultCapacity(),
		Labels: map[string]string{"topology.kubernetes.io/region": "eu-west-1"}}
	capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("16Gi"), corev1.ResourcePods: resource.MustParse("220")}
	state := State{
		Ready: false, Reason: "Unreachable", Message: "connection refused", Since: since,
		Capacity: capacity,
		Free:     corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3"), corev1.ResourcePods: resource.MustParse("200")},
		Labels: map[string]string{
			"topology.kubernetes.io/region": "us-east-1", // the Target's label wins
			"topology.kubernetes.io/zone":   "eu-west-1a",
			"type":                          "kwok", // the fixed label wins
		},
	}
	n := newNode(cfg, state, at)
	if diff := cmp.Diff(capacity, n.Status.Allocatable); diff != "" {
		t.Errorf("allocatable (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(capacity, n.Status.Capacity); diff != "" {
		t.Errorf("capacity (-want +got):\n%s", diff)
	}
	if got, want := n.Annotations[FreeAnnotation], "cpu=3,pods=200"; got != want {
		t.Errorf("free annotation = %q, want %q", got, want)
	}
	for k, want := range map[string]string{"topology.kubernetes.io/region": "eu-west-1", "topology.kubernetes.io/zone": "eu-west-1a", "type": "virtual-kubelet"} {
		if n.Labels[k] != want {
			t.Errorf("label %s = %q, want %q", k, n.Labels[k], want)
		}
	}
	var ready *corev1.NodeCondition
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			ready = &n.Status.Conditions[i]
		}
	}
	if ready == nil || ready.Status != corev1.ConditionFalse || ready.Reason != "Unreachable" ||
		!strings.Contains(ready.Message, "connection refused") || !ready.LastTransitionTime.Time.Equal(since) {
		t.Errorf("Ready condition = %+v, want False, reason Unreachable, the cause, since %v", ready, since)
	}

	state.Ready, state.Capacity, state.Free = true, nil, nil
	n = newNode(cfg, state, at)
	if diff := cmp.Diff(DefaultCapacity(), n.Status.Allocatable); diff != "" {
		t.Errorf("allocatable without a summary (-want +got):\n%s", diff)
	}
	if _, ok := n.Annotations[FreeAnnotation]; ok {
		t.Error("free annotation without a summary")
	}
}

func TestStatusCoalescesAndSignalsFlips(t *testing.T) {
	s := NewStatus()
	flip := s.readyFlips()
	s.SetResources(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}, nil, nil)
	s.SetResources(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}, nil, nil)
	select {
	case <-flip:
		t.Fatal("a change of resources signalled a flip of Ready")
	default:
	}
	if len(s.changed) != 1 {
		t.Fatalf("%d pending changes, want 1 (coalesced)", len(s.changed))
	}
	<-s.changed
	s.SetResources(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}, nil, nil)
	if len(s.changed) != 0 {
		t.Fatal("setting the same resources signalled a change")
	}
	s.SetReady(false, "Unreachable", "down")
	select {
	case <-flip:
	default:
		t.Fatal("Ready turning false did not signal a flip")
	}
	if st := s.Get(); st.Ready || st.Since.IsZero() || st.Capacity.Cpu().String() != "2" {
		t.Errorf("state = %+v", st)
	}
}

func TestMergeTaints(t *testing.T) {
	ours := Taint()
	operator := corev1.Taint{Key: "example.com/maintenance", Effect: corev1.TaintEffectNoSchedule}
	tests := []struct {
		name        string
		existing    []corev1.Taint
		want        []corev1.Taint
		wantChanged bool
	}{
		{"missing is added", nil, []corev1.Taint{ours}, true},
		{"present is kept", []corev1.Taint{ours}, []corev1.Taint{ours}, false},
		{"others stay", []corev1.Taint{operator}, []corev1.Taint{operator, ours}, true},
		{
			"a different value is corrected in place",
			[]corev1.Taint{{Key: ours.Key, Value: "other", Effect: ours.Effect}, operator},
			[]corev1.Taint{ours, operator}, true,
		},
		{
			"the same key with another effect is someone else's",
			[]corev1.Taint{{Key: ours.Key, Value: ours.Value, Effect: corev1.TaintEffectNoExecute}},
			[]corev1.Taint{{Key: ours.Key, Value: ours.Value, Effect: corev1.TaintEffectNoExecute}, ours}, true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := append([]corev1.Taint(nil), tt.existing...)
			got, changed := mergeTaints(tt.existing, []corev1.Taint{ours})
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("taints (-want +got):\n%s", diff)
			}
			if changed != tt.wantChanged {
				t.Errorf("changed = %v, want %v", changed, tt.wantChanged)
			}
			if diff := cmp.Diff(before, tt.existing); diff != "" {
				t.Errorf("mergeTaints changed its input:\n%s", diff)
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	base := Config{NodeName: "flotilla-eu", Target: "eu", Delegates: nopDelegates{}}
	tests := []struct {
		name      string
		mutate    func(*Config)
		wantErr   string
		wantLease time.Duration
		wantRenew time.Duration
	}{
		{name: "no client", mutate: func(*Config) {}, wantErr: "no client"},
		{name: "no name nor target", mutate: func(c *Config) { c.NodeName, c.Target = "", "" }, wantErr: "no node name\nno target"},
		{name: "renew not shorter than the lease", mutate: func(c *Config) {
			c.LeaseDuration, c.LeaseRenewInterval = 4*time.Second, 4*time.Second
		}, wantErr: "renew interval"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := base
			tt.mutate(&cfg)
			_, err := cfg.withDefaults()
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
	cfg, _ := base.withDefaults()
	if cfg.LeaseDuration != DefaultLeaseDuration || cfg.LeaseRenewInterval != DefaultLeaseDuration/4 ||
		cfg.StatusUpdateInterval != DefaultStatusUpdateInterval || cfg.Workers != DefaultWorkers || cfg.Capacity == nil {
		t.Errorf("defaults not applied: %+v", cfg)
	}
}

type nopDelegates struct{}

func (nopDelegates) Get(*corev1.Pod) (*corev1.Pod, error)            { return nil, nil }
func (nopDelegates) Delete(context.Context, *corev1.Pod) error       { return nil }
func (nopDelegates) OnChange(func(*corev1.Pod))                      {}
func (nopDelegates) Lost(context.Context, *corev1.Pod) (bool, error) { return true, nil }
