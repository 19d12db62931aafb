package chaos

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// Fault kinds.
const (
	AgentKill      = "agent-kill"      // kill -9 the leading agent replica, start it again
	AgentHandover  = "agent-handover"  // kill -9 the leader, then the other replica while it takes over
	AgentPause     = "agent-pause"     // SIGSTOP the leader, at times past its lease
	SchedulerKill  = "scheduler-kill"  // kill -9 Flotilla's scheduler, start it again
	SchedulerPause = "scheduler-pause" // SIGSTOP Flotilla's scheduler
	APIServerKill  = "apiserver-kill"  // kill -9 the API server, start it again
	APIServerPause = "apiserver-pause" // SIGSTOP the API server: every watch on it goes stale
	Blackhole      = "blackhole"       // the other clusters' path to one target drops every byte
)

// FaultKinds lists every fault, in the order the summary prints them.
var FaultKinds = []string{AgentKill, AgentHandover, AgentPause, SchedulerKill, SchedulerPause, APIServerKill, APIServerPause, Blackhole}

// Injector injects one fault at a time into the clusters, drawn from its
// seed, and heals it before the next.
type Injector struct {
	Clusters map[string]*sandbox.Cluster
	// Agents are the agent replicas of each cluster.
	Agents map[string][]*sandbox.Agent
	// Hole is the path of the other clusters to target HoleTarget.
	Hole       *sandbox.Forwarder
	HoleTarget string
	// LeaseDuration is the agents' leader-election lease.
	LeaseDuration time.Duration
	Logf          func(format string, args ...any)

	rand   *rand.Rand
	names  []string
	mu     sync.Mutex
	counts map[string]int
	errs   []error
}

// NewInjector returns an injector drawing from seed.
func NewInjector(seed uint64, in *Injector) *Injector {
	in.rand = rand.New(rand.NewPCG(seed, 0x6661756c))
	in.counts = map[string]int{}
	for name := range in.Clusters {
		in.names = append(in.names, name)
	}
	sort.Strings(in.names)
	return in
}

// Counts returns how many faults of each kind were injected.
func (in *Injector) Counts() map[string]int {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := map[string]int{}
	for _, k := range FaultKinds {
		out[k] = in.counts[k]
	}
	return out
}

// Errors are the failures to inject or heal a fault (the harness's, not
// Flotilla's: a component that did not come back).
func (in *Injector) Errors() []error {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]error(nil), in.errs...)
}

func (in *Injector) fail(err error) {
	if err == nil {
		return
	}
	in.mu.Lock()
	in.errs = append(in.errs, err)
	in.mu.Unlock()
	in.Logf("fault: %v", err)
}

// Run injects faults until ctx ends, then heals everything.
func (in *Injector) Run(ctx context.Context) {
	for ctx.Err() == nil {
		in.Supervise()
		kind := FaultKinds[in.rand.IntN(len(FaultKinds))]
		cluster := in.names[in.rand.IntN(len(in.names))]
		// Every duration is drawn now, whatever the fault, so the sequence
		// stays the same for a seed.
		down := time.Duration(2000+in.rand.IntN(10000)) * time.Millisecond
		second := time.Duration(in.rand.IntN(int(in.LeaseDuration/time.Millisecond)+2000)) * time.Millisecond
		gap := time.Duration(2000+in.rand.IntN(4000)) * time.Millisecond
		in.inject(ctx, kind, cluster, down, second)
		sleepCtx(ctx, gap)
	}
	in.Heal()
}

