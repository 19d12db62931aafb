package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/kubeconfig"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// targetTimeout bounds what explain asks of one target, so one that does
// not answer is reported without holding up the others.
const targetTimeout = 10 * time.Second

// overdueAfter and overdueConfirm are the agent's least wait on a
// candidate its target does not answer before it counts it overdue
// (candidate.OverdueAfter) and the time it must have seen it so before it
// acts (candidate.OverdueConfirm); kept here so that the plugin does not
// build the agent's packages in, and checked against them by a test.
const (
	overdueAfter   = 3 * time.Second
	overdueConfirm = 2 * time.Second
)

// maxEvents is how many of the pod's latest Events explain prints.
const maxEvents = 10

// What a target answered about a pod's candidate.
const (
	AnswerReserved      = "Reserved"
	AnswerBound         = "Bound"
	AnswerUnschedulable = "Unschedulable"
	AnswerUnreserved    = "Unreserved"
	AnswerWaiting       = "Waiting"
	AnswerNoCandidate   = "NoCandidate"
	AnswerUnreachable   = "Unreachable"
)

// Explanation is what `kubectl flotilla explain` reports of one pod.
type Explanation struct {
	Pod       string `json:"pod"`
	UID       string `json:"uid"`
	Phase     string `json:"phase"`
	SourcePod bool   `json:"sourcePod"`
	// Local: the webhook kept the pod in its own cluster (a self target
	// with localFirst had room for it); it is no source pod.
	Local bool `json:"local,omitempty"`
	// Node is the pod's node: a target's virtual node once placed.
	Node string `json:"node,omitempty"`
	// RunsIn is the target whose virtual node the pod is bound to.
	RunsIn string `json:"runsIn,omitempty"`
	// Election is the pod's election record, decoded.
	Election *ElectionRecord `json:"election,omitempty"`
	// Scheduled is the pod's PodScheduled condition while it is not.
	Scheduled *corev1.PodCondition `json:"scheduled,omitempty"`
	// Policy is the PlacementPolicy that governs the pod and what it makes
	// of the targets now; nil when none is meant for the pod.
	Policy *PolicyExplanation `json:"policy,omitempty"`
	// Capacity is where the on-demand/spot split put the pod.
	Capacity *CapacityPlace `json:"capacity,omitempty"`
	// Gang is the pod's gang, when it declares one.
	Gang    *GangExplanation `json:"gang,omitempty"`
	Targets []Answer         `json:"targets"`
	Events  []EventSummary   `json:"events"`
}

// ElectionRecord is the election annotation of a source pod.
type ElectionRecord struct {
	Generation int64  `json:"generation"`
	Target     string `json:"target,omitempty"`
	Nonce      string `json:"nonce,omitempty"`
	Error      string `json:"error,omitempty"`
}

// Answer is one target's answer for the pod.
type Answer struct {
	Target string `json:"target"`
	Kind   string `json:"kind"`
	// Answer is Reserved, Bound, Unschedulable, Unreserved, Waiting,
	// NoCandidate or Unreachable.
	Answer string `json:"answer"`
	// Namespace is where the pod's candidate goes in the target.
	Namespace string `json:"namespace,omitempty"`
	Candidate string `json:"candidate,omitempty"`
	Node      string `json:"node,omitempty"`
	Score     *int64 `json:"score,omitempty"`
	// Reason says why: the scheduler's message, the reservation's end,
	// why there is no candidate, or the error.
	Reason string `json:"reason,omitempty"`
	// Elected: the pod's election names this target.
	Elected bool `json:"elected,omitempty"`
	// Policy is what the pod's PlacementPolicy makes of the target now:
	// "selected", or "excluded: " and why (selector, affinity, fallback
	// group, spread); "" when no policy governs the pod.
	Policy string `json:"policy,omitempty"`
	// Domain is the topology domain the target counts in for the pod,
	// values joined by "/": for the elected target, that of the node its
	// reservation holds or runs on, as the target reported it at the
	// election; else (or when not reported) the one its candidate was
	// pinned to, or the target's own.
	Domain string `json:"domain,omitempty"`
	// Bonus is what the policy adds to the target's reservation score in
	// the election: the spread score times its weight, plus preferences.
	Bonus *int64 `json:"bonus,omitempty"`
	// Overdue: the candidate is Waiting, unanswered for longer than the
	// agent waits on a target that answers none of its candidates
	// (at least candidate.OverdueAfter and OverdueConfirm): a target whose
	// scheduler is down. A policy's later fallback group is then used as
	// if the target could not run the pod.
	Overdue bool `json:"overdue,omitempty"`
	// LeftOut says why the agent sends the pod no candidate there now,
	// before any policy (placementpolicy.Prefilter): the target is held
	// back, or its summary says none of its nodes can run the pod (its
	// required node affinity, or its requests while another target may
	// have room); "" when it does not.
	LeftOut string `json:"leftOut,omitempty"`
}

