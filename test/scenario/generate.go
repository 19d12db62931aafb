package scenario

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// Names shared by both worlds.
const (
	// SourceCluster is the one cluster whose pods are placed.
	SourceCluster = "src"
	// OracleCluster runs plain kube-scheduler over every target's nodes.
	OracleCluster = "oracle"
	// Namespace holds the workloads, in the source and the oracle, and
	// the candidates in the targets.
	Namespace = "scn"

	RegionKey   = "topology.kubernetes.io/region"
	ZoneKey     = "topology.kubernetes.io/zone"
	CapacityKey = protocol.DefaultCapacityNodeLabel

	DoNotSchedule  = "DoNotSchedule"
	ScheduleAnyway = "ScheduleAnyway"
)

// Workload kinds.
const (
	KindDeployment  = "Deployment"
	KindStatefulSet = "StatefulSet"
	KindJob         = "Job"
)

// Action kinds of a script.
const (
	ActCreate = "create" // create a workload
	ActScale  = "scale"  // set its replicas (a Job's parallelism)
	ActDelete = "delete" // delete a workload and its pods
	// Faults.
	FaultDeleteCandidate = "delete-candidate" // delete one pending candidate in a target
	// FaultDeleteElected: for 30 s, delete up to Draw candidates of one
	// cluster the moment the source allows them, before they bind (with
	// their resourceVersion as a precondition): elections move.
	FaultDeleteElected = "delete-elected"
	// FaultFreezeScheduler: the moment the source allows a candidate in
	// Cluster, freeze (SIGSTOP) that cluster's Flotilla scheduler for
	// Duration: the elections it holds outlive the agent's election
	// timeout and move.
	FaultFreezeScheduler = "freeze-scheduler"
	FaultDeleteTarget    = "delete-target" // delete a ClusterTarget or Target for good
	FaultUnreachable     = "unreachable"   // blackhole a remote cluster for a while
	FaultAgentRestart    = "agent-restart" // kill -9 the source's agent and start it again
)

// Node is one kwok node of a cluster; the oracle has one of the same name,
// labels and size.
type Node struct {
	Cluster, Name string
	Labels        map[string]string
	CPU, Memory   string
	Pods          int
}

// Target is a ClusterTarget (Namespace "") or a Target of the source.
type Target struct {
	Name, Namespace string
	// Cluster is the cluster it reaches: SourceCluster for a self target.
	Cluster string
	// Labels of its spec: the region and zone its nodes all share, so
	// that they never contradict the nodes.
	Labels map[string]string
}

// Key is the target's name as the source knows it (TargetAnnotation):
// "<namespace>/<name>" for a Target.
func (t Target) Key() string {
	if t.Namespace == "" {
		return t.Name
	}
	return t.Namespace + "/" + t.Name
}

// Self reports whether the target is the source itself.
func (t Target) Self() bool { return t.Cluster == SourceCluster }

// VirtualNode is the target's virtual node in the source.
func (t Target) VirtualNode() string { return protocol.VirtualNodeName(t.Namespace, t.Name) }

// Fleet is the clusters, their nodes and the source's targets.
type Fleet struct {
	// Remotes are the clusters other than the source and the oracle.
	Remotes []string
	Nodes   []Node
	Targets []Target
}

// Policy is a workload's PlacementPolicy spread (no Keys: no policy).
type Policy struct {
	// Keys spread jointly, the first the outermost (region, then zone).
	Keys    []string
	MaxSkew int32
	When    string
}

// Joint reports whether the spread has several levels.
func (p *Policy) Joint() bool { return p != nil && len(p.Keys) > 1 }

// Workload is one Deployment, StatefulSet or Job of the source (and its
// twin in the oracle).
type Workload struct {
	Name, Kind  string
	Replicas    int32
	CPU, Memory string
	Policy      *Policy
	// MaxOnDemand, when set, splits the Deployment's pods (annotation
	// multicluster.flotilla.dev/max-on-demand).
	MaxOnDemand *int32
}

// Action is one step of a phase.
type Action struct {
	Kind     string
	Workload string // create, scale, delete
	Replicas int32  // scale
	Target   string // delete-target: the target's Key
	Cluster  string // unreachable
	Duration time.Duration
	// Draw picks among what exists when the action runs (a candidate).
	Draw int
}

