package summary

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// Bounds of a summary a source believes. They are far above any real
// cluster and keep a broken or hostile peer from making a source spend
// memory or CPU on its summary, or plan for capacity nobody has.
const (
	// MaxNodes is the most nodes a summary may count.
	MaxNodes = 1_000_000
	// MaxNamespaces is the most namespaces an invitation may cover.
	MaxNamespaces = 4096
	// MaxTopologyKeys is the most topology keys a summary reports.
	MaxTopologyKeys = 16
	// MaxTopologyValues is the most values of one topology key.
	MaxTopologyValues = 1024
	// MaxDomains is the most combinations of topology values a summary
	// lists.
	MaxDomains = 256
	// MaxCommonLabels is the most common labels a summary reports.
	MaxCommonLabels = 256
	// MaxResources is the most resources in one resource list.
	MaxResources = 32
	// maxErrors is how many problems Validate lists: a hostile summary can
	// have thousands, and the error lands in logs and conditions.
	maxErrors = 20
	// maxMessage bounds the length of Validate's error.
	maxMessage = 8000
	// maxInvitationLength fits "<namespace>/<name>".
	maxInvitationLength = validation.DNS1123LabelMaxLength + 1 + validation.DNS1123SubdomainMaxLength
)

var (
	// maxCPU is a billion cores.
	maxCPU = resource.MustParse("1G")
	// maxPods is a billion pods.
	maxPods = resource.MustParse("1G")
	// maxOther bounds memory and any resource a newer target may add
	// (ephemeral-storage, extended resources): one exbibyte.
	maxOther = resource.MustParse("1Ei")
)

// Validate checks a summary a peer wrote before a source believes it: every
// quantity is non-negative and below an absurd bound, free is at most
// allocatable and the largest free node at most the total, topology counts
// and totals fit within the cluster's, lists are bounded, and names are
// valid (namespaces are DNS labels, label keys and values are valid). The
// error lists every problem, each naming its field.
func Validate(s *v1alpha1.ClusterSummaryStatus) error {
	if s == nil {
		return errors.New("status: missing")
	}
	root := field.NewPath("status")
	var errs field.ErrorList

	if len(s.Invitation) > maxInvitationLength {
		errs = append(errs, field.TooLong(root.Child("invitation"), "", maxInvitationLength))
	}
	errs = append(errs, validateNamespaces(root.Child("namespaces"), s.Namespaces)...)

	if s.Nodes < 0 || s.Nodes > MaxNodes {
		errs = append(errs, field.Invalid(root.Child("nodes"), s.Nodes, fmt.Sprintf("must be between 0 and %d", MaxNodes)))
	}
	allocatable, free, largest := root.Child("allocatable"), root.Child("free"), root.Child("largestFree")
	errs = append(errs, validateResources(allocatable, s.Allocatable)...)
	errs = append(errs, validateResources(free, s.Free)...)
	errs = append(errs, validateResources(largest, s.LargestFree)...)
	errs = append(errs, validateResources(root.Child("quota"), s.Quota)...)
	errs = append(errs, notAbove(free, s.Free, allocatable, s.Allocatable)...)
	errs = append(errs, notAbove(largest, s.LargestFree, free, s.Free)...)

	errs = append(errs, validateLabels(root.Child("commonLabels"), s.CommonLabels)...)
	errs = append(errs, validateTopology(root.Child("topology"), s)...)
	errs = append(errs, validateDomains(root.Child("domains"), s)...)
	if len(errs) > maxErrors {
		return fmt.Errorf("%w, and %d more", cut(errs[:maxErrors].ToAggregate()), len(errs)-maxErrors)
	}
	return cut(errs.ToAggregate())
}

// cut bounds an error's message: a peer's names can be long, and the error
// lands in a status condition (at most 32768 characters) and in logs.
func cut(err error) error {
	if err == nil || len(err.Error()) <= maxMessage {
		return err
	}
	return fmt.Errorf("%s... (cut at %d bytes)", strings.ToValidUTF8(err.Error()[:maxMessage], ""), maxMessage)
}

