package cli

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/placement"
	"github.com/flotilla-dev/flotilla/pkg/placementpolicy"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// PolicyExplanation is what the PlacementPolicy that governs a pod makes
// of its targets now, computed as the agent computes it (pkg/placementpolicy,
// pkg/placement) from the source cluster's objects.
type PolicyExplanation struct {
	// Name is the governing policy; "" when none governs the pod.
	Name string `json:"name,omitempty"`
	// Problem says why a policy meant for the pod does not govern it (two
	// equally specific, a named one missing, a selector that cannot be
	// used): the pod is then placed as if none did.
	Problem string `json:"problem,omitempty"`
	// Spread lists the spread constraints, in order.
	Spread []string `json:"spread,omitempty"`
	// Siblings counts the pods of the pod's workload placed (bound, or
	// elected) per domain, the pod itself left out. A domain is the values
	// of the topology keys, joined by "/".
	Siblings map[string]int `json:"siblings,omitempty"`
	// UnknownSiblings are placed siblings whose domain cannot be told from
	// the source (a target spanning several domains).
	UnknownSiblings int `json:"unknownSiblings,omitempty"`
}

// CapacityPlace is where the on-demand/spot split put the pod.
type CapacityPlace struct {
	// Type is on-demand or spot.
	Type string `json:"type"`
	// Slot is the on-demand slot, "" for spot.
	Slot string `json:"slot,omitempty"`
	// Requires is the pod's required node affinity on the capacity label.
	Requires string `json:"requires,omitempty"`
}

// policyView is what the policy explanation needs of a target besides
// targetInfo: the labels placement sees (its virtual node's).
type policyView struct {
	target targetInfo
	labels map[string]string
	// taints are its virtual node's that keep pods off
	// (placementpolicy.OperatorTaints).
	taints []corev1.Taint
}

// cluster is the target as placement sees it (placementpolicy.ClusterOf).
func (v policyView) cluster() placement.Cluster {
	return placementpolicy.ClusterOf(v.target.name, v.labels, v.target.summary)
}

// explainPlacement reads the PlacementPolicies of the pod's namespace and
// fills e.Capacity and, for a source pod, the targets the agent leaves
// out before any policy (each answer's LeftOut), e.Policy and the
// answers' policy columns. What it cannot read is told in
// e.Policy.Problem: the rest of the explanation stands without it.
func (c *clients) explainPlacement(ctx context.Context, e *Explanation, pod *corev1.Pod, targets []targetInfo) {
	keys := []string{protocol.DefaultCapacityNodeLabel}
	defer func() { e.Capacity = capacityPlace(pod, keys...) }()
	var views []policyView
	var leftOut map[string]string
	if e.SourcePod {
		views = make([]policyView, 0, len(targets))
		for _, t := range targets {
			v := policyView{target: t, labels: map[string]string{}}
			// The virtual node carries what placement sees: the target's
			// labels and those common to all its nodes.
			if n, err := c.kube.CoreV1().Nodes().Get(ctx, t.virtualNode, metav1.GetOptions{}); err == nil {
				maps.Copy(v.labels, n.Labels)
				v.taints = placementpolicy.OperatorTaints(n)
			}
			maps.Copy(v.labels, t.labels)
			views = append(views, v)
		}
		// With or without a policy.
		leftOut = leaveOut(pod, views, e.Targets)
	}
	list := &v1alpha1.PlacementPolicyList{}
	if err := c.cr.List(ctx, list, client.InNamespace(pod.Namespace)); err != nil {
		if e.SourcePod {
			e.Policy = &PolicyExplanation{Problem: fmt.Sprintf("cannot read the PlacementPolicies of namespace %s: %v", pod.Namespace, err)}
		}
		return
	}
	res := placementpolicy.Choose(pod, list.Items)
	if res.Policy != nil && res.Policy.Spec.CapacityType != nil && res.Policy.Spec.CapacityType.NodeLabel != "" {
		keys = append(keys, res.Policy.Spec.CapacityType.NodeLabel)
	}
	if !e.SourcePod {
		return
	}
	var siblings []corev1.Pod
	if res.Policy != nil && len(res.Policy.Spec.SpreadConstraints) > 0 {
		// Every source pod: which of them count is placementpolicy.Counts'
		// to say (a pod's opt-in label may be gone since its admission).
		pods, err := c.kube.CoreV1().Pods(pod.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "spec.schedulerName=" + protocol.SourceSchedulerName})
		if err != nil {
			e.Policy = &PolicyExplanation{Name: res.Policy.Name, Problem: fmt.Sprintf("cannot list the pods of namespace %s to count the workload's: %v", pod.Namespace, err)}
			return
		}
		siblings = pods.Items
	}
	e.Policy = explainPolicy(pod, res, views, leftOut, siblings, e.Targets)
}

