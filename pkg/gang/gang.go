// Package gang decides, for a gang of source pods, which members may be
// elected and when they may bind: all or nothing. Decide and Queue are
// pure: plain values in (each member's place and the targets where it
// holds a reservation), the verdict out; pkg/reservation observes and
// applies them. SizeOf reads a gang's size from what declares it.
//
// A gang is declared on its members (Of): the pod-group label, a
// Kubernetes PodGroup (spec.schedulingGroup.podGroupName) or the gang
// annotation (the pod's Job or JobSet) names it among the pods of one
// namespace, the gang-min-member annotation (or the PodGroup, Job or
// JobSet) says how many must hold their places at once, and gang-mode
// where they may go. No
// member's election is written until the gang holds enough reservations
// for min members in a way its mode accepts; no member is allowed to bind
// until min members stand elected on reservations they still hold.
package gang

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// Mode is where a gang's members may go.
type Mode string

// The modes.
const (
	OneCluster  Mode = protocol.GangOneCluster
	AnyClusters Mode = protocol.GangAnyClusters
)

// MaxMinMember bounds a gang's size: more than this is a mistake, not a
// job.
const MaxMinMember = 10000

// Source is how a gang is declared.
type Source string

// The ways to declare a gang, in the order they are looked for on a pod.
const (
	// FromPodGroup: the pod-group label (scheduler-plugins' coscheduling);
	// the size from the members or their PodGroup's spec.minMember.
	FromPodGroup Source = "podGroup"
	// FromSchedulingGroup: the pod's spec.schedulingGroup.podGroupName,
	// a PodGroup of Kubernetes' own API (scheduling.k8s.io v1beta1 from
	// 1.37, v1alpha2 in 1.36); the size from the members or the PodGroup's
	// gang policy (spec.schedulingPolicy.gang.minCount).
	FromSchedulingGroup Source = "schedulingGroup"
	// FromJob and FromJobSet: the gang annotation asks for the pod's Job,
	// or the JobSet its Job belongs to; the size from the members or the
	// owner's parallelism.
	FromJob    Source = "job"
	FromJobSet Source = "jobset"
)

// Spec is a gang as a member declares it.
type Spec struct {
	// Name is the gang's name among its source's: the pod-group label's
	// value, the PodGroup's name, the Job's or JobSet's name.
	Name      string
	Source    Source
	MinMember int
	Mode      Mode
}

// Key is the gang's key among a source cluster's pods: namespace/name for
// a pod group, namespace/source:name for the others (a label value holds
// no colon, so the two never meet).
func (s Spec) Key(namespace string) string {
	if s.Source == FromPodGroup || s.Source == "" {
		return namespace + "/" + s.Name
	}
	return namespace + "/" + string(s.Source) + ":" + s.Name
}

// NameOfKey names in messages the gang of a key (Key): "pod group
// train", "job train".
func NameOfKey(key string) string {
	_, name, _ := strings.Cut(key, "/")
	if source, n, found := strings.Cut(name, ":"); found {
		return Spec{Source: Source(source), Name: n}.String()
	}
	return Spec{Source: FromPodGroup, Name: name}.String()
}

// String names the gang in messages: "pod group train", "job train".
func (s Spec) String() string {
	switch s.Source {
	case FromSchedulingGroup:
		return "scheduling group " + s.Name
	case FromJob:
		return "job " + s.Name
	case FromJobSet:
		return "jobset " + s.Name
	}
	return "pod group " + s.Name
}

// ErrNoMinMember is Of's error for a member that gives no size: its
// PodGroup, Job or JobSet may (SizeOf).
var ErrNoMinMember = errors.New("no size")

// PodGroupResource is scheduler-plugins' PodGroup, which may give a gang's
// size (spec.minMember) where its members do not.
var PodGroupResource = schema.GroupVersionKind{Group: "scheduling.x-k8s.io", Version: "v1alpha1", Kind: "PodGroup"}

