package target

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/debugstate"
)

func newTestTarget(t *testing.T, name string) *Target {
	t.Helper()
	tg, err := New(Config{Name: name, REST: &rest.Config{Host: "https://127.0.0.1:1"}, SourceCluster: "src"})
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

func TestDebugState(t *testing.T) {
	up, down, fresh := newTestTarget(t, "b-up"), newTestTarget(t, "a-down"), newTestTarget(t, "c-fresh")
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	up.setHealth(classify(nil), at)
	down.setHealth(Health{Reason: v1alpha1.ReasonUnreachable, Message: "dial tcp: refused"}, at)
	down.setErr(errors.New("target a-down: creating candidate x/y: dial tcp: refused"))
	set := NewSet(up, down, fresh)

	l := set.DebugState(0)().(debugstate.List[State])
	if l.Total != 3 || l.Omitted != 0 || len(l.Items) != 3 {
		t.Fatalf("got total %d omitted %d items %d, want all 3", l.Total, l.Omitted, len(l.Items))
	}
	names := []string{l.Items[0].Name, l.Items[1].Name, l.Items[2].Name}
	if strings.Join(names, ",") != "a-down,b-up,c-fresh" {
		t.Errorf("targets in order %v, want by name", names)
	}
	d, u, f := l.Items[0], l.Items[1], l.Items[2]
	if d.Reachable || d.Reason != v1alpha1.ReasonUnreachable || !strings.Contains(d.LastError, "refused") || d.LastProbe == nil || !d.LastProbe.Equal(at) {
		t.Errorf("unreachable target shown as %+v", d)
	}
	if !u.Reachable || !u.Authorized || u.LastError != "" || u.VirtualNode != "flotilla-b-up" {
		t.Errorf("healthy target shown as %+v", u)
	}
	if f.Reachable || f.LastProbe != nil || f.Synced {
		t.Errorf("a target never looked at is shown as %+v", f)
	}
	if _, err := json.Marshal(l); err != nil {
		t.Errorf("state does not encode: %v", err)
	}

	capped := set.DebugState(2)().(debugstate.List[State])
	if capped.Total != 3 || capped.Omitted != 1 || len(capped.Items) != 2 || capped.Items[1].Name != "b-up" {
		t.Errorf("limit 2: total %d omitted %d items %d; want 3, 1, the first 2", capped.Total, capped.Omitted, len(capped.Items))
	}
}
