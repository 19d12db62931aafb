package plugin

import (
	"context"
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/scheduler/plugin/core"
)

// quotaReportInterval is how often usage is compared with every quota for
// the metrics and the log.
const quotaReportInterval = 10 * time.Second

// quotas enforces the invitations' quotas: the ledger counts what each
// source's candidates hold, fed by the scheduler's pod informer and by this
// plugin's Reserve, Unreserve and PostBind; the invitations come from an
// informer. Candidates refused for a quota are activated again when usage
// of their cluster drops or its invitations change.
type quotas struct {
	handle      fwk.Handle
	ledger      *core.Ledger
	invitations *invitations
	podsSynced  cache.InformerSynced
}

func newQuotas(handle fwk.Handle) (*quotas, error) {
	register()
	inv, err := newInvitations(handle.KubeConfig(), handle.SharedInformerFactory().Core().V1().Namespaces().Lister())
	if err != nil {
		return nil, err
	}
	q := &quotas{handle: handle, ledger: core.NewLedger(), invitations: inv}
	reg, err := handle.SharedInformerFactory().Core().V1().Pods().Informer().AddEventHandler(q.ledger.EventHandler(q.activate))
	if err != nil {
		return nil, fmt.Errorf("counting candidate pods for quotas: %w", err)
	}
	q.podsSynced = reg.HasSynced
	// A quota raised (or an invitation gone) may let waiting candidates in.
	if err := inv.onChange(func(cluster string) { q.activate(q.ledger.Waiting(cluster)) }); err != nil {
		return nil, err
	}
	return q, nil
}

// run reads the invitations, retries what was deferred until they and the
// pods were read, and reports usage until ctx is done.
func (q *quotas) run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	q.invitations.run(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), q.invitations.synced, q.podsSynced) {
		return
	}
	logger.V(2).Info("Quotas known: scheduling candidates within them")
	q.activate(q.ledger.Waiting(""))
	over := map[string]bool{}
	wait.UntilWithContext(ctx, func(ctx context.Context) { q.report(ctx, over) }, quotaReportInterval)
}

// admit returns why a candidate may not be scheduled now, or "".
func (q *quotas) admit(pod *v1.Pod) string {
	if !q.invitations.synced() || !q.podsSynced() {
		q.ledger.Defer(pod)
		return "quota not known yet: the scheduler is reading the invitations and the pods that count against them"
	}
	q.ledger.Retrying(pod)
	cluster := pod.Labels[protocol.SourceClusterLabel]
	reason := q.ledger.Admit(pod, q.invitations.covering(cluster, pod.Namespace))
	if reason != "" {
		quotaRefusals.WithLabelValues(cluster).Inc()
	}
	return reason
}

func (q *quotas) activate(pods []*v1.Pod) { activate(q.handle, pods) }

// activate moves pods from the scheduler's unschedulable queue to its
// active queue, so that a candidate refused until something changed does
// not wait for the queue's periodic flush.
func activate(handle fwk.Handle, pods []*v1.Pod) {
	if len(pods) == 0 {
		return
	}
	m := make(map[string]*v1.Pod, len(pods))
	for _, pod := range pods {
		m[cache.MetaObjectToName(pod).String()] = pod
	}
	handle.Activate(klog.Background(), m)
}

// report sets the quota metrics and logs each invitation whose usage went
// above its quota (it was lowered below what runs: nothing is evicted, new
// candidates wait until usage drains) or back within it.
func (q *quotas) report(ctx context.Context, over map[string]bool) {
	logger := klog.FromContext(ctx)
	quotaUsed.Reset()
	quotaLimit.Reset()
	seen := map[string]bool{}
	for _, inv := range q.invitations.withQuota() {
		used := q.ledger.Usage(inv.Cluster, inv.Covers, "")
		set := func(name string, limit *int64, value int64, scale float64) {
			if limit != nil {
				quotaLimit.WithLabelValues(inv.Name, name).Set(float64(*limit) / scale)
			}
			quotaUsed.WithLabelValues(inv.Name, name).Set(float64(value) / scale)
		}
		set(string(v1.ResourceCPU), inv.Quota.CPU, used.CPU, 1000)
		set(string(v1.ResourceMemory), inv.Quota.Memory, used.Memory, 1)
		set(string(v1.ResourcePods), inv.Quota.Pods, used.Pods, 1)

		seen[inv.Name] = true
		exceeded := inv.Quota.Over(used)
		switch {
		case len(exceeded) > 0 && !over[inv.Name]:
			logger.Info("Invitation's candidates hold more than its quota, which was lowered below what runs: nothing is evicted, new candidates wait until usage drains",
				"invitation", inv.Name, "over", strings.Join(exceeded, ", "))
		case len(exceeded) == 0 && over[inv.Name]:
			logger.Info("Invitation's candidates are within its quota again", "invitation", inv.Name, "used", used.String())
		}
		over[inv.Name] = len(exceeded) > 0
	}
	for name := range over {
		if !seen[name] {
			delete(over, name)
		}
	}
}