// EventSummary is one Event of the pod.
type EventSummary struct {
	Type     string    `json:"type"`
	Reason   string    `json:"reason"`
	Message  string    `json:"message"`
	Count    int32     `json:"count,omitempty"`
	LastSeen time.Time `json:"lastSeen"`
}

type explainOptions struct {
	output         string
	clusterName    string
	agentNamespace string
}

func newExplainCommand(kube *kubeFlags) *cobra.Command {
	o := &explainOptions{}
	cmd := &cobra.Command{
		Use:   "explain POD [-n NAMESPACE]",
		Short: "In a source cluster: why a pod runs where it runs, or nowhere",
		Long: `Run in the SOURCE cluster, about one of its pods.

Shows the pod's election (its generation and the elected target), where it
runs (its virtual node and target), and what each target that may take the
pod answered: its candidate there Reserved (node, score), Bound (node),
Unschedulable (the target scheduler's message, e.g. "Insufficient cpu"),
Unreserved (why the reservation ended), Waiting (not scheduled yet), no
candidate (and why: the target does not invite the pod's namespace, is not
Ready, or the pod runs elsewhere), or Unreachable (the error); and, for a
target the agent sends no new candidate whatever the policy, why: it is
held back (its pods' delegates kept vanishing there), or its
ClusterSummary says none of its nodes can run the pod (its required node
affinity; its requests, while another target may have room). Then the
pod's latest Events.

Each target is asked, for the candidate and for the ClusterSummary it
publishes for this cluster, with the kubeconfig Secret its Target or
ClusterTarget names (the agent's own credentials), so you need to be allowed
to read those Secrets. Candidates are found by the source pod's UID; with --cluster-name
(the source agent's clusterName) they are read by their deterministic name
instead.`,
		Example: `  kubectl flotilla explain web-0 -n shop
  kubectl flotilla explain web-0 -n shop -o json`,
		Args: exactArgs("POD"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := oneOf("output", o.output, "text", "json", "yaml"); err != nil {
				return err
			}
			c, err := kube.clients()
			if err != nil {
				return err
			}
			e, err := explain(cmd.Context(), c, o, args[0])
			if err != nil {
				return err
			}
			return writeExplanation(cmd.OutOrStdout(), e, o.output, time.Now())
		},
	}
	fs := cmd.Flags()
	fs.StringVarP(&o.output, "output", "o", "text", "Output format: text, json or yaml.")
	fs.StringVar(&o.clusterName, "cluster-name", "", "This cluster's name as its targets know it (the agent's clusterName): candidates are then read by name instead of listed by the pod's UID.")
	fs.StringVar(&o.agentNamespace, "agent-namespace", DefaultAgentNamespace, "Namespace of Flotilla's agent in this cluster: where a ClusterTarget's Secret is when its reference names no namespace.")
	return cmd
}

// targetInfo is what explain needs of a Target or ClusterTarget.
type targetInfo struct {
	name        string // as elections and Events name it
	kind        string
	self        bool
	secret      types.NamespacedName
	secretKey   string
	mapping     map[string]string
	ready       *metav1.Condition
	namespaces  []string
	virtualNode string
	deleting    bool
	// labels are the target's own (spec.labels).
	labels map[string]string
	// summary is the ClusterSummary the target publishes for this
	// cluster (readSummaries); nil when it publishes none, or it was not
	// read.
	summary *v1alpha1.ClusterSummaryStatus
	// heldBack says why the agent holds the target back, as its Ready
	// condition says (reason DelegatesLost, or Cordoned); "" when it does
	// not.
	heldBack string
}