// leaveOut is the agent's filter before any plan (placementpolicy.Prefilter)
// over the targets it plans the pod's placement among (targetInfo.invites):
// it tells each answer why the agent leaves its target out, if it does,
// and returns those reasons by target.
func leaveOut(pod *corev1.Pod, views []policyView, answers []Answer) map[string]string {
	standing := make([]placementpolicy.Standing, 0, len(views))
	for _, v := range views {
		if v.target.invites(pod) {
			standing = append(standing, placementpolicy.Standing{Cluster: v.cluster(), HeldBack: v.target.heldBack, Taints: v.taints})
		}
	}
	leftOut := placementpolicy.Prefilter(standing, placementpolicy.NeedsOf(pod))
	for i := range answers {
		answers[i].LeftOut = leftOut[answers[i].Target]
	}
	return leftOut
}

// PolicyTarget is a target as the policy explanation sees it: its name (as
// elections name it), its virtual node, the labels placement sees (the
// virtual node's, the target's own over them), the Target's own labels,
// the ClusterSummary it publishes for this cluster (nil when none), and
// why the agent holds it back ("" when it does not).
type PolicyTarget struct {
	Name        string
	VirtualNode string
	Labels      map[string]string
	Own         map[string]string
	Summary     *v1alpha1.ClusterSummaryStatus
	HeldBack    string
	// Taints are its virtual node's that keep pods off
	// (placementpolicy.OperatorTaints).
	Taints []corev1.Taint
}

// ExplainPolicy is the placement part of `kubectl flotilla explain` from
// plain values: the PlacementPolicies of the pod's namespace, its targets,
// the pods of its namespace (its siblings among them) and each target's
// answer. It fills each answer's LeftOut as the agent's filter before any
// plan makes it, and its Policy, Domain and Bonus as the agent's plan
// (pkg/placementpolicy) makes them, and returns what the policy is; nil
// when no policy is meant for the pod.
func ExplainPolicy(pod *corev1.Pod, policies []v1alpha1.PlacementPolicy, targets []PolicyTarget, pods []corev1.Pod, answers []Answer) *PolicyExplanation {
	views := make([]policyView, len(targets))
	for i, t := range targets {
		views[i] = policyView{target: targetInfo{name: t.Name, virtualNode: t.VirtualNode, labels: t.Own, summary: t.Summary, heldBack: t.HeldBack}, labels: t.Labels, taints: t.Taints}
	}
	return explainPolicy(pod, placementpolicy.Choose(pod, policies), views, leaveOut(pod, views, answers), pods, answers)
}