func (a Action) String() string {
	switch a.Kind {
	case ActCreate, ActDelete:
		return a.Kind + " " + a.Workload
	case ActScale:
		return fmt.Sprintf("scale %s to %d", a.Workload, a.Replicas)
	case FaultDeleteTarget:
		return "delete target " + a.Target
	case FaultUnreachable:
		return fmt.Sprintf("make %s unreachable for %s", a.Cluster, a.Duration)
	case FaultDeleteCandidate:
		return fmt.Sprintf("delete a pending candidate (draw %d)", a.Draw)
	case FaultFreezeScheduler:
		return fmt.Sprintf("freeze the scheduler of %s for %s once a candidate there is elected", a.Cluster, a.Duration)
	case FaultDeleteElected:
		return fmt.Sprintf("delete up to %d elected candidates in %s before they bind, for 30s", a.Draw, a.Cluster)
	}
	return a.Kind
}

// Phase is a few actions, run one after the other, after which both worlds
// settle and are compared.
type Phase struct{ Actions []Action }

// Scenario is everything a seed draws.
type Scenario struct {
	Seed      uint64
	Fleet     Fleet
	Workloads []Workload
	Phases    []Phase
}

// Workload returns the workload of that name.
func (s *Scenario) Workload(name string) *Workload {
	for i := range s.Workloads {
		if s.Workloads[i].Name == name {
			return &s.Workloads[i]
		}
	}
	return nil
}

// TargetByKey returns the target of that key.
func (f *Fleet) TargetByKey(key string) (Target, bool) {
	for _, t := range f.Targets {
		if t.Key() == key {
			return t, true
		}
	}
	return Target{}, false
}

// ClusterNodes are the nodes of one cluster.
func (f *Fleet) ClusterNodes(cluster string) []Node {
	var out []Node
	for _, n := range f.Nodes {
		if n.Cluster == cluster {
			out = append(out, n)
		}
	}
	return out
}

var (
	regions = []string{"eu", "us"}
	zonesOf = map[string][]string{"eu": {"eu-1", "eu-2", "eu-3"}, "us": {"us-1", "us-2"}}
)