// invites reports whether the agent plans the pod's placement among the
// target's: it is not being deleted, and its invitation covers the pod's
// namespace.
func (t targetInfo) invites(pod *corev1.Pod) bool {
	return !t.deleting && (len(t.namespaces) == 0 || slices.Contains(t.namespaces, t.namespaceFor(pod.Namespace)))
}

func (t targetInfo) namespaceFor(ns string) string {
	if m, ok := t.mapping[ns]; ok {
		return m
	}
	return ns
}

func explain(ctx context.Context, c *clients, o *explainOptions, name string) (*Explanation, error) {
	pod, err := c.kube.CoreV1().Pods(c.namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("pod %s/%s not found in %s: check the name and -n", c.namespace, name, c.where)
		}
		return nil, c.explainAPIError(err, fmt.Sprintf("reading pod %s/%s", c.namespace, name))
	}
	e := &Explanation{
		Pod: pod.Namespace + "/" + pod.Name, UID: string(pod.UID), Phase: string(pod.Status.Phase),
		SourcePod: pod.Spec.SchedulerName == protocol.SourceSchedulerName,
		Local:     pod.Labels[protocol.LocalLabel] == "true",
		Node:      pod.Spec.NodeName, Targets: []Answer{}, Events: []EventSummary{},
	}
	for i, cond := range pod.Status.Conditions {
		if cond.Type == corev1.PodScheduled && cond.Status != corev1.ConditionTrue {
			e.Scheduled = &pod.Status.Conditions[i]
		}
	}
	var targets []targetInfo
	if e.SourcePod {
		raw := pod.Annotations[protocol.ElectionAnnotation]
		el, perr := protocol.ParseElection(raw)
		e.Election = &ElectionRecord{Generation: el.Generation, Target: el.Target, Nonce: el.Nonce}
		if perr != nil {
			e.Election.Error = perr.Error()
		}
		var err error
		targets, err = targetsOf(ctx, c, o.agentNamespace, pod.Namespace)
		if err != nil {
			return nil, err
		}
		for _, t := range targets {
			if pod.Spec.NodeName != "" && t.virtualNode == pod.Spec.NodeName {
				e.RunsIn = t.name
			}
		}
		e.Targets = askTargets(ctx, c, o.clusterName, pod, el, targets)
		readSummaries(ctx, c, targets, e.Targets)
		e.Gang = c.explainGang(ctx, o.clusterName, pod, targets)
	}
	c.explainPlacement(ctx, e, pod, targets)
	events, err := c.kube.CoreV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(pod.UID)})
	if err != nil {
		return nil, c.explainAPIError(err, "listing the pod's Events")
	}
	e.Events = summarizeEvents(events.Items, maxEvents)
	return e, nil
}

// targetsOf lists the targets that may take pods of a namespace: every
// ClusterTarget and the namespace's Targets.
func targetsOf(ctx context.Context, c *clients, agentNamespace, namespace string) ([]targetInfo, error) {
	var out []targetInfo
	cts := &v1alpha1.ClusterTargetList{}
	if err := c.cr.List(ctx, cts); err != nil {
		return nil, c.explainAPIError(err, "listing ClusterTargets")
	}
	for _, ct := range cts.Items {
		t := targetInfo{name: ct.Name, kind: "ClusterTarget", self: ct.Spec.Self, deleting: ct.DeletionTimestamp != nil, labels: ct.Spec.StringMap()}
		if ref := ct.Spec.KubeconfigSecretRef; ref != nil {
			ns := ref.Namespace
			if ns == "" {
				ns = agentNamespace
			}
			t.secret, t.secretKey = types.NamespacedName{Namespace: ns, Name: ref.Name}, ref.Key
		}
		if len(ct.Spec.NamespaceMapping) > 0 {
			t.mapping = map[string]string{}
			for _, m := range ct.Spec.NamespaceMapping {
				t.mapping[m.Source] = m.Target
			}
		}
		t.fillStatus(ct.Status, "", ct.Name)
		out = append(out, t)
	}
	ts := &v1alpha1.TargetList{}
	if err := c.cr.List(ctx, ts, client.InNamespace(namespace)); err != nil {
		return nil, c.explainAPIError(err, "listing Targets")
	}
	for _, tg := range ts.Items {
		t := targetInfo{name: tg.Namespace + "/" + tg.Name, kind: "Target", self: tg.Spec.Self, deleting: tg.DeletionTimestamp != nil, labels: tg.Spec.StringMap()}
		if ref := tg.Spec.KubeconfigSecretRef; ref != nil {
			t.secret, t.secretKey = types.NamespacedName{Namespace: tg.Namespace, Name: ref.Name}, ref.Key
		}
		if tg.Spec.TargetNamespace != "" {
			t.mapping = map[string]string{tg.Namespace: tg.Spec.TargetNamespace}
		}
		t.fillStatus(tg.Status, tg.Namespace, tg.Name)
		out = append(out, t)
	}
	return out, nil
}

