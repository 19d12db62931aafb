// Package protocol owns the names and encodings of the labels and annotations
// through which a source cluster's agent and a target cluster's scheduler talk
// about one candidate pod. docs/protocol.md describes the state machine; this
// package is its only spelling, so both sides always agree.
package protocol

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// Prefix of every Flotilla label and annotation.
const Prefix = "multicluster.flotilla.dev/"

// Opt-in (written by users).
const (
	// NamespaceEnabledLabel on a namespace enables Flotilla in it.
	NamespaceEnabledLabel = Prefix + "enabled"
	// ElectLabel on a pod (value "true") asks for multi-cluster scheduling.
	ElectLabel = Prefix + "elect"
)

// On source pods (written by the source's webhook and agent).
const (
	// OriginalFieldsAnnotation holds, JSON (OriginalFields), the fields of
	// a source pod's spec that the webhook changed, as they were before it:
	// the rest of what its candidates run is the pod's own spec.
	OriginalFieldsAnnotation = Prefix + "original-fields"
	// SourceSpecAnnotation held a source pod's whole spec as admitted up to
	// the webhook, JSON, on pods that agents before original-fields made
	// source pods; it is still read from them.
	SourceSpecAnnotation = Prefix + "source-spec"
	// ElectionAnnotation is the durable election record, see Election.
	ElectionAnnotation = Prefix + "election"
	// ElectedDomainAnnotation is the domain of the node that holds or runs
	// the source pod's elected reservation, as its target reported it
	// (State.Domain), written with the election (EncodeDomain). Not
	// DomainAnnotation, the domain a candidate was pinned to.
	ElectedDomainAnnotation = Prefix + "elected-domain"
	// SourceSchedulerName is set on source pods so that no scheduler of the
	// source binds them; the agent binds them to a virtual node.
	SourceSchedulerName = "flotilla-source"
	// LocalLabel (value "true") marks an opted-in pod that the webhook kept
	// in its own cluster, for that cluster's scheduler, because a self
	// target with localFirst had a node with room for it: it is no source
	// pod and has no candidates.
	LocalLabel = Prefix + "local"
)

// On candidate pods.
const (
	// CandidateLabel marks a candidate pod (value "true"), set by the source.
	CandidateLabel = Prefix + "candidate"
	// SourceClusterLabel names the source cluster that created the candidate.
	SourceClusterLabel = Prefix + "source-cluster"
	// SourceUIDLabel is the UID of the source pod.
	SourceUIDLabel = Prefix + "source-uid"
	// SourceNamespaceAnnotation and SourceNameAnnotation name the source pod.
	SourceNamespaceAnnotation = Prefix + "source-namespace"
	SourceNameAnnotation      = Prefix + "source-name"
	// SourceNameLabel is the source pod's name as a label value (see
	// SourceNameLabelValue), so that a target's users can select the
	// candidates of one source pod, whose own labels a candidate carries
	// renamed only (CarriedLabelKey).
	SourceNameLabel = Prefix + "source-name"
	// SourceLabelsAnnotation holds the source pod's labels as they are,
	// JSON, on a candidate whose target did not ask to keep them as
	// labels: a source's labels would make the target's Services,
	// NetworkPolicies and controllers select a pod they know nothing of,
	// so the candidate's labels carry them renamed (CarriedLabelKey).
	SourceLabelsAnnotation = Prefix + "source-labels"
	// TargetAnnotation is the target's name as the source knows it.
	TargetAnnotation = Prefix + "target"
	// TargetLabel ties a candidate to the one target of its source that
	// made it (TargetLabelValue of the target's name): two targets of one
	// source that reach the same cluster and namespace (a namespaced self
	// Target beside the self ClusterTarget, two kubeconfigs of one
	// cluster) each select, elect and delete only their own candidates.
	TargetLabel = Prefix + "target"

	// StateAnnotation is written by the target's scheduler, see State.
	StateAnnotation = Prefix + "state"
	// AllowedAnnotation is written by the source: the Allowance of the one
	// reservation it elected.
	AllowedAnnotation = Prefix + "allowed"
	// DeniedAnnotation is written by the source: a Denial. While it is on
	// the candidate, the plugin makes no reservation for it and rejects the
	// one it holds, so a candidate that cannot be elected now holds no node;
	// the source removes it when the candidate may be elected again.
	DeniedAnnotation = Prefix + "denied"

	// SchedulerName is the target-side profile that schedules candidates.
	SchedulerName = "flotilla"
)

// On the copies of a source pod's ConfigMaps and Secrets in a target.
const (
	// CopyLabel (value "true") marks a ConfigMap or Secret as a copy the
	// source sent for its candidates; SourceClusterLabel names the source,
	// whose copies alone it may change.
	CopyLabel = Prefix + "copy"
)

