package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/flotilla-dev/flotilla/pkg/gang"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// maxGangAsked bounds the members explain asks the targets about: each
// costs a read in every target.
const maxGangAsked = 100

// GangExplanation is a pod's gang as explain sees it: its members, where
// each stands, and the gang's verdict over them (pkg/gang, the agent's).
type GangExplanation struct {
	Name string `json:"name"`
	// Source is how the gang is declared: podGroup, workload, job or
	// jobset (gang.Source).
	Source    string `json:"source"`
	MinMember int    `json:"minMember,omitempty"`
	Mode      string `json:"mode,omitempty"`
	// Problem says why the declaration is not honoured: the pod is placed
	// as an ordinary pod.
	Problem string `json:"problem,omitempty"`
	// Members are the pods of the gang, by name.
	Members []GangMember `json:"members,omitempty"`
	// Placed counts the members elected on a reservation they hold, or
	// bound.
	Placed int `json:"placed"`
	// Reservations counts, per target, the members holding a reservation
	// there that is not elected.
	Reservations map[string]int `json:"reservations,omitempty"`
	// Complete: the gang holds places for MinMember members the way its
	// mode accepts; Missing says what it lacks when not.
	Complete bool   `json:"complete"`
	Missing  string `json:"missing,omitempty"`
	// Target is a oneCluster gang's target.
	Target string `json:"target,omitempty"`
	// Asked is false when the gang has more members than explain asks the
	// targets about: the counts are then the elections only.
	Asked bool `json:"asked"`
}

// GangMember is one member of a gang.
type GangMember struct {
	Pod      string   `json:"pod"`
	Placed   string   `json:"placed,omitempty"`
	Bound    bool     `json:"bound,omitempty"`
	Reserved []string `json:"reserved,omitempty"`
}

// explainGang reads the pod's gang, if it declares one: its members in
// the pod's namespace and what each target reports of them.
func (c *clients) explainGang(ctx context.Context, clusterName string, pod *corev1.Pod, targets []targetInfo) *GangExplanation {
	spec, ok, err := gang.Of(pod)
	if !ok {
		return nil
	}
	if errors.Is(err, gang.ErrNoMinMember) {
		n, serr := gang.SizeOf(ctx, c.cr, pod.Namespace, spec)
		switch {
		case errors.Is(serr, gang.ErrNotAGang):
			return nil
		case serr == nil:
			spec.MinMember, err = n, nil
		}
	}
	g := &GangExplanation{Name: spec.Name, Source: string(spec.Source), MinMember: spec.MinMember, Mode: string(spec.Mode)}
	if err != nil {
		g.MinMember, g.Mode, g.Problem = 0, "", err.Error()+"; placed as an ordinary pod"
		return g
	}
	opts := metav1.ListOptions{}
	if spec.Source == gang.FromPodGroup {
		opts.LabelSelector = labels.SelectorFromSet(labels.Set{protocol.PodGroupLabel: spec.Name}).String()
	}
	list, err := c.kube.CoreV1().Pods(pod.Namespace).List(ctx, opts)
	if err != nil {
		g.Problem = fmt.Sprintf("cannot list the gang's members: %v", err)
		return g
	}
	var pods []*corev1.Pod
	for i := range list.Items {
		m := &list.Items[i]
		if s, ok, _ := gang.Of(m); !ok || s.Key(m.Namespace) != spec.Key(pod.Namespace) {
			continue
		}
		if m.DeletionTimestamp == nil && m.Status.Phase != corev1.PodFailed && m.Spec.SchedulerName == protocol.SourceSchedulerName {
			pods = append(pods, m)
		}
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	g.Asked = len(pods) <= maxGangAsked
	members := make([]gang.Member, len(pods))
	for i, m := range pods {
		el, _ := protocol.ParseElection(m.Annotations[protocol.ElectionAnnotation])
		var answers []Answer
		if g.Asked {
			answers = askTargets(ctx, c, clusterName, m, el, targets)
		}
		members[i] = gangMemberOf(m, el, targets, answers)
	}
	v := gang.Decide(spec, members)
	g.Placed, g.Complete, g.Missing, g.Target = v.Placed, v.Complete, v.Missing, v.Target
	for _, m := range members {
		g.Members = append(g.Members, GangMember{Pod: m.Name, Placed: m.Placed, Bound: m.Bound, Reserved: m.Reserved})
		for _, t := range m.Reserved {
			if g.Reservations == nil {
				g.Reservations = map[string]int{}
			}
			g.Reservations[t]++
		}
	}
	return g
}

// gangMemberOf is a member as its gang counts it, from its election and
// the targets' answers (nil when not asked: its election alone).
func gangMemberOf(pod *corev1.Pod, el protocol.Election, targets []targetInfo, answers []Answer) gang.Member {
	m := gang.Member{Name: pod.Name}
	for _, t := range targets {
		if pod.Spec.NodeName != "" && t.virtualNode == pod.Spec.NodeName {
			m.Placed, m.Bound = t.name, true
			return m
		}
	}
	if answers == nil {
		if el.Elected() {
			m.Placed = el.Target
		}
		return m
	}
	for _, a := range answers {
		switch {
		case a.Elected && (a.Answer == AnswerReserved || a.Answer == AnswerBound):
			m.Placed, m.Reserved = a.Target, nil
			return m
		case a.Answer == AnswerReserved && !strings.HasPrefix(a.Policy, "excluded"):
			m.Reserved = append(m.Reserved, a.Target)
		}
	}
	return m
}

func writeGang(w io.Writer, g *GangExplanation) {
	if g == nil {
		return
	}
	if g.Problem != "" {
		fmt.Fprintf(w, "Gang:      %s: %s\n", g.title(), g.Problem)
		return
	}
	state := "complete"
	if !g.Complete {
		state = "waiting: " + g.Missing
	}
	fmt.Fprintf(w, "Gang:      %s, %d members needed at once, %s; %s\n", g.title(), g.MinMember, g.Mode, state)
	held := make([]string, 0, len(g.Reservations))
	for t, n := range g.Reservations {
		held = append(held, fmt.Sprintf("%s %d", t, n))
	}
	slices.Sort(held)
	line := fmt.Sprintf("           %d members, %d placed", len(g.Members), g.Placed)
	if g.Target != "" {
		line += ", gang's target " + g.Target
	}
	if len(held) > 0 {
		line += "; other reservations held: " + strings.Join(held, ", ")
	}
	if !g.Asked {
		line += " (too many members to ask each target: elections only)"
	}
	fmt.Fprintln(w, line)
}

// title names the gang: "pod group train", "job train".
func (g *GangExplanation) title() string {
	return gang.Spec{Name: g.Name, Source: gang.Source(g.Source)}.String()
}