// Of reads the gang pod declares. ok is false when it declares none (no
// pod-group label, no scheduling group, no gang annotation); err says what is
// malformed, and the pod is then placed as an ordinary pod. A pod that
// gives no size gets an error that wraps ErrNoMinMember, with s otherwise
// read: the caller may take the size from the gang's owner (SizeOf).
func Of(pod *corev1.Pod) (s Spec, ok bool, err error) {
	switch {
	case pod.Labels[protocol.PodGroupLabel] != "":
		s = Spec{Name: pod.Labels[protocol.PodGroupLabel], Source: FromPodGroup}
	case pod.Spec.SchedulingGroup != nil && pod.Spec.SchedulingGroup.PodGroupName != nil:
		s = Spec{Name: *pod.Spec.SchedulingGroup.PodGroupName, Source: FromSchedulingGroup}
	default:
		asked, found := pod.Annotations[protocol.GangAnnotation]
		if !found {
			return Spec{}, false, nil
		}
		if s, err = ofOwner(pod, asked); err != nil {
			return s, true, err
		}
	}
	s.Mode = OneCluster
	if err := s.readMode(pod); err != nil {
		return s, true, err
	}
	raw, found := pod.Annotations[protocol.GangMinMemberAnnotation]
	if !found {
		return s, true, fmt.Errorf("%s: annotation %s is missing, and %s: one of them gives how many members must be placed together: %w", s, protocol.GangMinMemberAnnotation, s.sizedBy(), ErrNoMinMember)
	}
	n, perr := strconv.Atoi(raw)
	if perr != nil || n < 1 || n > MaxMinMember {
		return s, true, fmt.Errorf("%s: annotation %s is %q: want a whole number from 1 to %d", s, protocol.GangMinMemberAnnotation, raw, MaxMinMember)
	}
	s.MinMember = n
	return s, true, nil
}

// ofOwner is the gang the gang annotation asks for: the pod's Job, or its
// JobSet.
func ofOwner(pod *corev1.Pod, asked string) (Spec, error) {
	switch asked {
	case protocol.GangOfJob:
		if o := metav1.GetControllerOf(pod); o != nil && o.Kind == "Job" && o.APIVersion == "batch/v1" {
			return Spec{Name: o.Name, Source: FromJob}, nil
		}
		return Spec{Source: FromJob}, fmt.Errorf("annotation %s is %q, but no Job controls the pod", protocol.GangAnnotation, asked)
	case protocol.GangOfJobSet:
		if name := pod.Labels[protocol.JobSetNameLabel]; name != "" {
			return Spec{Name: name, Source: FromJobSet}, nil
		}
		return Spec{Source: FromJobSet}, fmt.Errorf("annotation %s is %q, but the pod has no label %s: it is no JobSet's", protocol.GangAnnotation, asked, protocol.JobSetNameLabel)
	}
	return Spec{}, fmt.Errorf("annotation %s is %q: want %s or %s", protocol.GangAnnotation, asked, protocol.GangOfJob, protocol.GangOfJobSet)
}

// sizedBy says what may give the gang's size where its members do not.
func (s Spec) sizedBy() string {
	switch s.Source {
	case FromSchedulingGroup:
		return fmt.Sprintf("no PodGroup %s (scheduling.k8s.io) gives a gang policy's minCount", s.Name)
	case FromJob:
		return fmt.Sprintf("no Job %s gives its parallelism", s.Name)
	case FromJobSet:
		return fmt.Sprintf("no JobSet %s gives its replicated jobs", s.Name)
	}
	return fmt.Sprintf("no PodGroup %s gives spec.minMember", s.Name)
}

func (s *Spec) readMode(pod *corev1.Pod) error {
	m, found := pod.Annotations[protocol.GangModeAnnotation]
	if !found {
		return nil
	}
	switch Mode(m) {
	case OneCluster, AnyClusters:
		s.Mode = Mode(m)
		return nil
	}
	return fmt.Errorf("%s: annotation %s is %q: want %s or %s", s, protocol.GangModeAnnotation, m, OneCluster, AnyClusters)
}

// MinMemberOf reads a PodGroup's spec.minMember: ok when it is a whole
// number from 1 to MaxMinMember.
func MinMemberOf(pg *unstructured.Unstructured) (int, bool) {
	n, found, err := unstructured.NestedInt64(pg.Object, "spec", "minMember")
	if err != nil || !found || n < 1 || n > MaxMinMember {
		return 0, false
	}
	return int(n), true
}

