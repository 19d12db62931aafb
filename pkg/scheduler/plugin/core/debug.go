package core

import (
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/flotilla-dev/flotilla/pkg/debugstate"
)

// Waiting is a candidate waiting in Permit for its source, as the
// scheduler's /debug/state shows it.
type Waiting struct {
	// Pod is "<namespace>/<name>".
	Pod     string    `json:"pod"`
	UID     types.UID `json:"uid"`
	Cluster string    `json:"cluster"`
	Nonce   string    `json:"nonce"`
	Node    string    `json:"node"`
	// Since is when Permit began to wait.
	Since time.Time `json:"since"`
}

// Waiting lists the candidates waiting in Permit whose source has not
// answered yet, by namespace and name, at most limit of them; held counts
// every reservation the Manager holds (waiting, or allowed and binding).
func (m *Manager) Waiting(limit int) (waiting debugstate.List[Waiting], held int) {
	m.mu.Lock()
	var out []Waiting
	for _, r := range m.reserved {
		if r.WaitingSince.IsZero() || r.Settled {
			continue
		}
		out = append(out, Waiting{
			Pod: r.Pod.Namespace + "/" + r.Pod.Name, UID: r.Pod.UID, Cluster: r.Cluster,
			Nonce: r.Nonce, Node: r.Node, Since: r.WaitingSince,
		})
	}
	held = len(m.reserved)
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		return out[i].Pod < out[j].Pod || out[i].Pod == out[j].Pod && out[i].UID < out[j].UID
	})
	return debugstate.Bounded(out, limit), held
}

// QuotaAccount is one invitation's quota and what its candidates hold, as
// the scheduler's /debug/state shows it: per resource, the usage and the
// limit (absent: no bound) as quantities.
type QuotaAccount struct {
	Invitation string                   `json:"invitation"`
	Cluster    string                   `json:"cluster"`
	Resources  map[string]QuotaResource `json:"resources"`
}

// QuotaResource is the usage and limit of one resource.
type QuotaResource struct {
	Used  string `json:"used"`
	Limit string `json:"limit,omitempty"`
	// Over: the usage is above the limit (the quota was lowered below
	// what runs; new candidates wait until it drains).
	Over bool `json:"over,omitempty"`
}

// Account renders an invitation's quota against what it uses.
func Account(inv Invitation, used Amounts) QuotaAccount {
	a := QuotaAccount{Invitation: inv.Name, Cluster: inv.Cluster, Resources: map[string]QuotaResource{}}
	add := func(name string, used int64, limit *int64, format func(int64) string) {
		r := QuotaResource{Used: format(used)}
		if limit != nil {
			r.Limit, r.Over = format(*limit), used > *limit
		}
		a.Resources[name] = r
	}
	add("cpu", used.CPU, inv.Quota.CPU, func(v int64) string { return resource.NewMilliQuantity(v, resource.DecimalSI).String() })
	add("memory", used.Memory, inv.Quota.Memory, func(v int64) string { return resource.NewQuantity(v, resource.BinarySI).String() })
	add("pods", used.Pods, inv.Quota.Pods, func(v int64) string { return resource.NewQuantity(v, resource.DecimalSI).String() })
	return a
}

// Accounts renders every invitation's account, by invitation name, at
// most limit of them; usage reads what the ledger counts for one.
func Accounts(invitations []Invitation, usage func(Invitation) Amounts, limit int) debugstate.List[QuotaAccount] {
	out := make([]QuotaAccount, 0, len(invitations))
	for _, inv := range invitations {
		out = append(out, Account(inv, usage(inv)))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Invitation < out[j].Invitation })
	return debugstate.Bounded(out, limit)
}
