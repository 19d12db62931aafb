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
	"github.com/flotilla-dev/flotilla/pkg/workload"
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
}

// explainPlacement reads the PlacementPolicies of the pod's namespace and
// fills e.Capacity and, for a source pod, e.Policy and the answers' policy
// columns. What it cannot read is told in e.Policy.Problem: the rest of
// the explanation stands without it.
func (c *clients) explainPlacement(ctx context.Context, e *Explanation, pod *corev1.Pod, targets []targetInfo) {
	keys := []string{protocol.DefaultCapacityNodeLabel}
	defer func() { e.Capacity = capacityPlace(pod, keys...) }()
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
	views := make([]policyView, 0, len(targets))
	for _, t := range targets {
		v := policyView{target: t, labels: map[string]string{}}
		// The virtual node carries what placement sees: the target's
		// labels and those common to all its nodes.
		if n, err := c.kube.CoreV1().Nodes().Get(ctx, t.virtualNode, metav1.GetOptions{}); err == nil {
			maps.Copy(v.labels, n.Labels)
		}
		maps.Copy(v.labels, t.labels)
		views = append(views, v)
	}
	var siblings []corev1.Pod
	if res.Policy != nil && len(res.Policy.Spec.SpreadConstraints) > 0 {
		pods, err := c.kube.CoreV1().Pods(pod.Namespace).List(ctx, metav1.ListOptions{LabelSelector: protocol.ElectLabel + "=true"})
		if err != nil {
			e.Policy = &PolicyExplanation{Name: res.Policy.Name, Problem: fmt.Sprintf("cannot list the pods of namespace %s to count the workload's: %v", pod.Namespace, err)}
			return
		}
		siblings = pods.Items
	}
	e.Policy = explainPolicy(pod, res, views, siblings, e.Targets)
}

// PolicyTarget is a target as the policy explanation sees it: its name (as
// elections name it), its virtual node, and the labels placement sees (the
// virtual node's, the target's own over them).
type PolicyTarget struct {
	Name        string
	VirtualNode string
	Labels      map[string]string
}

// ExplainPolicy is the policy part of `kubectl flotilla explain` from
// plain values: the PlacementPolicies of the pod's namespace, its targets,
// the pods of its namespace (its siblings among them) and each target's
// answer. It fills each answer's Policy, Domain and Bonus as the agent's
// plan (pkg/placementpolicy) makes them, and returns what the policy is;
// nil when no policy is meant for the pod.
func ExplainPolicy(pod *corev1.Pod, policies []v1alpha1.PlacementPolicy, targets []PolicyTarget, pods []corev1.Pod, answers []Answer) *PolicyExplanation {
	views := make([]policyView, len(targets))
	for i, t := range targets {
		views[i] = policyView{target: targetInfo{name: t.Name, virtualNode: t.VirtualNode}, labels: t.Labels}
	}
	return explainPolicy(pod, placementpolicy.Choose(pod, policies), views, pods, answers)
}

// explainPolicy judges each target by the policy resolved for pod, as the
// agent's fan-out does: selection and fallback groups, then the spread
// against the siblings already placed. It fills each answer's Policy,
// Domain and Bonus, and returns nil when no policy is meant for the pod.
func explainPolicy(pod *corev1.Pod, res placementpolicy.Resolved, views []policyView, siblings []corev1.Pod, answers []Answer) *PolicyExplanation {
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
	targets := make([]placementpolicy.Target, 0, len(views))
	byName := make(map[string]placement.Cluster, len(views))
	for _, v := range views {
		cl := placement.Cluster{Name: v.target.name, Labels: v.labels}
		a := answerOf[cl.Name]
		// A later fallback group is used only once every target of the
		// earlier ones answered that it cannot run the pod.
		targets = append(targets, placementpolicy.Target{Cluster: cl, Failed: a != nil && a.Answer == AnswerUnschedulable})
		byName[cl.Name] = cl
	}
	// The agent's own plan: the same selection, fallback and spread.
	plan := placementpolicy.Select(compiled, targets)
	keys := compiled.Keys()
	var placed []placement.Domain
	if compiled.Spreads() {
		// The elected target counts the pod where its reservation is: the
		// domain its target reported, before the pin or the target's
		// labels.
		for name, a := range answerOf {
			if !a.Elected {
				continue
			}
			cl, ok := byName[name]
			if !ok {
				cl = placement.Cluster{Name: name}
			}
			if d, ok := electedDomain(pod, cl, keys); ok {
				a.Domain = showDomain(d)
			}
		}
		var unknown int
		placed, unknown = siblingDomains(pod, siblings, views, byName, keys)
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

// siblingDomains are the domains of the pod's workload siblings that are
// bound or elected: where its target reported the elected node to be, or
// the target's only domain; and how many of those are in a target whose
// domain the source cannot tell (a target spanning several that reported
// no node).
func siblingDomains(pod *corev1.Pod, siblings []corev1.Pod, views []policyView, clusters map[string]placement.Cluster, keys []string) ([]placement.Domain, int) {
	key, ok := workload.Of(pod)
	if !ok {
		return nil, 0
	}
	byNode := make(map[string]string, len(views))
	for _, v := range views {
		byNode[v.target.virtualNode] = v.target.name
	}
	var out []placement.Domain
	unknown := 0
	for i := range siblings {
		s := &siblings[i]
		if s.UID == pod.UID || s.Spec.SchedulerName != protocol.SourceSchedulerName || s.DeletionTimestamp != nil ||
			s.Status.Phase == corev1.PodSucceeded || s.Status.Phase == corev1.PodFailed {
			continue
		}
		if k, ok := workload.Of(s); !ok || k != key {
			continue
		}
		// The election names the target, bound or not: a node of the
		// old namespaced form could be two targets' names.
		name := byNode[s.Spec.NodeName]
		if e, err := protocol.ParseElection(s.Annotations[protocol.ElectionAnnotation]); err == nil && e.Elected() {
			name = e.Target
		}
		cl, ok := clusters[name]
		if !ok {
			continue
		}
		if d, ok := electedDomain(s, cl, keys); ok {
			out = append(out, d)
			continue
		}
		domains := placement.Domains(cl, keys)
		if len(domains) != 1 {
			unknown++
			continue
		}
		out = append(out, domains[0])
	}
	return out, unknown
}

// electedDomain is the domain of the node that holds or runs a source
// pod's elected reservation in cl, at keys: the node's labels as its target
// reported them at the election (the pod's elected-domain annotation), the
// virtual node's labels (the Target's own, those common to its nodes)
// standing for the keys it lacks. ok is false when the pod carries no
// readable report.
func electedDomain(pod *corev1.Pod, cl placement.Cluster, keys []string) (placement.Domain, bool) {
	reported, err := protocol.ParseDomain(pod.Annotations[protocol.ElectedDomainAnnotation])
	if err != nil || reported == nil {
		return nil, false
	}
	d := make(placement.Domain, len(keys))
	for i, k := range keys {
		if v, ok := cl.Labels[k]; ok {
			d[i] = v
		} else {
			d[i] = reported[k]
		}
	}
	return d, true
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
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", name, a.Answer, orDash(a.Node), score, oneLine(a.Reason))
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