// Member is one member of a gang as the source sees it.
type Member struct {
	// Name identifies the member (the source pod's name); members are
	// taken in the order given, so the caller sorts them.
	Name string
	// Placed is the target where the member is bound, or elected on a
	// reservation it still holds; "" for none.
	Placed string
	// Bound is true when the member is bound (in Placed).
	Bound bool
	// Elected is the target of the member's standing election, even one
	// whose reservation has ended since (it is bound there, or elected
	// there and not revoked); "" for none.
	Elected string
	// Reserved are the targets where the member holds a reservation that
	// may be elected (not excluded), in the targets' order.
	Reserved []string
}

// Verdict is what the gang allows now.
type Verdict struct {
	// Complete is true when the gang's places (placed members, and
	// reservations of the others) add up to MinMember in a way the mode
	// accepts.
	Complete bool
	// Assign gives, per member name, the target where it may be elected
	// now: only when Complete, and only for members not placed.
	Assign map[string]string
	// Placed counts the members placed (bound, or elected on a reservation
	// they hold).
	Placed int
	// Held counts the places the gang holds toward MinMember: under
	// OneCluster in its target, under AnyClusters the members placed or
	// holding a reservation anywhere. It grows as the gang comes closer
	// to complete.
	Held int
	// Allow is true when min members are placed, or the gang Resumes: a
	// placed member's allowance may be written.
	Allow bool
	// Resumes is true when the gang was placed whole and goes on: a member
	// is bound (under OneCluster in the gang's target), and min members
	// stand elected there, bound or waiting to bind. A member whose
	// reservation ended between its gang's placement and its own
	// binding is then elected again, where it stands elected, as soon as
	// it holds a reservation there, and allowed at once: the gang's
	// places were all taken together once, and holding the member back
	// until every other straggler holds a reservation at the same moment
	// again would only keep the bound members waiting for it. Members
	// without a standing election (the pods that replace lost members) are
	// not: they join as a gang, when it is Complete.
	Resumes bool
	// Missing says, when the gang is not complete, what it lacks. It
	// does not count: it changes only when the gang does, not with every
	// reservation made or let go.
	Missing string
	// Target is, under OneCluster, the gang's target ("" when it has
	// none yet, and under AnyClusters).
	Target string
	// Keep gives, under AnyClusters while the gang is not complete, the
	// one reservation to keep of each member that holds one or more: its
	// candidates in other targets hold, or would hold, nodes another
	// member could reserve. Keeping the target of a member's only
	// reservation keeps the choice steady once its others are let go.
	Keep map[string]string
}

// Decide is the gang's verdict on its members. Under OneCluster the gang
// goes to the target of its bound members, or else to the target holding
// the most of its places (its placed members, and its other members'
// reservations there; ties by the order of first appearance): members
// placed in another target count for nothing, and are not allowed to
// bind. Under AnyClusters every member with a reservation anywhere
// counts, and each goes where the most of the gang already is.
func Decide(spec Spec, members []Member) Verdict {
	return DecideKeeping(spec, members, "")
}

// DecideKeeping is Decide for a gang that a round already chose target
// keep for (under OneCluster; "" for none): the gang goes there while it
// holds places for MinMember of its members, not to a target its members
// hold as many places in, or more. A member's election is written without
// the gang's lock, so the next member's round, under that lock, may not
// see it yet; deciding again on a newer picture (another target's
// reservation reported meanwhile, a tie broken by order) it would elect
// the gang's members in two targets, neither complete, until their
// reservations timed out.
func DecideKeeping(spec Spec, members []Member, keep string) Verdict {
	v := Verdict{Assign: map[string]string{}}
	if spec.Mode == AnyClusters {
		decideAny(spec, members, &v)
	} else {
		decideOne(spec, members, keep, &v)
	}
	resume(spec, members, &v)
	v.Allow = v.Placed >= spec.MinMember || v.Resumes
	if !v.Complete {
		v.Assign = map[string]string{}
	}
	return v
}

