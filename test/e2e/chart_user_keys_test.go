package e2e

import (
	"regexp"
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// TestChartLetsAuthorsWriteTheirKeys: the keys of Flotilla's prefix that
// the chart's admission policy lets a pod's author write are exactly
// protocol.UserKeys, the ones the webhook keeps. A key in one list only is
// either stripped from every pod by the webhook (a gang's size, say,
// silently dropped) or refused by the policy.
func TestChartLetsAuthorsWriteTheirKeys(t *testing.T) {
	t.Parallel()
	for _, doc := range chartDocs(t) {
		var vap admissionregistrationv1.ValidatingAdmissionPolicy
		if yaml.Unmarshal(doc, &vap) != nil || vap.Kind != "ValidatingAdmissionPolicy" {
			continue
		}
		for _, v := range vap.Spec.Variables {
			if v.Name != "userKeys" {
				continue
			}
			var keys []string
			for _, m := range regexp.MustCompile(`'([^']+)'`).FindAllStringSubmatch(v.Expression, -1) {
				keys = append(keys, m[1])
			}
			want := slices.Clone(protocol.UserKeys)
			slices.Sort(keys)
			slices.Sort(want)
			if !slices.Equal(keys, want) {
				t.Fatalf("the chart's policy lets authors write %v; the webhook keeps %v", keys, want)
			}
			return
		}
	}
	t.Fatal("the chart renders no ValidatingAdmissionPolicy with the pod authors' keys")
}
