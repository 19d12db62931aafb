package cli

import (
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// parsePairs reads "k=v,k2=v2" (the form of --labels, --quota and
// --namespace-mapping); a key given twice is a mistake.
func parsePairs(flag, s string) ([][2]string, error) {
	var out [][2]string
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" {
			return nil, usageErrorf("--%s: %q is not key=value", flag, part)
		}
		if seen[k] {
			return nil, usageErrorf("--%s: %q is given twice", flag, k)
		}
		seen[k] = true
		out = append(out, [2]string{k, v})
	}
	return out, nil
}

// parseLabels reads --labels: the virtual node's labels.
func parseLabels(s string) (map[string]v1alpha1.LabelValue, error) {
	pairs, err := parsePairs("labels", s)
	if err != nil {
		return nil, err
	}
	out := map[string]v1alpha1.LabelValue{}
	for _, p := range pairs {
		if errs := validation.IsQualifiedName(p[0]); len(errs) > 0 {
			return nil, usageErrorf("--labels: key %q: %s", p[0], strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(p[1]); len(errs) > 0 {
			return nil, usageErrorf("--labels: value %q of %s: %s", p[1], p[0], strings.Join(errs, "; "))
		}
		out[p[0]] = v1alpha1.LabelValue(p[1])
	}
	return out, nil
}

// parseMapping reads --namespace-mapping: source=target namespaces.
func parseMapping(s string) ([]v1alpha1.NamespaceMapping, error) {
	pairs, err := parsePairs("namespace-mapping", s)
	if err != nil {
		return nil, err
	}
	var out []v1alpha1.NamespaceMapping
	for _, p := range pairs {
		for _, ns := range p {
			if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
				return nil, usageErrorf("--namespace-mapping: %q is not a namespace name: %s", ns, strings.Join(errs, "; "))
			}
		}
		out = append(out, v1alpha1.NamespaceMapping{Source: p[0], Target: p[1]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Source < out[j].Source })
	return out, nil
}

// parseQuota reads --quota: cpu, memory and pods.
func parseQuota(s string) (*v1alpha1.SourceQuota, error) {
	pairs, err := parsePairs("quota", s)
	if err != nil || len(pairs) == 0 {
		return nil, err
	}
	q := &v1alpha1.SourceQuota{}
	for _, p := range pairs {
		switch p[0] {
		case "cpu", "memory":
			v, err := resource.ParseQuantity(p[1])
			if err != nil || v.Sign() < 0 {
				return nil, usageErrorf("--quota: %s=%q is not a quantity of at least 0 (e.g. cpu=8, memory=32Gi)", p[0], p[1])
			}
			if p[0] == "cpu" {
				q.CPU = &v
			} else {
				q.Memory = &v
			}
		case "pods":
			n, err := strconv.ParseInt(p[1], 10, 32)
			if err != nil || n < 0 {
				return nil, usageErrorf("--quota: pods=%q is not a whole number of at least 0", p[1])
			}
			pods := int32(n)
			q.Pods = &pods
		default:
			return nil, usageErrorf("--quota: unknown resource %q: use cpu, memory and pods", p[0])
		}
	}
	return q, nil
}

// parseServiceAccount reads --service-account NAMESPACE/NAME.
func parseServiceAccount(s string) (*v1alpha1.ServiceAccountRef, error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return nil, usageErrorf("--service-account: want NAMESPACE/NAME, got %q", s)
	}
	return &v1alpha1.ServiceAccountRef{Namespace: ns, Name: name}, nil
}

// splitList reads a comma-separated list, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