// resume sets v.Resumes, and then assigns each member that stands elected
// but is not placed (its reservation ended) to the target of its
// election where it holds a reservation there again; under AnyClusters,
// elsewhere too, where the most of the gang is, as for any member.
func resume(spec Spec, members []Member, v *Verdict) {
	bound, elected := false, 0
	places := map[string]int{}
	for _, m := range members {
		if v.Target != "" && m.Elected != v.Target {
			continue
		}
		if m.Elected != "" {
			elected++
		}
		if m.Bound {
			bound = true
		}
		if m.Placed != "" {
			places[m.Placed]++
		}
	}
	if !bound || elected < spec.MinMember {
		return
	}
	v.Resumes, v.Complete, v.Missing, v.Keep = true, true, "", nil
	for _, m := range members {
		if m.Placed != "" || m.Elected == "" || len(m.Reserved) == 0 || v.Assign[m.Name] != "" ||
			(v.Target != "" && m.Elected != v.Target) {
			continue
		}
		switch {
		case slices.Contains(m.Reserved, m.Elected):
			v.Assign[m.Name] = m.Elected
		case spec.Mode == AnyClusters:
			v.Assign[m.Name] = where(m.Reserved, places)
		default:
			continue
		}
		places[v.Assign[m.Name]]++
	}
}

func decideOne(spec Spec, members []Member, keep string, v *Verdict) {
	var order []string
	count := map[string]int{}
	add := func(t string) {
		if _, seen := count[t]; !seen {
			order = append(order, t)
		}
		count[t]++
	}
	bound := ""
	for _, m := range members {
		if m.Placed != "" {
			add(m.Placed)
			if m.Bound && bound == "" {
				bound = m.Placed
			}
			continue
		}
		for _, t := range m.Reserved {
			add(t)
		}
	}
	best := bound
	if best == "" && keep != "" && count[keep] >= spec.MinMember {
		best = keep
	}
	if best == "" {
		for _, t := range order {
			if best == "" || count[t] > count[best] {
				best = t
			}
		}
	}
	v.Target, v.Held = best, count[best]
	for _, m := range members {
		if m.Placed != "" && m.Placed == best {
			v.Placed++
		}
	}
	if best == "" || count[best] < spec.MinMember {
		v.Missing = fmt.Sprintf("no target holds places for %d members of %s at once", spec.MinMember, spec)
		return
	}
	v.Complete = true
	for _, m := range members {
		if m.Placed == "" && slices.Contains(m.Reserved, best) {
			v.Assign[m.Name] = best
		}
	}
}

func decideAny(spec Spec, members []Member, v *Verdict) {
	places := map[string]int{}
	holding := 0
	for _, m := range members {
		switch {
		case m.Placed != "":
			places[m.Placed]++
			v.Placed++
			holding++
		case len(m.Reserved) > 0:
			holding++
		}
	}
	v.Held = holding
	if holding < spec.MinMember {
		v.Missing = fmt.Sprintf("fewer than %d members of %s hold a place at once", spec.MinMember, spec)
		v.Keep = map[string]string{}
		for _, m := range members {
			if m.Placed == "" && len(m.Reserved) > 0 {
				v.Keep[m.Name] = where(m.Reserved, places)
			}
		}
		return
	}
	v.Complete = true
	for _, m := range members {
		if m.Placed != "" || len(m.Reserved) == 0 {
			continue
		}
		to := where(m.Reserved, places)
		places[to]++
		v.Assign[m.Name] = to
	}
}

// where is the target of reserved where the most of the gang is placed;
// ties go to the first.
func where(reserved []string, places map[string]int) string {
	to := reserved[0]
	for _, t := range reserved[1:] {
		if places[t] > places[to] {
			to = t
		}
	}
	return to
}

// MayBind reports whether member m, placed, may be allowed to bind: min
// members are placed, and under OneCluster m is placed in the gang's
// target.
func (v Verdict) MayBind(m Member) bool {
	return v.Allow && m.Placed != "" && (v.Target == "" || m.Placed == v.Target)
}
