package candidate

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// TestPin: a key whose constraint filters (DoNotSchedule) pins the
// candidate with a required node affinity, added to every term the pod
// requires; a key whose constraint only scores (ScheduleAnyway) with a
// preferred one, so that a domain without room does not hold the
// candidate there; an empty value pins nothing.
func TestPin(t *testing.T) {
	keys := []string{"region", "zone"}
	own := corev1.NodeSelectorRequirement{Key: "capacity", Operator: corev1.NodeSelectorOpIn, Values: []string{"spot"}}
	region := corev1.NodeSelectorRequirement{Key: "region", Operator: corev1.NodeSelectorOpIn, Values: []string{"eu"}}
	zone := corev1.NodeSelectorRequirement{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"eu-1"}}
	for _, tc := range []struct {
		name          string
		values        []string
		hard          []bool
		wantRequired  [][]corev1.NodeSelectorRequirement
		wantPreferred []corev1.NodeSelectorRequirement
	}{
		{name: "DoNotSchedule on both", values: []string{"eu", "eu-1"}, hard: []bool{true, true},
			wantRequired: [][]corev1.NodeSelectorRequirement{{own, region, zone}}},
		{name: "ScheduleAnyway on both", values: []string{"eu", "eu-1"}, hard: []bool{false, false},
			wantRequired: [][]corev1.NodeSelectorRequirement{{own}}, wantPreferred: []corev1.NodeSelectorRequirement{region, zone}},
		{name: "region DoNotSchedule, zone ScheduleAnyway", values: []string{"eu", "eu-1"}, hard: []bool{true, false},
			wantRequired: [][]corev1.NodeSelectorRequirement{{own, region}}, wantPreferred: []corev1.NodeSelectorRequirement{zone}},
		{name: "an empty value pins nothing", values: []string{"", "eu-1"}, hard: []bool{true, true},
			wantRequired: [][]corev1.NodeSelectorRequirement{{own, zone}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &corev1.Pod{Spec: corev1.PodSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{own}}}},
			}}}}
			Pin(c, keys, tc.values, tc.hard)
			na := c.Spec.Affinity.NodeAffinity
			var required [][]corev1.NodeSelectorRequirement
			for _, term := range na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
				required = append(required, term.MatchExpressions)
			}
			if !equality.Semantic.DeepEqual(required, tc.wantRequired) {
				t.Errorf("required %v, want %v", required, tc.wantRequired)
			}
			var preferred []corev1.NodeSelectorRequirement
			for _, term := range na.PreferredDuringSchedulingIgnoredDuringExecution {
				if term.Weight != pinWeight {
					t.Errorf("preferred term of weight %d, want %d", term.Weight, pinWeight)
				}
				preferred = append(preferred, term.Preference.MatchExpressions...)
			}
			if !equality.Semantic.DeepEqual(preferred, tc.wantPreferred) {
				t.Errorf("preferred %v, want %v", preferred, tc.wantPreferred)
			}
			if got := PinnedDomain(c); !equality.Semantic.DeepEqual(got, tc.values) {
				t.Errorf("pinned domain %v, want %v", got, tc.values)
			}
		})
	}
}