// UserKeys are the labels and annotations of Prefix that a pod's author
// writes: the opt-in, the placement policy's name, the on-demand/spot
// split's inputs and the gang's declaration (owner, size, mode). The split's places (CapacityTypeLabel, OnDemandSlotLabel)
// are the split's own to judge (pkg/split). Every other key of Prefix on a
// pod is written by Flotilla alone: see WrittenByFlotilla.
var UserKeys = []string{ElectLabel, PlacementPolicyAnnotation, MaxOnDemandAnnotation, CapacitySplitLabel, CapacityTypeLabel, OnDemandSlotLabel, GangAnnotation, GangMinMemberAnnotation, GangModeAnnotation}

// WrittenByFlotilla reports whether a pod's label or annotation key is one
// that only Flotilla's webhook, agent or scheduler writes: a key of Prefix
// that is not one of UserKeys. A pod created with one carries it only if
// the webhook wrote it; a change of one by anyone but the agent is refused
// (the chart's ValidatingAdmissionPolicy, docs/protocol.md).
func WrittenByFlotilla(key string) bool {
	if !strings.HasPrefix(key, Prefix) {
		return false
	}
	for _, k := range UserKeys {
		if key == k {
			return false
		}
	}
	return true
}

// SourceNameLabelValue is the value of SourceNameLabel for a source pod
// named name: the name itself when it is a valid label value (63
// characters at most, as a pod's name of a Deployment's, a StatefulSet's
// or a Job's usually is), else its first 52 characters, '-' and 10 hex
// digits of its SHA-256.
func SourceNameLabelValue(name string) string {
	if len(name) <= 63 {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return strings.TrimRight(name[:52], "-.") + "-" + hex.EncodeToString(sum[:])[:10]
}

// VirtualNodeTaintKey is the taint of every virtual node; source pods tolerate
// it, ordinary pods and DaemonSets stay off.
const VirtualNodeTaintKey = "virtual-kubelet.io/provider"

// VirtualNodeTaintValue is the taint's value.
const VirtualNodeTaintValue = "flotilla"

// Phase of a candidate as its target's scheduler reports it.
type Phase string

const (
	PhaseReserved   Phase = "Reserved"
	PhaseUnreserved Phase = "Unreserved"
	PhaseBound      Phase = "Bound"
)

// State is what the target scheduler reports on a candidate. Nonce names one
// reservation: every Reserve makes a new one, so an allowance meant for an
// earlier reservation never matches a later one.
//
// Topology is the reserved (or bound) node's values of the scheduler's
// topology keys, on the Reserved and Bound reports; a key the node has no
// label of has no entry. It is a peer's write: the source reads it only
// through Domain.
type State struct {
	Phase    Phase             `json:"phase"`
	Nonce    string            `json:"nonce"`
	Node     string            `json:"node,omitempty"`
	Score    int64             `json:"score,omitempty"`
	Reason   string            `json:"reason,omitempty"`
	Topology map[string]string `json:"topology,omitempty"`
}

// MaxNonceLength bounds a nonce; the plugin's are 16 hex characters.
const MaxNonceLength = 64

// ValidNonce reports whether a nonce reported by a target can name a
// reservation: 1 to MaxNonceLength letters, digits or '-'. A nonce is a
// peer's write and ends up in the election record and the allowance, which
// cannot carry a '/' in it; the source treats a report with any other nonce
// as no report.
func ValidNonce(n string) bool {
	if n == "" || len(n) > MaxNonceLength {
		return false
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '-') {
			return false
		}
	}
	return true
}

// Election is the durable record on the source pod. Generation grows by one
// every time the election changes hands or is withdrawn; Target and Nonce are
// empty when no candidate is elected.
type Election struct {
	Generation int64
	Target     string
	Nonce      string
}

// Encode renders the election as "<generation>/<target>/<nonce>".
func (e Election) Encode() string {
	return fmt.Sprintf("%d/%s/%s", e.Generation, e.Target, e.Nonce)
}

// Elected reports whether a candidate holds the election.
func (e Election) Elected() bool { return e.Target != "" }

// ParseElection reads an election record; an empty value is the zero
// election. The target may itself hold a '/' (a namespaced Target is
// "<namespace>/<name>"); the generation and the nonce never do.
func ParseElection(v string) (Election, error) {
	if v == "" {
		return Election{}, nil
	}
	first, last := strings.IndexByte(v, '/'), strings.LastIndexByte(v, '/')
	if first < 0 || first == last {
		return Election{}, fmt.Errorf("election %q: want <generation>/<target>/<nonce>", v)
	}
	gen, err := strconv.ParseInt(v[:first], 10, 64)
	if err != nil || gen < 0 {
		return Election{}, fmt.Errorf("election %q: bad generation", v)
	}
	return Election{Generation: gen, Target: v[first+1 : last], Nonce: v[last+1:]}, nil
}

// Allowance is what the source writes on the elected candidate. It names the
// election (source pod UID and generation) and the reservation (nonce).
type Allowance struct {
	SourceUID  string
	Generation int64
	Nonce      string
}