func (t *targetInfo) fillStatus(s v1alpha1.TargetStatus, namespace, name string) {
	t.ready = meta.FindStatusCondition(s.Conditions, v1alpha1.TargetReady)
	t.namespaces = s.Namespaces
	t.virtualNode = s.VirtualNode
	if t.virtualNode == "" {
		t.virtualNode = protocol.VirtualNodeName(namespace, name)
	}
	switch {
	case t.ready == nil:
	case t.ready.Status != metav1.ConditionTrue && t.ready.Reason == v1alpha1.ReasonDelegatesLost:
		t.heldBack = orDefault(t.ready.Message, "the delegates of this cluster's pods vanished in the target again and again")
	case t.ready.Status == metav1.ConditionTrue && t.ready.Reason == v1alpha1.ReasonCordoned:
		t.heldBack = "its virtual node " + t.virtualNode + " is cordoned"
	}
}

// askTargets looks for the pod's candidate in every target at once.
func askTargets(ctx context.Context, c *clients, clusterName string, pod *corev1.Pod, el protocol.Election, targets []targetInfo) []Answer {
	answers := make([]Answer, len(targets))
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, targetTimeout)
			defer cancel()
			cand, err := findCandidate(ctx, c, clusterName, pod, t)
			answers[i] = answerFor(t, pod, el, cand, err)
		})
	}
	wg.Wait()
	return answers
}

// findCandidate reads the pod's candidate in a target; nil when there is
// none.
func findCandidate(ctx context.Context, c *clients, clusterName string, pod *corev1.Pod, t targetInfo) (*corev1.Pod, error) {
	kube := c.kube
	if !t.self {
		var err error
		if kube, err = targetClient(ctx, c, t); err != nil {
			return nil, err
		}
	}
	ns := t.namespaceFor(pod.Namespace)
	if clusterName != "" {
		cand, err := kube.CoreV1().Pods(ns).Get(ctx, protocol.CandidateName(clusterName, t.name, pod.Namespace, pod.Name, string(pod.UID)), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return cand, err
	}
	sel := labels.SelectorFromSet(labels.Set{protocol.CandidateLabel: "true", protocol.TargetLabel: protocol.TargetLabelValue(t.name), protocol.SourceUIDLabel: string(pod.UID)}).String()
	list, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, err
	}
	var found *corev1.Pod
	for i := range list.Items {
		// The live one, if one is also being deleted.
		if found == nil || found.DeletionTimestamp != nil {
			found = &list.Items[i]
		}
	}
	return found, nil
}

// targetClient connects to a target as the source's agent does: with the
// kubeconfig of the Secret its Target or ClusterTarget names.
func targetClient(ctx context.Context, c *clients, t targetInfo) (kubernetes.Interface, error) {
	cfg, _, err := targetConnection(ctx, c, t)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// targetConnection reads the kubeconfig Secret a target names: the
// connection to the target, and the name of the ClusterSummary it
// publishes for this cluster ("" when the Secret names none).
func targetConnection(ctx context.Context, c *clients, t targetInfo) (*rest.Config, string, error) {
	if t.secret.Name == "" {
		return nil, "", fmt.Errorf("target %s names no kubeconfig Secret", t.name)
	}
	secret, err := c.kube.CoreV1().Secrets(t.secret.Namespace).Get(ctx, t.secret.Name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, "", fmt.Errorf("its kubeconfig Secret %s does not exist (for a ClusterTarget without a namespace in its reference, pass the agent's --agent-namespace)", t.secret)
		}
		return nil, "", fmt.Errorf("reading its kubeconfig Secret %s: %w", t.secret, err)
	}
	key := t.secretKey
	if key == "" {
		key = "kubeconfig"
	}
	data, ok := secret.Data[key]
	if !ok {
		return nil, "", fmt.Errorf("its kubeconfig Secret %s has no key %q", t.secret, key)
	}
	cfg, err := kubeconfig.RESTConfig(data)
	if err != nil {
		return nil, "", fmt.Errorf("Secret %s: %w", t.secret, err)
	}
	cfg.UserAgent = "kubectl-flotilla"
	cfg.Timeout = targetTimeout
	return cfg, string(secret.Data[protocol.InvitationSummaryKey]), nil
}