// Generate draws a scenario from a seed with phases phases after the one
// that creates the workloads. The same seed and phases give the same
// scenario.
func Generate(seed uint64, phases int) Scenario {
	r := rand.New(rand.NewPCG(seed, 0x5ce7a110))
	s := Scenario{Seed: seed}
	pick := func(weights ...int) int {
		total := 0
		for _, w := range weights {
			total += w
		}
		n := r.IntN(total)
		for i, w := range weights {
			if n < w {
				return i
			}
			n -= w
		}
		return len(weights) - 1
	}

	remotes := pick(35, 50, 15)
	for i := range remotes {
		s.Fleet.Remotes = append(s.Fleet.Remotes, fmt.Sprintf("r%d", i+1))
	}
	for _, cluster := range append([]string{SourceCluster}, s.Fleet.Remotes...) {
		s.Fleet.Nodes = append(s.Fleet.Nodes, drawNodes(r, pick, cluster)...)
	}

	// Self targets cost no cluster: there is always one, often two.
	switch pick(30, 35, 35) {
	case 0:
		s.Fleet.Targets = append(s.Fleet.Targets, Target{Name: "home", Cluster: SourceCluster}, Target{Name: "mine", Namespace: Namespace, Cluster: SourceCluster})
	case 1:
		s.Fleet.Targets = append(s.Fleet.Targets, Target{Name: "home", Cluster: SourceCluster})
	default:
		s.Fleet.Targets = append(s.Fleet.Targets, Target{Name: "mine", Namespace: Namespace, Cluster: SourceCluster})
	}
	for _, rc := range s.Fleet.Remotes {
		switch pick(40, 30, 30) {
		case 0:
			s.Fleet.Targets = append(s.Fleet.Targets, Target{Name: rc, Cluster: rc})
		case 1:
			s.Fleet.Targets = append(s.Fleet.Targets, Target{Name: rc + "-ns", Namespace: Namespace, Cluster: rc})
		default:
			s.Fleet.Targets = append(s.Fleet.Targets, Target{Name: rc, Cluster: rc}, Target{Name: rc + "-ns", Namespace: Namespace, Cluster: rc})
		}
	}
	for i := range s.Fleet.Targets {
		s.Fleet.Targets[i].Labels = commonTopology(s.Fleet.ClusterNodes(s.Fleet.Targets[i].Cluster))
	}

	for i := range 2 + r.IntN(2) {
		w := Workload{
			Name:     fmt.Sprintf("w%d", i+1),
			Kind:     []string{KindDeployment, KindStatefulSet, KindJob}[pick(50, 25, 25)],
			Replicas: int32(2 + r.IntN(5)),
			CPU:      []string{"250m", "500m", "1"}[r.IntN(3)],
			Memory:   []string{"256Mi", "512Mi", "1Gi"}[r.IntN(3)],
		}
		if pick(20, 80) == 1 {
			w.Policy = &Policy{
				Keys:    [][]string{{RegionKey}, {ZoneKey}, {RegionKey, ZoneKey}, {ZoneKey, CapacityKey}}[pick(25, 30, 25, 20)],
				MaxSkew: int32(1 + pick(50, 30, 20)),
				When:    []string{DoNotSchedule, ScheduleAnyway}[pick(60, 40)],
			}
		}
		if w.Kind == KindDeployment && pick(70, 30) == 1 {
			od := int32(r.IntN(int(w.Replicas) + 1))
			w.MaxOnDemand = &od
		}
		s.Workloads = append(s.Workloads, w)
	}

	first := Phase{}
	for _, w := range s.Workloads {
		first.Actions = append(first.Actions, Action{Kind: ActCreate, Workload: w.Name})
	}
	s.Phases = append(s.Phases, first)
	live := map[string]bool{}
	for _, w := range s.Workloads {
		live[w.Name] = true
	}
	targets := map[string]bool{}
	for _, t := range s.Fleet.Targets {
		targets[t.Key()] = true
	}
	for range phases {
		var ph Phase
		for range 1 + r.IntN(3) {
			ph.Actions = append(ph.Actions, drawAction(r, pick, &s, live, targets))
		}
		s.Phases = append(s.Phases, ph)
	}
	return s
}

// drawNodes draws two to four nodes of one cluster in one region (at
// times two), spanning one to three zones; some have no zone label.
func drawNodes(r *rand.Rand, pick func(...int) int, cluster string) []Node {
	clusterRegions := []string{regions[r.IntN(len(regions))]}
	if pick(80, 20) == 1 {
		clusterRegions = regions
	}
	var zones []string
	for _, reg := range clusterRegions {
		zones = append(zones, zonesOf[reg]...)
	}
	r.Shuffle(len(zones), func(i, j int) { zones[i], zones[j] = zones[j], zones[i] })
	zones = zones[:1+r.IntN(min(3, len(zones)))]
	var out []Node
	for i := range 2 + r.IntN(3) {
		zone := zones[r.IntN(len(zones))]
		labels := map[string]string{
			RegionKey:   strings.SplitN(zone, "-", 2)[0],
			CapacityKey: []string{protocol.CapacityOnDemand, protocol.CapacitySpot}[r.IntN(2)],
		}
		if pick(85, 15) == 0 {
			labels[ZoneKey] = zone
		}
		out = append(out, Node{
			Cluster: cluster, Name: fmt.Sprintf("%s-n%d", cluster, i), Labels: labels,
			CPU:    []string{"2", "4", "8"}[r.IntN(3)],
			Memory: []string{"4Gi", "8Gi", "16Gi"}[r.IntN(3)],
			Pods:   []int{6, 10, 110}[r.IntN(3)],
		})
	}
	return out
}