func validateNamespaces(path *field.Path, namespaces []string) field.ErrorList {
	if len(namespaces) > MaxNamespaces {
		return field.ErrorList{field.TooMany(path, len(namespaces), MaxNamespaces)}
	}
	var errs field.ErrorList
	seen := sets.New[string]()
	for i, ns := range namespaces {
		for _, msg := range validation.IsDNS1123Label(ns) {
			errs = append(errs, field.Invalid(path.Index(i), ns, msg))
		}
		if seen.Has(ns) {
			errs = append(errs, field.Duplicate(path.Index(i), ns))
		}
		seen.Insert(ns)
	}
	return errs
}

func limitOf(name corev1.ResourceName) resource.Quantity {
	switch name {
	case corev1.ResourceCPU:
		return maxCPU
	case corev1.ResourcePods:
		return maxPods
	default:
		return maxOther
	}
}

func validateResources(path *field.Path, list corev1.ResourceList) field.ErrorList {
	if len(list) > MaxResources {
		return field.ErrorList{field.TooMany(path, len(list), MaxResources)}
	}
	var errs field.ErrorList
	for _, name := range sortedResourceNames(list) {
		p := path.Key(string(name))
		for _, msg := range validation.IsQualifiedName(string(name)) {
			errs = append(errs, field.Invalid(p, name, msg))
		}
		q := list[name]
		limit := limitOf(name)
		if vast(q) {
			errs = append(errs, field.Invalid(p, "<exponent beyond 18>", "must not be more than "+limit.String()))
			continue
		}
		if q.Sign() < 0 {
			errs = append(errs, field.Invalid(p, shown(q), "must not be negative"))
		}
		if q.Cmp(limit) > 0 {
			errs = append(errs, field.Invalid(p, shown(q), "must not be more than "+limit.String()))
		}
	}
	return errs
}

// notAbove checks that no resource of part is more than the same resource
// of whole (a resource whole lacks is zero there).
func notAbove(partPath *field.Path, part corev1.ResourceList, wholePath *field.Path, whole corev1.ResourceList) field.ErrorList {
	if len(part) > MaxResources {
		return nil // reported by validateResources
	}
	var errs field.ErrorList
	for _, name := range sortedResourceNames(part) {
		q, w := part[name], whole[name]
		if vast(q) || vast(w) {
			continue // reported by validateResources
		}
		if q.Cmp(w) > 0 {
			errs = append(errs, field.Invalid(partPath.Key(string(name)), shown(q),
				fmt.Sprintf("must not be more than %s (%s)", wholePath.Key(string(name)), shown(w))))
		}
	}
	return errs
}

