package core

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// TestWaiting checks that the state lists the candidates Permit holds for
// their source, and neither those allowed (binding) nor those only reserved.
func TestWaiting(t *testing.T) {
	ctx := context.Background()
	pods := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	m := NewManager(Options{PluginName: "p", SchedulerName: "s"}, nil, corelisters.NewPodLister(pods), NewStateWriter("test", newRecordingPatcher(nil), nil))
	candidate := func(name string) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: k8stypes.UID("uid-" + name),
			Labels: map[string]string{protocol.CandidateLabel: "true", protocol.SourceClusterLabel: "src-" + name, protocol.SourceUIDLabel: "src-uid-" + name}}}
	}
	reserve := func(pod *v1.Pod, node string) string {
		nonce, err := m.Reserve(ctx, pod, node, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		return nonce
	}
	b, a, allowed, fresh := candidate("b"), candidate("a"), candidate("allowed"), candidate("fresh")
	beforeReserve := time.Now()
	nonceB, nonceA := reserve(b, "node-2"), reserve(a, "node-1")
	nonceAllowed := reserve(allowed, "node-3")
	reserve(fresh, "node-4")
	allowed.Annotations = map[string]string{protocol.AllowedAnnotation: protocol.Allowance{SourceUID: "src-uid-allowed", Nonce: nonceAllowed}.Encode()}
	if err := pods.Add(allowed); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	for _, p := range []*v1.Pod{b, a, allowed} {
		m.Permit(ctx, p)
	}

	got, held := m.Waiting(0)
	if held != 4 {
		t.Errorf("held = %d, want the 4 reservations", held)
	}
	if got.Total != 2 || len(got.Items) != 2 {
		t.Fatalf("waiting = %+v; want a and b (allowed is binding, fresh never waited)", got)
	}
	wa, wb := got.Items[0], got.Items[1]
	if wa.Pod != "ns/a" || wb.Pod != "ns/b" {
		t.Errorf("order %s, %s; want by namespace/name", wa.Pod, wb.Pod)
	}
	if wa.Nonce != nonceA || wa.Node != "node-1" || wa.Cluster != "src-a" || wa.UID != "uid-a" || wa.Since.Before(before) {
		t.Errorf("a shown as %+v, want nonce %s on node-1 from src-a, waiting since the Permit above", wa, nonceA)
	}
	if wb.Nonce != nonceB || wb.Node != "node-2" {
		t.Errorf("b shown as %+v", wb)
	}

	if kind, held := m.Unreserve(ctx, a, "node-1"); kind == "" || held <= 0 || held > time.Since(beforeReserve) {
		t.Errorf("a's Unreserve: %q after holding its node %s; want a kind, held since its Reserve (at most %s)", kind, held, time.Since(beforeReserve))
	}
	if got, held := m.Waiting(1); got.Total != 1 || got.Items[0].Pod != "ns/b" || held != 3 {
		t.Errorf("after a's Unreserve: %+v, held %d; want only b, 3 held", got, held)
	}
}

func TestAccount(t *testing.T) {
	inv := Invitation{Name: "Source ns/src", Cluster: "src", Quota: Quota{CPU: ptr.To[int64](2000), Pods: ptr.To[int64](3)}}
	a := Account(inv, Amounts{CPU: 2500, Memory: 1 << 30, Pods: 1})
	raw, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"invitation":"Source ns/src","cluster":"src","resources":{"cpu":{"used":"2500m","limit":"2","over":true},"memory":{"used":"1Gi"},"pods":{"used":"1","limit":"3"}}}`
	if string(raw) != want {
		t.Errorf("account\n got %s\nwant %s", raw, want)
	}

	l := Accounts([]Invitation{{Name: "Source z/z", Cluster: "z"}, inv}, func(inv Invitation) Amounts {
		return Amounts{Pods: int64(len(inv.Name))}
	}, 0)
	if l.Total != 2 || l.Items[0].Invitation != "Source ns/src" || l.Items[0].Resources["pods"].Used != "13" {
		t.Errorf("accounts %+v; want by name, each with its own usage", l)
	}
}
