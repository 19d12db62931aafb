package plugin

import (
	"github.com/flotilla-dev/flotilla/pkg/debugstate"
	"github.com/flotilla-dev/flotilla/pkg/scheduler/plugin/core"
)

// State is the scheduler's /debug/state: each profile that runs the plugin
// registers its state under the profile's name. kube-scheduler's own mux
// takes no extra handlers, so pkg/scheduler serves it on a listener of its
// own (--flotilla-debug-bind-address).
var State = debugstate.NewRegistry()

// profileState is what /debug/state shows of one profile.
type profileState struct {
	PermitTimeout string `json:"permitTimeout"`
	ShareTimeout  string `json:"shareTimeout"`
	// Reservations counts the reservations held: waiting, or allowed and
	// binding.
	Reservations int                                `json:"reservations"`
	Waiting      debugstate.List[core.Waiting]      `json:"waiting"`
	Quotas       debugstate.List[core.QuotaAccount] `json:"quotas"`
	QuotasKnown  bool                               `json:"quotasKnown"`
	// Shares are the gang shares held now.
	Shares debugstate.List[core.ShareState] `json:"shares"`
}

func (p *Plugin) debugState() any {
	waiting, held := p.manager.Waiting(debugstate.DefaultLimit)
	return profileState{
		PermitTimeout: p.manager.PermitTimeout().String(),
		ShareTimeout:  p.manager.ShareTimeout().String(),
		Shares:        debugstate.Bounded(p.manager.Shares(), debugstate.DefaultLimit),
		Reservations:  held,
		Waiting:       waiting,
		Quotas: core.Accounts(p.quotas.invitations.withQuota(), func(inv core.Invitation) core.Amounts {
			return p.quotas.ledger.Usage(inv.Cluster, inv.Covers, "")
		}, debugstate.DefaultLimit),
		QuotasKnown: p.quotas.invitations.synced() && p.quotas.podsSynced(),
	}
}