// readSummaries reads, in every target at once, the ClusterSummary it
// publishes for this cluster, which the agent filters the targets by
// before any plan. A self target publishes none, and a target that did
// not answer (answers[i], Unreachable) is not asked again. A target whose
// summary is not read is judged as one that publishes none; when the read
// failed, its answer says so.
func readSummaries(ctx context.Context, c *clients, targets []targetInfo, answers []Answer) {
	var wg sync.WaitGroup
	for i := range targets {
		if targets[i].self || answers[i].Answer == AnswerUnreachable {
			continue
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, targetTimeout)
			defer cancel()
			s, err := readSummary(ctx, c, targets[i])
			targets[i].summary = s
			if err != nil {
				note := fmt.Sprintf("its ClusterSummary could not be read (%v): explain judges the target as one that publishes none", err)
				if answers[i].Reason != "" {
					note = answers[i].Reason + "; " + note
				}
				answers[i].Reason = note
			}
		})
	}
	wg.Wait()
}

// readSummary reads the ClusterSummary a target publishes for this
// cluster; nil when its Secret names none.
func readSummary(ctx context.Context, c *clients, t targetInfo) (*v1alpha1.ClusterSummaryStatus, error) {
	cfg, name, err := targetConnection(ctx, c, t)
	if err != nil || name == "" {
		return nil, err
	}
	cfg.GroupVersion = &v1alpha1.GroupVersion
	cfg.APIPath = "/apis"
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	rc, err := rest.RESTClientFor(cfg)
	if err != nil {
		return nil, err
	}
	sum := &v1alpha1.ClusterSummary{}
	if err := rc.Get().Resource("clustersummaries").Name(name).Do(ctx).Into(sum); err != nil {
		return nil, fmt.Errorf("reading ClusterSummary %s: %w", name, err)
	}
	return &sum.Status, nil
}

// answerFor is a target's answer: its candidate's state, or why there is
// none.
func answerFor(t targetInfo, pod *corev1.Pod, el protocol.Election, cand *corev1.Pod, lookupErr error) Answer {
	a := Answer{Target: t.name, Kind: t.kind, Namespace: t.namespaceFor(pod.Namespace), Elected: el.Target == t.name}
	if cand != nil {
		a.Candidate = cand.Name
		if d, err := protocol.ParsePinnedDomain(cand.Annotations[protocol.DomainAnnotation]); err == nil && d != nil {
			a.Domain = showDomain(d)
		}
		candidateAnswer(&a, cand, time.Now())
		return a
	}
	skip := skipReason(t, pod)
	switch {
	case lookupErr != nil && skip == "":
		a.Answer, a.Reason = AnswerUnreachable, lookupErr.Error()
	case skip != "":
		a.Answer, a.Reason = AnswerNoCandidate, skip
	default:
		a.Answer = AnswerNoCandidate
		a.Reason = "the agent has not sent a candidate there (yet): a pod's candidates go to a few targets first (the agent's placement.maxCandidates, 2 by default), drawn by their room, speed and misses; or it deleted it"
	}
	return a
}

