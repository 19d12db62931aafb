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
			n := newNode(cfg, at)
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

func (nopDelegates) Get(*corev1.Pod) (*corev1.Pod, error)      { return nil, nil }
func (nopDelegates) Delete(context.Context, *corev1.Pod) error { return nil }
func (nopDelegates) OnChange(func(*corev1.Pod))                {}