func validateLabels(path *field.Path, labels map[string]string) field.ErrorList {
	if len(labels) > MaxCommonLabels {
		return field.ErrorList{field.TooMany(path, len(labels), MaxCommonLabels)}
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var errs field.ErrorList
	for _, k := range keys {
		p := path.Key(k)
		for _, msg := range validation.IsQualifiedName(k) {
			errs = append(errs, field.Invalid(p, k, msg))
		}
		for _, msg := range validation.IsValidLabelValue(labels[k]) {
			errs = append(errs, field.Invalid(p, labels[k], msg))
		}
	}
	return errs
}

func validateTopology(path *field.Path, s *v1alpha1.ClusterSummaryStatus) field.ErrorList {
	if len(s.Topology) > MaxTopologyKeys {
		return field.ErrorList{field.TooMany(path, len(s.Topology), MaxTopologyKeys)}
	}
	var errs field.ErrorList
	keys := sets.New[string]()
	for i, t := range s.Topology {
		p := path.Index(i)
		for _, msg := range validation.IsQualifiedName(t.Key) {
			errs = append(errs, field.Invalid(p.Child("key"), t.Key, msg))
		}
		if keys.Has(t.Key) {
			errs = append(errs, field.Duplicate(p.Child("key"), t.Key))
		}
		keys.Insert(t.Key)

		valuesPath := p.Child("values")
		if len(t.Values) > MaxTopologyValues {
			errs = append(errs, field.TooMany(valuesPath, len(t.Values), MaxTopologyValues))
			continue
		}
		values := sets.New[string]()
		parts := newParts(s)
		for j, v := range t.Values {
			vp := valuesPath.Index(j)
			for _, msg := range validation.IsValidLabelValue(v.Value) {
				errs = append(errs, field.Invalid(vp.Child("value"), v.Value, msg))
			}
			if values.Has(v.Value) {
				errs = append(errs, field.Duplicate(vp.Child("value"), v.Value))
			}
			values.Insert(v.Value)
			errs = append(errs, parts.add(vp, v.Nodes, v.Free)...)
		}
		errs = append(errs, parts.within(valuesPath)...)
	}
	return errs
}

func validateDomains(path *field.Path, s *v1alpha1.ClusterSummaryStatus) field.ErrorList {
	if len(s.Domains) > MaxDomains {
		return field.ErrorList{field.TooMany(path, len(s.Domains), MaxDomains)}
	}
	var errs field.ErrorList
	seen := sets.New[string]()
	parts := newParts(s)
	for i, d := range s.Domains {
		p := path.Index(i)
		if len(d.Values) > MaxTopologyKeys {
			errs = append(errs, field.TooMany(p.Child("values"), len(d.Values), MaxTopologyKeys))
			continue
		}
		errs = append(errs, validateLabels(p.Child("values"), d.Values)...)
		id := labels.Set(d.Values).String()
		if seen.Has(id) {
			errs = append(errs, field.Duplicate(p.Child("values"), id))
		}
		seen.Insert(id)
		errs = append(errs, parts.add(p, d.Nodes, d.Free)...)
	}
	return append(errs, parts.within(path)...)
}

// parts adds up the nodes and free resources of a summary's parts (the
// values of a topology key, the domains), which may not add up to more
// than the summary's own.
type parts struct {
	s     *v1alpha1.ClusterSummaryStatus
	nodes int64
	free  corev1.ResourceList
}

func newParts(s *v1alpha1.ClusterSummaryStatus) *parts {
	return &parts{s: s, free: corev1.ResourceList{}}
}

// add checks one part (at path) and adds it up.
func (t *parts) add(path *field.Path, nodes int32, free corev1.ResourceList) field.ErrorList {
	var errs field.ErrorList
	if nodes < 0 || nodes > t.s.Nodes {
		errs = append(errs, field.Invalid(path.Child("nodes"), nodes, fmt.Sprintf("must be between 0 and status.nodes (%d)", t.s.Nodes)))
	}
	t.nodes += int64(nodes)
	if freeErrs := validateResources(path.Child("free"), free); len(freeErrs) > 0 {
		return append(errs, freeErrs...)
	}
	for _, name := range sortedResourceNames(free) {
		q := free[name]
		if _, ok := t.s.Free[name]; !ok {
			if q.Sign() > 0 {
				errs = append(errs, field.Invalid(path.Child("free").Key(string(name)), shown(q), "must be zero: status.free has no "+string(name)))
			}
			continue
		}
		sum := t.free[name]
		sum.Add(q)
		t.free[name] = sum
	}
	return errs
}

// within refuses parts (at path) that add up to more nodes or free
// resources than the summary has.
func (t *parts) within(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if t.nodes > int64(t.s.Nodes) {
		errs = append(errs, field.Invalid(path, t.nodes, fmt.Sprintf("nodes add up to more than status.nodes (%d)", t.s.Nodes)))
	}
	for _, name := range sortedResourceNames(t.free) {
		q, w := t.free[name], t.s.Free[name]
		if vast(w) {
			continue // reported by validateResources
		}
		if q.Cmp(w) > 0 {
			errs = append(errs, field.Invalid(path, shown(q),
				fmt.Sprintf("free %s adds up to more than status.free[%s] (%s)", name, name, shown(w))))
		}
	}
	return errs
}

// vast reports whether q's decimal exponent is beyond 18, which puts any
// value above every bound. A peer writes "1e999999999" in a few bytes and
// it parses at once, but comparing or printing it would build a number of
// a billion digits: such a quantity is refused on its exponent alone,
// before any arithmetic.
func vast(q resource.Quantity) bool {
	c := q.DeepCopy() // AsDec converts in place
	return c.AsDec().Scale() < -18
}

// shown is q for an error message, cut short: a peer's quantity may have
// thousands of digits, and the error lands in a status condition.
func shown(q resource.Quantity) string {
	const maxShown = 40
	s := q.String()
	if len(s) > maxShown {
		s = s[:maxShown] + "..."
	}
	return s
}

func sortedResourceNames(list corev1.ResourceList) []corev1.ResourceName {
	names := make([]corev1.ResourceName, 0, len(list))
	for name := range list {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool { return names[i] < names[j] })
	return names
}