// explainPolicy judges each target by the policy resolved for pod, as the
// agent's fan-out does: of the targets it plans among that its filter
// before the plan left in (leftOut are those it left out), selection and
// fallback groups, then the spread against the siblings already placed.
// It fills each answer's Policy, Domain and Bonus, and returns nil when no
// policy is meant for the pod.
func explainPolicy(pod *corev1.Pod, res placementpolicy.Resolved, views []policyView, leftOut map[string]string, siblings []corev1.Pod, answers []Answer) *PolicyExplanation {
	if res.Policy == nil {
		if res.Problem == "" {
			return nil
		}
		return &PolicyExplanation{Problem: res.Problem}
	}
	compiled, err := placementpolicy.Compile(res.Policy)
	if err != nil {
		return &PolicyExplanation{Name: res.Policy.Name, Problem: fmt.Sprintf("PlacementPolicy %s is not used: %v", res.Policy.Name, err)}
	}
	pe := &PolicyExplanation{Name: compiled.Name}
	for _, sc := range compiled.Constraints {
		pe.Spread = append(pe.Spread, fmt.Sprintf("%s maxSkew %d %s", sc.TopologyKey, sc.MaxSkew, orDefault(sc.WhenUnsatisfiable, string(v1alpha1.ScheduleAnyway))))
	}
	answerOf := make(map[string]*Answer, len(answers))
	for i := range answers {
		answerOf[answers[i].Target] = &answers[i]
	}
	needs := placementpolicy.NeedsOf(pod)
	targets := make([]placementpolicy.Target, 0, len(views))
	byName := make(map[string]placement.Cluster, len(views))
	for _, v := range views {
		cl := v.cluster()
		byName[cl.Name] = cl
		if _, out := leftOut[cl.Name]; out || !v.target.invites(pod) {
			continue
		}
		a := answerOf[cl.Name]
		// The spread counts the domains of the nodes the pod may use. A
		// later fallback group is used only once every target of the
		// earlier ones answered that it cannot run the pod, or holds its
		// candidate overdue.
		targets = append(targets, placementpolicy.Target{Cluster: placement.ForPod(cl, needs.NodeSelector, needs.Required), Failed: a != nil && (a.Answer == AnswerUnschedulable || a.Overdue)})
	}
	// The agent's own plan: the same selection, fallback and spread.
	plan := placementpolicy.Select(compiled, targets)
	for name, why := range leftOut {
		plan.Excluded[name] = why
	}
	keys := compiled.Keys()
	var placed []placement.Domain
	if compiled.Spreads() {
		places := make(map[string]placementpolicy.Place, len(views))
		for _, v := range views {
			places[v.target.name] = placementpolicy.PlaceOf(byName[v.target.name], v.target.labels, v.target.summary, keys)
		}
		// The elected target counts the pod where its reservation is: the
		// domain its target reported, before the pin or the target's
		// labels.
		if reported := placementpolicy.ReportedDomain(pod.Annotations[protocol.ElectedDomainAnnotation]); reported != nil {
			for name, a := range answerOf {
				if !a.Elected {
					continue
				}
				place, ok := places[name]
				if !ok {
					place = placementpolicy.PlaceOf(placement.Cluster{Name: name}, nil, nil, keys)
				}
				a.Domain = showDomain(place.NodeDomain(reported))
			}
		}
		var unknown int
		placed, unknown = placementpolicy.Tally(placedSiblings(pod, siblings, views), places)
		pe.UnknownSiblings = unknown
		if len(placed) > 0 {
			pe.Siblings = map[string]int{}
			for _, d := range placed {
				pe.Siblings[showDomain(d)]++
			}
		}
		plan.Spread(compiled, placed, nil)
	}
	for name, why := range plan.Excluded {
		a := answerOf[name]
		if a == nil {
			continue
		}
		a.Policy = "excluded: " + why
		if domains := placement.Domains(byName[name], keys); compiled.Spreads() && len(domains) == 1 && a.Domain == "" {
			a.Domain = showDomain(domains[0])
		}
	}
	for _, name := range plan.Selected {
		a := answerOf[name]
		if a == nil {
			continue
		}
		a.Policy = "selected"
		switch v, ok := plan.Best[name]; {
		case !compiled.Spreads():
			bonus := placement.PreferenceScore(compiled.Selector, byName[name])
			a.Bonus = &bonus
		case ok:
			total := v.Total
			a.Bonus = &total
			if a.Domain == "" {
				a.Domain = showDomain(v.Domain)
			}
		default:
			// Its domains are not known before it reserves: unpinned, the
			// election judges the node it reports.
			a.Policy = "selected, unpinned (its domain is known once it reserves)"
		}
	}
	return pe
}

// placedSiblings are the pod's siblings a spread counts
// (placementpolicy.Counts) that are bound or elected, each in its target:
// the one its election names, bound or not (a node of the old namespaced
// form could be two targets' names), else the one whose virtual node runs
// it.
func placedSiblings(pod *corev1.Pod, pods []corev1.Pod, views []policyView) []placementpolicy.Sibling {
	byNode := make(map[string]string, len(views))
	for _, v := range views {
		byNode[v.target.virtualNode] = v.target.name
	}
	var out []placementpolicy.Sibling
	for i := range pods {
		s := &pods[i]
		if !placementpolicy.Counts(pod, s) {
			continue
		}
		name := byNode[s.Spec.NodeName]
		if e, err := protocol.ParseElection(s.Annotations[protocol.ElectionAnnotation]); err == nil && e.Elected() {
			name = e.Target
		}
		if name == "" {
			continue
		}
		// The pin of its candidate is in the target, which explain does
		// not read for the siblings: a sibling whose node was not
		// reported, in a target spanning several domains, is told apart.
		out = append(out, placementpolicy.Sibling{Target: name, Reported: placementpolicy.ReportedDomain(s.Annotations[protocol.ElectedDomainAnnotation])})
	}
	return out
}