// AnyReservation is the nonce of a pre-allowance: an allowance the source
// writes on a candidate as it creates it, having elected the candidate's
// target before any reservation (the election record carries it as its
// nonce too). It allows every reservation of that candidate object: the
// plugin binds it on its first reservation without reporting Reserved.
// The source withdraws it only by deleting the candidate (with its UID and
// resourceVersion as preconditions), so no reservation can bind on a
// pre-allowance the source has given up. It is no nonce a target may
// report (ValidNonce refuses it).
const AnyReservation = "*"

// PreAllows reports whether a is a pre-allowance (AnyReservation).
func (a Allowance) PreAllows() bool { return a.Nonce == AnyReservation }

// Encode renders the allowance as "<source uid>/<generation>/<nonce>".
func (a Allowance) Encode() string {
	return fmt.Sprintf("%s/%d/%s", a.SourceUID, a.Generation, a.Nonce)
}

// ParseAllowance reads an allowance.
func ParseAllowance(v string) (Allowance, error) {
	parts := strings.SplitN(v, "/", 3)
	if len(parts) != 3 || parts[0] == "" || parts[2] == "" {
		return Allowance{}, fmt.Errorf("allowance %q: want <source uid>/<generation>/<nonce>", v)
	}
	gen, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return Allowance{}, fmt.Errorf("allowance %q: bad generation", v)
	}
	return Allowance{SourceUID: parts[0], Generation: gen, Nonce: parts[2]}, nil
}

// Denial is what the source writes on a candidate it will not elect now:
// another target's candidate is elected, or its placement policy excludes
// this one. It names the source pod, and the election generation it was
// written under, for the humans reading it.
type Denial struct {
	SourceUID  string
	Generation int64
}

// DeniedMessage starts the reason the plugin gives for a candidate it
// turned away on its source's denial, in its Unreserved state and its
// Unschedulable condition: the source, which asked for it, does not take it
// for the target's failure.
const DeniedMessage = "denied by the source"

// Encode renders the denial as "<source uid>/<generation>".
func (d Denial) Encode() string {
	return fmt.Sprintf("%s/%d", d.SourceUID, d.Generation)
}

// ParseDenial reads a denial.
func ParseDenial(v string) (Denial, error) {
	uid, g, ok := strings.Cut(v, "/")
	if !ok || uid == "" || strings.Contains(g, "/") {
		return Denial{}, fmt.Errorf("denial %q: want <source uid>/<generation>", v)
	}
	gen, err := strconv.ParseInt(g, 10, 64)
	if err != nil || gen < 0 {
		return Denial{}, fmt.Errorf("denial %q: bad generation", v)
	}
	return Denial{SourceUID: uid, Generation: gen}, nil
}

// TargetLabelValue is the value of TargetLabel for the target the source
// calls target (a ClusterTarget's name, or "<namespace>/<name>" of a
// Target): 16 hex digits of its SHA-256, a valid label value whatever the
// name's length or its '/'.
func TargetLabelValue(target string) string {
	sum := sha256.Sum256([]byte(target))
	return hex.EncodeToString(sum[:])[:16]
}

// CandidateName is the deterministic name of the candidate of one source pod
// in one target: the source pod's name, shortened if needed, and a hash of
// the source cluster, the target (as the source calls it), namespace, name
// and UID. A retry always computes the same name, so a target never gets
// two candidates for one source pod; two targets of one source that reach
// the same cluster and namespace name theirs apart.
//
// Every look at a gang's members names each member's candidate in each
// target, so names made are remembered, up to maxCandidateNames of them
// (all are forgotten when more come).
func CandidateName(sourceCluster, target, namespace, name, uid string) string {
	key := candidateNameKey{sourceCluster, target, namespace, name, uid}
	if v, ok := candidateNames.get(key); ok {
		return v
	}
	v := candidateName(sourceCluster, target, namespace, name, uid)
	candidateNames.put(key, v)
	return v
}

// maxCandidateNames bounds CandidateName's memory: an entry is about 200
// bytes, so under a megabyte; a gang of 64 over ten targets names 640.
const maxCandidateNames = 4096

type candidateNameKey struct{ sourceCluster, target, namespace, name, uid string }

var candidateNames = newMemo[candidateNameKey, string](maxCandidateNames)

// candidateName makes CandidateName's name.
func candidateName(sourceCluster, target, namespace, name, uid string) string {
	in := make([]byte, 0, len(sourceCluster)+len(target)+len(namespace)+len(name)+len(uid)+4)
	for i, part := range [...]string{sourceCluster, target, namespace, name, uid} {
		if i > 0 {
			in = append(in, 0)
		}
		in = append(in, part...)
	}
	sum := sha256.Sum256(in)
	var hexSum [10]byte
	hex.Encode(hexSum[:], sum[:5])
	suffix := string(hexSum[:])
	const maxLen = 63
	if len(name) > maxLen-len(suffix)-1 {
		name = strings.TrimRight(name[:maxLen-len(suffix)-1], "-.")
	}
	return name + "-" + suffix
}
