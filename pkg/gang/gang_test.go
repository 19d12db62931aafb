package gang

import (
	"errors"
	"maps"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

func TestOf(t *testing.T) {
	pod := func(labels, annotations map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations}}
	}
	group := map[string]string{protocol.PodGroupLabel: "train"}
	for _, tc := range []struct {
		name       string
		pod        *corev1.Pod
		want       Spec
		ok         bool
		wantErrHas string
	}{
		{"no label: no gang", pod(nil, map[string]string{protocol.GangMinMemberAnnotation: "4"}), Spec{}, false, ""},
		{"label and size", pod(group, map[string]string{protocol.GangMinMemberAnnotation: "4"}), Spec{Name: "train", Source: FromPodGroup, MinMember: 4, Mode: OneCluster}, true, ""},
		{"any clusters", pod(group, map[string]string{protocol.GangMinMemberAnnotation: "2", protocol.GangModeAnnotation: "anyClusters"}), Spec{Name: "train", Source: FromPodGroup, MinMember: 2, Mode: AnyClusters}, true, ""},
		{"no size", pod(group, nil), Spec{}, true, protocol.GangMinMemberAnnotation + " is missing, and no PodGroup train"},
		{"size not a number", pod(group, map[string]string{protocol.GangMinMemberAnnotation: "four"}), Spec{}, true, `"four"`},
		{"size zero", pod(group, map[string]string{protocol.GangMinMemberAnnotation: "0"}), Spec{}, true, `"0"`},
		{"size too large", pod(group, map[string]string{protocol.GangMinMemberAnnotation: "10001"}), Spec{}, true, `"10001"`},
		{"unknown mode", pod(group, map[string]string{protocol.GangMinMemberAnnotation: "2", protocol.GangModeAnnotation: "sameRack"}), Spec{}, true, `"sameRack"`},
		{"a scheduling group", inSchedulingGroup(pod(nil, nil), "workers"),
			Spec{Name: "workers", Source: FromSchedulingGroup, Mode: OneCluster}, true, "no PodGroup workers (scheduling.k8s.io) gives a gang policy's minCount"},
		{"a scheduling group, sized", inSchedulingGroup(pod(nil, map[string]string{protocol.GangMinMemberAnnotation: "3"}), "workers"),
			Spec{Name: "workers", Source: FromSchedulingGroup, MinMember: 3, Mode: OneCluster}, true, ""},
		{"an empty scheduling group: none", func() *corev1.Pod {
			p := pod(nil, map[string]string{protocol.GangMinMemberAnnotation: "3"})
			p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{}
			return p
		}(), Spec{}, false, ""},
		{"the label before the scheduling group", inSchedulingGroup(pod(group, map[string]string{protocol.GangMinMemberAnnotation: "2"}), "workers"),
			Spec{Name: "train", Source: FromPodGroup, MinMember: 2, Mode: OneCluster}, true, ""},
		{"its Job, asked", ofJob(pod(nil, map[string]string{protocol.GangAnnotation: "job", protocol.GangModeAnnotation: "anyClusters"})),
			Spec{Name: "train", Source: FromJob, Mode: AnyClusters}, true, "no Job train gives its parallelism"},
		{"its Job, asked, sized", ofJob(pod(nil, map[string]string{protocol.GangAnnotation: "job", protocol.GangMinMemberAnnotation: "4"})),
			Spec{Name: "train", Source: FromJob, MinMember: 4, Mode: OneCluster}, true, ""},
		{"a Job asked of a pod no Job controls", pod(nil, map[string]string{protocol.GangAnnotation: "job"}), Spec{}, true, "no Job controls the pod"},
		{"its JobSet, asked", pod(map[string]string{protocol.JobSetNameLabel: "mpi"}, map[string]string{protocol.GangAnnotation: "jobset", protocol.GangMinMemberAnnotation: "9"}),
			Spec{Name: "mpi", Source: FromJobSet, MinMember: 9, Mode: OneCluster}, true, ""},
		{"a JobSet asked of a pod of none", ofJob(pod(nil, map[string]string{protocol.GangAnnotation: "jobset"})), Spec{}, true, "no JobSet's"},
		{"an owner of an unknown kind", ofJob(pod(nil, map[string]string{protocol.GangAnnotation: "deployment"})), Spec{}, true, `"deployment": want job or jobset`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, err := Of(tc.pod)
			if ok != tc.ok {
				t.Fatalf("ok = %v, want %v", ok, tc.ok)
			}
			if tc.wantErrHas != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErrHas) {
					t.Fatalf("err = %v, want one naming %s", err, tc.wantErrHas)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Of = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func inSchedulingGroup(p *corev1.Pod, group string) *corev1.Pod {
	p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: &group}
	return p
}

func ofJob(p *corev1.Pod) *corev1.Pod {
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "train", UID: "job-uid", Controller: ptr.To(true)}}
	return p
}