// showDomain writes a domain as its values joined by "/", "(none)" for a
// key no target names.
func showDomain(d []string) string {
	parts := make([]string, len(d))
	for i, v := range d {
		parts[i] = orDefault(v, "(none)")
	}
	return strings.Join(parts, "/")
}

// capacityPlace reads where the on-demand/spot split put a pod, nil when
// it did not. keys are the node labels the split may have required: the
// default one, and the one of the pod's policy.
func capacityPlace(pod *corev1.Pod, keys ...string) *CapacityPlace {
	typ := pod.Labels[protocol.CapacityTypeLabel]
	if typ == "" {
		return nil
	}
	place := &CapacityPlace{Type: typ, Slot: pod.Labels[protocol.OnDemandSlotLabel]}
	if a := pod.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		var reqs []string
		for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			for _, r := range term.MatchExpressions {
				if slices.Contains(keys, r.Key) {
					reqs = append(reqs, fmt.Sprintf("%s %s [%s]", r.Key, r.Operator, strings.Join(r.Values, ", ")))
				}
			}
		}
		slices.Sort(reqs)
		place.Requires = strings.Join(slices.Compact(reqs), "; ")
	}
	return place
}

// writeAnswers writes the targets' answers as a table; under a policy,
// with the domain each counts in and the policy's verdict.
func writeAnswers(w io.Writer, e *Explanation) {
	underPolicy := e.Policy != nil && e.Policy.Name != "" && e.Policy.Problem == ""
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if underPolicy {
		fmt.Fprintln(tw, "TARGET\tANSWER\tNODE\tSCORE\tDOMAIN\tPOLICY\tDETAIL")
	} else {
		fmt.Fprintln(tw, "TARGET\tANSWER\tNODE\tSCORE\tDETAIL")
	}
	for _, a := range e.Targets {
		name := a.Target
		if a.Elected {
			name += " (elected)"
		}
		score := "-"
		if a.Score != nil {
			score = fmt.Sprint(*a.Score)
		}
		if !underPolicy {
			// Under a policy, its POLICY says it is excluded, and why.
			detail := a.Reason
			switch {
			case a.LeftOut == "":
			case a.Candidate == "":
				detail = "no candidate: " + a.LeftOut
			default:
				detail += "; no new candidate: " + a.LeftOut
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", name, a.Answer, orDash(a.Node), score, oneLine(detail))
			continue
		}
		verdict := orDash(a.Policy)
		if a.Bonus != nil {
			verdict = fmt.Sprintf("%s (%+d)", verdict, *a.Bonus)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, a.Answer, orDash(a.Node), score, orDash(a.Domain), oneLine(verdict), oneLine(a.Reason))
	}
	tw.Flush()
}

// writePolicy writes which policy governs the pod and the workload's
// siblings it counts.
func writePolicy(w io.Writer, p *PolicyExplanation) {
	switch {
	case p == nil:
		fmt.Fprintln(w, "Policy:    none (no PlacementPolicy selects the pod)")
		return
	case p.Problem != "":
		fmt.Fprintf(w, "Policy:    none applied: %s\n", oneLine(p.Problem))
		return
	}
	spread := "no spread"
	if len(p.Spread) > 0 {
		spread = "spread by " + strings.Join(p.Spread, ", then ")
	}
	fmt.Fprintf(w, "Policy:    PlacementPolicy %s, %s\n", p.Name, spread)
	if len(p.Spread) == 0 {
		return
	}
	domains := slices.Sorted(maps.Keys(p.Siblings))
	parts := make([]string, 0, len(domains)+1)
	for _, d := range domains {
		parts = append(parts, fmt.Sprintf("%s: %d", d, p.Siblings[d]))
	}
	if p.UnknownSiblings > 0 {
		parts = append(parts, fmt.Sprintf("%d in targets spanning several domains", p.UnknownSiblings))
	}
	if len(parts) == 0 {
		parts = append(parts, "none placed yet")
	}
	fmt.Fprintf(w, "Siblings:  %s (the workload's other pods, bound or elected)\n", strings.Join(parts, ", "))
}

// writeCapacity writes where the on-demand/spot split put the pod.
func writeCapacity(w io.Writer, c *CapacityPlace) {
	if c == nil {
		return
	}
	place := c.Type
	if c.Slot != "" {
		place += " (slot " + c.Slot + ")"
	}
	if c.Requires != "" {
		place += ", requires " + c.Requires
	}
	fmt.Fprintf(w, "Capacity:  %s\n", place)
}