// candidateAnswer reads what the target's scheduler said of a candidate
// by now: the binding itself first, then the plugin's report and the
// scheduler's condition.
func candidateAnswer(a *Answer, cand *corev1.Pod, now time.Time) {
	var state protocol.State
	var stateErr string
	if raw := cand.Annotations[protocol.StateAnnotation]; raw != "" {
		if err := json.Unmarshal([]byte(raw), &state); err != nil {
			stateErr = fmt.Sprintf("malformed %s annotation %q", protocol.StateAnnotation, raw)
		}
	}
	unschedulable := ""
	for _, c := range cand.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			unschedulable = c.Message
		}
	}
	var notes []string
	switch {
	case cand.Spec.NodeName != "":
		a.Answer, a.Node = AnswerBound, cand.Spec.NodeName
	case state.Phase == protocol.PhaseReserved:
		a.Answer, a.Node = AnswerReserved, state.Node
		score := state.Score
		a.Score = &score
		if cand.Annotations[protocol.AllowedAnnotation] != "" {
			notes = append(notes, "allowed to bind: the source elected it")
		} else {
			notes = append(notes, "waiting in Permit for the source's election")
		}
	case unschedulable != "":
		a.Answer = AnswerUnschedulable
		notes = append(notes, unschedulable)
		if state.Phase == protocol.PhaseUnreserved && state.Reason != "" {
			notes = append(notes, "an earlier reservation ended: "+state.Reason)
		}
	case state.Phase == protocol.PhaseUnreserved:
		a.Answer = AnswerUnreserved
		notes = append(notes, orDefault(state.Reason, "the reservation ended"))
	case state.Phase == protocol.PhaseBound:
		a.Answer, a.Node = AnswerBound, state.Node
	default:
		a.Answer = AnswerWaiting
		notes = append(notes, "the target's scheduler has not reported on it yet")
		if waited := now.Sub(cand.CreationTimestamp.Time); !cand.CreationTimestamp.IsZero() && waited > overdueAfter+overdueConfirm {
			a.Overdue = true
			notes = append(notes, fmt.Sprintf("unanswered for %s: overdue once the target has answered none of the agent's candidates for as long (3 times its answer time, at least %s, and %s more)", waited.Round(time.Second), overdueAfter, overdueConfirm))
		}
	}
	if stateErr != "" {
		notes = append(notes, stateErr)
	}
	if cand.DeletionTimestamp != nil {
		notes = append(notes, "being deleted")
	}
	a.Reason = strings.Join(notes, "; ")
}

// skipReason says why a target has no candidate of the pod, when the
// source's objects tell: the pod runs elsewhere, the target does not invite
// its namespace, or the target is not Ready.
func skipReason(t targetInfo, pod *corev1.Pod) string {
	if pod.Spec.NodeName != "" {
		if pod.Spec.NodeName == t.virtualNode {
			return "the pod is bound to this target's virtual node, but its delegate there is gone"
		}
		return "the pod runs on " + pod.Spec.NodeName + ": its other candidates were deleted"
	}
	for _, c := range pod.Status.Conditions {
		// Unschedulable names the targets that do not invite the pod's
		// namespace among its reasons; NotInvited is how agents before it
		// said so.
		if c.Type != corev1.PodScheduled || (c.Reason != corev1.PodReasonUnschedulable && c.Reason != protocol.ReasonNotInvited) {
			continue
		}
		msg := strings.TrimPrefix(c.Message, "Skipped: ")
		if _, rest, ok := strings.Cut(msg, " targets can run the pod: "); ok {
			msg = rest
		}
		for _, part := range strings.Split(msg, "; ") {
			if strings.HasPrefix(part, "target "+t.name+" ") {
				return "NotInvited: " + part
			}
		}
	}
	if t.deleting {
		return "the target is being deleted: no new candidates go there"
	}
	if t.ready == nil {
		return "the target has no Ready condition yet: is the agent running?"
	}
	if t.ready.Status != metav1.ConditionTrue {
		return fmt.Sprintf("the target is not Ready (%s): %s", t.ready.Reason, oneLine(t.ready.Message))
	}
	if len(t.namespaces) > 0 && !slices.Contains(t.namespaces, t.namespaceFor(pod.Namespace)) {
		return "the target's invitation does not cover namespace " + t.namespaceFor(pod.Namespace)
	}
	return ""
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// summarizeEvents keeps the latest n Events, oldest first.
func summarizeEvents(events []corev1.Event, n int) []EventSummary {
	out := make([]EventSummary, 0, len(events))
	for _, ev := range events {
		out = append(out, EventSummary{Type: ev.Type, Reason: ev.Reason, Message: ev.Message, Count: ev.Count, LastSeen: lastSeen(ev)})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].LastSeen.Before(out[j].LastSeen) })
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return out
}