func TestKeys(t *testing.T) {
	for _, s := range []Spec{
		{Name: "train", Source: FromPodGroup},
		{Name: "workers", Source: FromSchedulingGroup},
		{Name: "train", Source: FromJob},
		{Name: "mpi", Source: FromJobSet},
	} {
		if got := NameOfKey(s.Key("shop")); got != s.String() {
			t.Errorf("%s: key %q named %q", s, s.Key("shop"), got)
		}
	}
	if a, b := (Spec{Name: "train", Source: FromPodGroup}).Key("shop"), (Spec{Name: "train", Source: FromJob}).Key("shop"); a == b {
		t.Errorf("a pod group and a Job of one name share key %q", a)
	}
}

func TestDecide(t *testing.T) {
	one := Spec{Name: "g", MinMember: 3, Mode: OneCluster}
	anyc := Spec{Name: "g", MinMember: 3, Mode: AnyClusters}
	for _, tc := range []struct {
		name     string
		spec     Spec
		members  []Member
		complete bool
		assign   map[string]string
		allow    bool
		keep     map[string]string
	}{
		{
			name: "one cluster: too few reservations anywhere elects nobody",
			spec: one,
			members: []Member{
				{Name: "a", Reserved: []string{"t1"}},
				{Name: "b", Reserved: []string{"t1", "t2"}},
				{Name: "c", Reserved: []string{"t2"}},
			},
		},
		{
			name: "one cluster: the target that holds min members gets them all (a tie: the first seen)",
			spec: one,
			members: []Member{
				{Name: "a", Reserved: []string{"t1", "t2"}},
				{Name: "b", Reserved: []string{"t2"}},
				{Name: "c", Reserved: []string{"t1", "t2"}},
				{Name: "d", Reserved: []string{"t1"}},
			},
			complete: true,
			assign:   map[string]string{"a": "t1", "c": "t1", "d": "t1"},
		},
		{
			name: "one cluster: placed members count where they are placed",
			spec: one,
			members: []Member{
				{Name: "a", Placed: "t1"},
				{Name: "b", Placed: "t1"},
				{Name: "c", Reserved: []string{"t2", "t1"}},
			},
			complete: true,
			assign:   map[string]string{"c": "t1"},
		},
		{
			name: "one cluster: min placed in one target allows",
			spec: one,
			members: []Member{
				{Name: "a", Placed: "t1"},
				{Name: "b", Placed: "t1"},
				{Name: "c", Placed: "t1"},
				{Name: "d", Reserved: []string{"t1"}},
			},
			complete: true,
			assign:   map[string]string{"d": "t1"},
			allow:    true,
		},
		{
			name: "one cluster: placed in two targets is not a gang in one",
			spec: one,
			members: []Member{
				{Name: "a", Placed: "t1"},
				{Name: "b", Placed: "t1"},
				{Name: "c", Placed: "t2"},
			},
		},
		{
			name: "one cluster: a bound member holds the gang to its target",
			spec: one,
			members: []Member{
				{Name: "a", Placed: "t1", Bound: true},
				{Name: "b", Reserved: []string{"t2"}},
				{Name: "c", Reserved: []string{"t2"}},
				{Name: "d", Reserved: []string{"t2"}},
			},
		},
		{
			name: "any clusters: a reservation anywhere counts",
			spec: anyc,
			members: []Member{
				{Name: "a", Reserved: []string{"t1"}},
				{Name: "b", Reserved: []string{"t2"}},
				{Name: "c", Reserved: []string{"t3"}},
			},
			complete: true,
			assign:   map[string]string{"a": "t1", "b": "t2", "c": "t3"},
		},
		{
			name: "any clusters: members go where the gang already is",
			spec: anyc,
			members: []Member{
				{Name: "a", Placed: "t2"},
				{Name: "b", Reserved: []string{"t1", "t2"}},
				{Name: "c", Reserved: []string{"t1"}},
			},
			complete: true,
			assign:   map[string]string{"b": "t2", "c": "t1"},
		},
		{
			name: "any clusters: one short elects nobody; b keeps the place beside a",
			spec: anyc,
			members: []Member{
				{Name: "a", Placed: "t2"},
				{Name: "b", Reserved: []string{"t1", "t2"}},
				{Name: "c"},
			},
			keep: map[string]string{"b": "t2"},
		},
		{
			name: "any clusters: short because members hold two places each; each keeps one",
			spec: Spec{Name: "g", MinMember: 4, Mode: AnyClusters},
			members: []Member{
				{Name: "a", Reserved: []string{"t1", "t2"}},
				{Name: "b", Reserved: []string{"t1", "t2"}},
				{Name: "c", Placed: "t2"},
				{Name: "d"},
			},
			keep: map[string]string{"a": "t2", "b": "t2"},
		},
		{
			name: "any clusters: a member holding one place keeps it, so its candidates elsewhere are denied",
			spec: Spec{Name: "g", MinMember: 4, Mode: AnyClusters},
			members: []Member{
				{Name: "a", Reserved: []string{"t1"}},
				{Name: "b", Reserved: []string{"t2", "t1"}},
				{Name: "c"},
			},
			keep: map[string]string{"a": "t1", "b": "t2"},
		},
		{
			name: "any clusters: min placed anywhere allows",
			spec: anyc,
			members: []Member{
				{Name: "a", Placed: "t2"},
				{Name: "b", Placed: "t1"},
				{Name: "c", Placed: "t3"},
			},
			complete: true,
			assign:   map[string]string{},
			allow:    true,
		},
		{
			name: "one cluster, placed once: a straggler is elected again where it stood elected, and allowed",
			spec: one,
			members: []Member{
				{Name: "a", Placed: "t1", Bound: true, Elected: "t1"},
				{Name: "b", Elected: "t1", Reserved: []string{"t2", "t1"}},
				{Name: "c", Elected: "t1"},
			},
			complete: true,
			assign:   map[string]string{"b": "t1"},
			allow:    true,
		},
		{
			name: "one cluster, placed once: a straggler reserved only elsewhere waits",
			spec: one,
			members: []Member{
				{Name: "a", Placed: "t1", Bound: true, Elected: "t1"},
				{Name: "b", Elected: "t1", Reserved: []string{"t2"}},
				{Name: "c", Placed: "t1", Elected: "t1"},
			},
			complete: true,
			allow:    true,
		},
		{
			name: "one cluster, placed once: a member elected in another target is not elected there again",
			spec: one,
			members: []Member{
				{Name: "a", Placed: "t1", Bound: true, Elected: "t1"},
				{Name: "b", Elected: "t1", Placed: "t1"},
				{Name: "c", Elected: "t1", Reserved: []string{"t1"}},
				{Name: "d", Elected: "t2", Reserved: []string{"t2"}},
			},
			complete: true,
			assign:   map[string]string{"c": "t1"},
			allow:    true,
		},
		{
			name: "elections without a bound member: the gang is placed again as a whole",
			spec: one,
			members: []Member{
				{Name: "a", Elected: "t1"},
				{Name: "b", Elected: "t1", Reserved: []string{"t1"}},
				{Name: "c", Elected: "t1", Reserved: []string{"t1"}},
			},
		},
		{
			name: "a replacement has no election: it joins as a gang, complete but not allowed",
			spec: one,
			members: []Member{
				{Name: "a", Placed: "t1", Bound: true, Elected: "t1"},
				{Name: "b", Reserved: []string{"t1"}},
				{Name: "c", Elected: "t1", Reserved: []string{"t1"}},
			},
			complete: true,
			assign:   map[string]string{"b": "t1", "c": "t1"},
		},
		{
			name: "one cluster: elections in another target than the bound member's do not count",
			spec: one,
			members: []Member{
				{Name: "a", Placed: "t1", Bound: true, Elected: "t1"},
				{Name: "b", Elected: "t2", Reserved: []string{"t2"}},
				{Name: "c", Elected: "t2", Placed: "t2"},
			},
		},
		{
			name: "any clusters, placed once: a straggler goes where the gang is when its target holds it no more",
			spec: anyc,
			members: []Member{
				{Name: "a", Placed: "t1", Bound: true, Elected: "t1"},
				{Name: "b", Elected: "t2", Reserved: []string{"t3", "t1"}},
				{Name: "c", Placed: "t2", Elected: "t2"},
			},
			complete: true,
			assign:   map[string]string{"b": "t1"},
			allow:    true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Decide(tc.spec, tc.members)
			if v.Complete != tc.complete || v.Allow != tc.allow {
				t.Fatalf("complete %v allow %v, want %v %v (missing: %s)", v.Complete, v.Allow, tc.complete, tc.allow, v.Missing)
			}
			want := tc.assign
			if want == nil {
				want = map[string]string{}
			}
			if !maps.Equal(v.Assign, want) {
				t.Fatalf("assign %v, want %v", v.Assign, want)
			}
			if len(v.Keep) > 0 || len(tc.keep) > 0 {
				if !maps.Equal(v.Keep, tc.keep) {
					t.Fatalf("keep %v, want %v", v.Keep, tc.keep)
				}
			}
			if !v.Complete && v.Missing == "" {
				t.Fatal("an incomplete gang says nothing about what it lacks")
			}
		})
	}
}