// inject runs one fault to its end; ctx ending cuts its wait short, and it
// heals all the same.
func (in *Injector) inject(ctx context.Context, kind, cluster string, down, second time.Duration) {
	c := in.Clusters[cluster]
	in.mu.Lock()
	in.counts[kind]++
	in.mu.Unlock()
	// Components come back under a context of their own: a fault under
	// way when the run ends still heals.
	heal, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	switch kind {
	case AgentKill:
		a := in.leader(cluster)
		in.Logf("fault: %s %s/%s for %s", kind, cluster, a, down)
		in.fail(a.Kill())
		sleepCtx(ctx, down)
		in.fail(a.Start())
	case AgentHandover:
		a := in.leader(cluster)
		b := in.other(cluster, a)
		in.Logf("fault: %s %s/%s, then %s after %s", kind, cluster, a, b, second)
		in.fail(a.Kill())
		sleepCtx(ctx, second)
		in.fail(b.Kill())
		sleepCtx(ctx, down/4)
		in.fail(a.Start())
		in.fail(b.Start())
	case AgentPause:
		a := in.leader(cluster)
		in.Logf("fault: %s %s/%s for %s", kind, cluster, a, down)
		in.fail(a.Pause())
		sleepCtx(ctx, down)
		in.fail(a.Resume())
	case SchedulerKill:
		in.Logf("fault: %s %s after %s", kind, cluster, down/4)
		in.fail(c.Kill(sandbox.CandidateScheduler))
		sleepCtx(ctx, down/4)
		in.fail(c.Start(heal, sandbox.CandidateScheduler))
	case SchedulerPause:
		in.Logf("fault: %s %s for %s", kind, cluster, down)
		in.fail(c.Pause(sandbox.CandidateScheduler))
		sleepCtx(ctx, down)
		in.fail(c.Resume(sandbox.CandidateScheduler))
	case APIServerKill:
		in.Logf("fault: %s %s for %s", kind, cluster, down)
		in.fail(c.Kill(sandbox.APIServer))
		sleepCtx(ctx, down)
		in.fail(c.Start(heal, sandbox.APIServer))
	case APIServerPause:
		in.Logf("fault: %s %s for %s", kind, cluster, down)
		in.fail(c.Pause(sandbox.APIServer))
		sleepCtx(ctx, down)
		in.fail(c.Resume(sandbox.APIServer))
	case Blackhole:
		in.Logf("fault: %s %s (as the others reach it) for %s", kind, in.HoleTarget, 2*down)
		in.Hole.Blackhole()
		sleepCtx(ctx, 2*down)
		in.Hole.Heal()
	}
}

// Supervise starts again every process that exited on its own, as the
// kubelet restarts a container: an agent replica or a scheduler exits when
// it loses its lease (its API server was away longer than its renew
// deadline).
func (in *Injector) Supervise() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, name := range in.names {
		c := in.Clusters[name]
		for _, comp := range []sandbox.Component{sandbox.APIServer, sandbox.CandidateScheduler} {
			if !c.Running(comp) {
				in.Logf("supervisor: %s/%s is down, starting it", name, comp)
				_ = c.Kill(comp) // forget the exited process
				in.fail(c.Start(ctx, comp))
			}
		}
		for _, a := range in.Agents[name] {
			if !a.Running() {
				in.Logf("supervisor: %s/%s exited, starting it", name, a)
				_ = a.Kill()
				in.fail(a.Start())
			}
		}
	}
}

// Heal ends every fault that may be left: the blackhole, paused processes,
// and processes that are down.
func (in *Injector) Heal() {
	in.Hole.Heal()
	for _, name := range in.names {
		c := in.Clusters[name]
		for _, comp := range []sandbox.Component{sandbox.APIServer, sandbox.CandidateScheduler} {
			if c.Running(comp) {
				_ = c.Resume(comp)
			}
		}
		for _, a := range in.Agents[name] {
			if a.Running() {
				_ = a.Resume()
			}
		}
	}
	in.Supervise()
}

// leader is the agent replica of a cluster that holds the lease, as its
// metrics say; a random one when none answers.
func (in *Injector) leader(cluster string) *sandbox.Agent {
	agents := in.Agents[cluster]
	client := &http.Client{Timeout: time.Second}
	for _, a := range agents {
		if leads(client, a.MetricsAddr) {
			return a
		}
	}
	return agents[in.rand.IntN(len(agents))]
}

func (in *Injector) other(cluster string, a *sandbox.Agent) *sandbox.Agent {
	for _, b := range in.Agents[cluster] {
		if b != a {
			return b
		}
	}
	return a
}

// leads reads controller-runtime's leader_election_master_status gauge.
func leads(client *http.Client, addr string) bool {
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "leader_election_master_status{") && strings.HasSuffix(line, " 1") {
			return true
		}
	}
	return false
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// FormatCounts renders counts as "k=v" pairs in the given order.
func FormatCounts[K ~string](order []K, counts map[K]int) string {
	var parts []string
	for _, k := range order {
		parts = append(parts, fmt.Sprintf("%s=%d", k, counts[k]))
	}
	return strings.Join(parts, " ")
}