func lastSeen(ev corev1.Event) time.Time {
	t := ev.LastTimestamp.Time
	if ev.Series != nil && ev.Series.LastObservedTime.After(t) {
		t = ev.Series.LastObservedTime.Time
	}
	if ev.EventTime.After(t) {
		t = ev.EventTime.Time
	}
	if t.IsZero() {
		t = ev.CreationTimestamp.Time
	}
	return t
}

func writeExplanation(w io.Writer, e *Explanation, format string, now time.Time) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(e)
	case "yaml":
		out, err := yaml.Marshal(e)
		if err != nil {
			return err
		}
		_, err = w.Write(out)
		return err
	}
	if !e.SourcePod && e.Local {
		fmt.Fprintf(w, "Pod %s stayed in this cluster: when it was created, a self target with localFirst had a node with room for it. It has no candidate; this cluster schedules it as usual (node %s).\n", e.Pod, orDefault(e.Node, "none yet"))
		writeCapacity(w, e.Capacity)
	} else if !e.SourcePod {
		fmt.Fprintf(w, "Pod %s is not a Flotilla source pod: this cluster schedules it as usual (node %s).\n", e.Pod, orDefault(e.Node, "none yet"))
		fmt.Fprintf(w, "To place a pod through Flotilla, create it in a namespace labelled %s=true with the label %s=true.\n", protocol.NamespaceEnabledLabel, protocol.ElectLabel)
		writeCapacity(w, e.Capacity)
	} else {
		fmt.Fprintf(w, "Pod:       %s (uid %s), %s\n", e.Pod, e.UID, e.Phase)
		switch {
		case e.RunsIn != "":
			fmt.Fprintf(w, "Runs in:   target %s (virtual node %s)\n", e.RunsIn, e.Node)
		case e.Node != "":
			fmt.Fprintf(w, "Runs on:   node %s\n", e.Node)
		default:
			fmt.Fprintln(w, "Runs in:   no target yet")
		}
		if el := e.Election; el != nil {
			switch {
			case el.Error != "":
				fmt.Fprintf(w, "Election:  unreadable: %s\n", el.Error)
			case el.Target != "" && el.Nonce == protocol.AnyReservation:
				fmt.Fprintf(w, "Election:  generation %d, target %s pre-elected (before any reservation: its candidate binds on its first)\n", el.Generation, el.Target)
			case el.Target != "":
				fmt.Fprintf(w, "Election:  generation %d, target %s elected (reservation %s)\n", el.Generation, el.Target, el.Nonce)
			case el.Generation > 0:
				fmt.Fprintf(w, "Election:  generation %d, open (the last elected candidate was unreserved)\n", el.Generation)
			default:
				fmt.Fprintln(w, "Election:  none yet")
			}
		}
		if s := e.Scheduled; s != nil {
			fmt.Fprintf(w, "Scheduled: %s %s: %s\n", s.Status, s.Reason, oneLine(s.Message))
		}
		writePolicy(w, e.Policy)
		writeCapacity(w, e.Capacity)
		writeGang(w, e.Gang)
		fmt.Fprintln(w)
		if len(e.Targets) == 0 {
			fmt.Fprintln(w, "No target may take pods of this namespace: run 'kubectl flotilla join' to add one.")
		} else {
			writeAnswers(w, e)
		}
	}
	fmt.Fprintln(w)
	if len(e.Events) == 0 {
		fmt.Fprintln(w, "Events: none")
		return nil
	}
	fmt.Fprintln(w, "Events (latest last):")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AGE\tTYPE\tREASON\tMESSAGE")
	for _, ev := range e.Events {
		age := "-"
		if !ev.LastSeen.IsZero() {
			age = duration.HumanDuration(now.Sub(ev.LastSeen))
		}
		reason := ev.Reason
		if ev.Count > 1 {
			reason = fmt.Sprintf("%s (x%d)", reason, ev.Count)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", age, ev.Type, reason, oneLine(ev.Message))
	}
	return tw.Flush()
}