// Held is what the gang's turn measures its progress by.
func TestDecideCountsHeld(t *testing.T) {
	members := []Member{
		{Name: "a", Placed: "t1"},
		{Name: "b", Reserved: []string{"t1", "t2"}},
		{Name: "c", Reserved: []string{"t2"}},
		{Name: "d", Placed: "t2"},
		{Name: "e"},
	}
	if v := Decide(Spec{Name: "g", MinMember: 5, Mode: OneCluster}, members); v.Held != 3 || v.Target != "t2" {
		t.Errorf("oneCluster: held %d in %q, want 3 in t2", v.Held, v.Target)
	}
	if v := Decide(Spec{Name: "g", MinMember: 5, Mode: AnyClusters}, members); v.Held != 4 {
		t.Errorf("anyClusters: held %d, want 4", v.Held)
	}
}

func TestOfWithoutSizeWrapsErrNoMinMember(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{protocol.PodGroupLabel: "train"},
		Annotations: map[string]string{protocol.GangModeAnnotation: "anyClusters"}}}
	s, ok, err := Of(pod)
	if !ok || !errors.Is(err, ErrNoMinMember) || s.Name != "train" || s.Mode != AnyClusters {
		t.Fatalf("Of = %+v, %v, %v; want the gang read but its size, ErrNoMinMember", s, ok, err)
	}
	// A bad mode is an error of its own, not a missing size.
	pod.Annotations[protocol.GangModeAnnotation] = "sameRack"
	if _, _, err := Of(pod); err == nil || errors.Is(err, ErrNoMinMember) {
		t.Fatalf("bad mode: %v", err)
	}
}