// commonTopology is the region and zone every node carries alike.
func commonTopology(nodes []Node) map[string]string {
	out := map[string]string{}
	for _, key := range []string{RegionKey, ZoneKey} {
		value, same := "", true
		for i, n := range nodes {
			v, ok := n.Labels[key]
			if !ok || (i > 0 && v != value) {
				same = false
				break
			}
			value = v
		}
		if same && value != "" {
			out[key] = value
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func drawAction(r *rand.Rand, pick func(...int) int, s *Scenario, live, targets map[string]bool) Action {
	liveNames := sortedTrue(live)
	var remote []string
	for _, t := range s.Fleet.Targets {
		if targets[t.Key()] && !t.Self() && !slices.Contains(remote, t.Cluster) {
			remote = append(remote, t.Cluster)
		}
	}
	for {
		switch pick(40, 5, 5, 15, 15, 10, 15, 10) {
		case 0:
			if len(liveNames) == 0 {
				continue
			}
			return Action{Kind: ActScale, Workload: liveNames[r.IntN(len(liveNames))], Replicas: int32(r.IntN(9))}
		case 1:
			if len(liveNames) < 2 {
				continue
			}
			name := liveNames[r.IntN(len(liveNames))]
			live[name] = false
			return Action{Kind: ActDelete, Workload: name}
		case 2:
			var gone []string
			for _, w := range s.Workloads {
				if !live[w.Name] {
					gone = append(gone, w.Name)
				}
			}
			if len(gone) == 0 {
				continue
			}
			live[gone[0]] = true
			return Action{Kind: ActCreate, Workload: gone[0]}
		case 3:
			return Action{Kind: FaultDeleteCandidate, Draw: r.IntN(1 << 16)}
		case 4:
			return Action{Kind: FaultAgentRestart}
		case 5:
			keys := sortedTrue(targets)
			if len(keys) < 2 {
				continue
			}
			key := keys[r.IntN(len(keys))]
			targets[key] = false
			return Action{Kind: FaultDeleteTarget, Target: key}
		case 6:
			if len(remote) == 0 {
				continue
			}
			return Action{Kind: FaultUnreachable, Cluster: remote[r.IntN(len(remote))], Duration: time.Duration(5+r.IntN(16)) * time.Second}
		case 7:
			clusters := append([]string{SourceCluster}, remote...)
			return Action{Kind: FaultDeleteElected, Cluster: clusters[r.IntN(len(clusters))], Draw: 2 + r.IntN(6)}
		}
	}
}

func sortedTrue(m map[string]bool) []string {
	var out []string
	for k, v := range m {
		if v {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// String prints the scenario: what a failing seed shows.
func (s Scenario) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d\nfleet:\n", s.Seed)
	for _, cluster := range append([]string{SourceCluster}, s.Fleet.Remotes...) {
		fmt.Fprintf(&b, "  cluster %s:\n", cluster)
		for _, n := range s.Fleet.ClusterNodes(cluster) {
			fmt.Fprintf(&b, "    node %s cpu=%s memory=%s pods=%d %s\n", n.Name, n.CPU, n.Memory, n.Pods, formatLabels(n.Labels))
		}
	}
	for _, t := range s.Fleet.Targets {
		kind := "ClusterTarget"
		if t.Namespace != "" {
			kind = "Target"
		}
		how := "to " + t.Cluster
		if t.Self() {
			how = "self"
		}
		fmt.Fprintf(&b, "  %s %s %s labels %s\n", kind, t.Key(), how, formatLabels(t.Labels))
	}
	b.WriteString("workloads:\n")
	for _, w := range s.Workloads {
		fmt.Fprintf(&b, "  %s %s replicas=%d cpu=%s memory=%s", w.Kind, w.Name, w.Replicas, w.CPU, w.Memory)
		if w.Policy != nil {
			fmt.Fprintf(&b, " spread %s maxSkew=%d %s", strings.Join(w.Policy.Keys, "→"), w.Policy.MaxSkew, w.Policy.When)
		}
		if w.MaxOnDemand != nil {
			fmt.Fprintf(&b, " max-on-demand=%d", *w.MaxOnDemand)
		}
		b.WriteString("\n")
	}
	b.WriteString("script:\n")
	for i, ph := range s.Phases {
		var acts []string
		for _, a := range ph.Actions {
			acts = append(acts, a.String())
		}
		fmt.Fprintf(&b, "  phase %d: %s\n", i, strings.Join(acts, "; "))
	}
	return b.String()
}

func formatLabels(m map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		short := strings.TrimPrefix(strings.TrimPrefix(k, "topology.kubernetes.io/"), "node.kubernetes.io/")
		parts = append(parts, short+"="+m[k])
	}
	return "{" + strings.Join(parts, ",") + "}"
}