func TestMinMemberOf(t *testing.T) {
	for _, tc := range []struct {
		spec map[string]any
		want int
		ok   bool
	}{
		{map[string]any{"minMember": int64(4)}, 4, true},
		{map[string]any{"minMember": int64(0)}, 0, false},
		{map[string]any{"minMember": "4"}, 0, false},
		{map[string]any{}, 0, false},
		{map[string]any{"minMember": int64(MaxMinMember + 1)}, 0, false},
	} {
		pg := &unstructured.Unstructured{Object: map[string]any{"spec": tc.spec}}
		if n, ok := MinMemberOf(pg); n != tc.want || ok != tc.ok {
			t.Errorf("MinMemberOf(%v) = %d, %v; want %d, %v", tc.spec, n, ok, tc.want, tc.ok)
		}
	}
}

// TestDecideKeeping: under OneCluster a target a round already chose for
// the gang is kept while it holds places for MinMember, even where another
// target holds as many (a tie Decide breaks by order) or more; once it
// holds fewer, the gang goes where the most places are.
func TestDecideKeeping(t *testing.T) {
	spec := Spec{Name: "g", MinMember: 2, Mode: OneCluster}
	both := []Member{{Name: "a", Reserved: []string{"t1", "t2"}}, {Name: "b", Reserved: []string{"t1", "t2"}}}
	if v := Decide(spec, both); v.Target != "t1" {
		t.Fatalf("tie without a kept target: %q, want t1 (by order)", v.Target)
	}
	if v := DecideKeeping(spec, both, "t2"); v.Target != "t2" || !v.Complete || v.Assign["a"] != "t2" || v.Assign["b"] != "t2" {
		t.Errorf("tie keeping t2: %+v, want the gang complete in t2", v)
	}
	more := append(both, Member{Name: "c", Reserved: []string{"t1"}})
	if v := DecideKeeping(spec, more, "t2"); v.Target != "t2" {
		t.Errorf("t2 kept, complete, t1 holding more: %q, want t2", v.Target)
	}
	short := []Member{{Name: "a", Reserved: []string{"t1", "t2"}}, {Name: "b", Reserved: []string{"t1"}}}
	if v := DecideKeeping(spec, short, "t2"); v.Target != "t1" || !v.Complete {
		t.Errorf("t2 kept but holding one place of two: %+v, want t1", v)
	}
	if v := DecideKeeping(Spec{Name: "g", MinMember: 2, Mode: AnyClusters}, both, "t2"); !v.Complete {
		t.Errorf("anyClusters with a kept target: %+v, want complete", v)
	}
}
