package vnode

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kwokPodCIDRs are the test delegates' pod networks.
var kwokPodCIDRs = []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00::/64")}

var (
	t0  = metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	t1  = metav1.NewTime(t0.Add(time.Minute))
	now = t0.Add(time.Hour)
)

func sourcePod(mutate ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "src-uid"},
		Spec: corev1.PodSpec{
			NodeName:       "flotilla-tgt",
			InitContainers: []corev1.Container{{Name: "init", Image: "busybox"}},
			Containers:     []corev1.Container{{Name: "app", Image: "nginx"}},
		},
		Status: corev1.PodStatus{
			Phase:    corev1.PodPending,
			QOSClass: corev1.PodQOSBestEffort,
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: t0},
			},
		},
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

func runningDelegate(mutate ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-abc", Generation: 3},
		Status: corev1.PodStatus{
			Phase:     corev1.PodRunning,
			QOSClass:  corev1.PodQOSBurstable,
			HostIP:    "10.0.0.7",
			HostIPs:   []corev1.HostIP{{IP: "10.0.0.7"}},
			PodIP:     "10.244.1.9",
			PodIPs:    []corev1.PodIP{{IP: "10.244.1.9"}},
			StartTime: &t0,
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: t1},
				{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: t1},
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: t1, ObservedGeneration: 3},
				{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: t1},
			},
			InitContainerStatuses: []corev1.ContainerStatus{{
				Name: "init", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}},
			}},
			ContainerStatuses: []corev1.ContainerStatus{{
				Name: "app", Ready: true, ContainerID: "containerd://1",
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t1}},
			}},
		},
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

// mirrored is the status a sourcePod() gets from a runningDelegate().
func mirrored(mutate ...func(*corev1.PodStatus)) corev1.PodStatus {
	s := corev1.PodStatus{
		Phase:     corev1.PodRunning,
		QOSClass:  corev1.PodQOSBestEffort,
		HostIP:    "10.0.0.7",
		HostIPs:   []corev1.HostIP{{IP: "10.0.0.7"}},
		PodIP:     "10.244.1.9",
		PodIPs:    []corev1.PodIP{{IP: "10.244.1.9"}},
		StartTime: &t0,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: t0},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: t1},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: t1},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: t1},
		},
		InitContainerStatuses: []corev1.ContainerStatus{{
			Name: "init", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}},
		}},
		ContainerStatuses: []corev1.ContainerStatus{{
			Name: "app", Ready: true, ContainerID: "containerd://1",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t1}},
		}},
	}
	for _, m := range mutate {
		m(&s)
	}
	return s
}

func TestDesiredStatus(t *testing.T) {
	notStarted := false
	// A lost delegate is a disruption, which a Job's podFailurePolicy can
	// tell from a failure of the pod's own.
	lostCondition := corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: ReasonDelegateLost,
		Message: "The delegate of this pod in target tgt no longer exists", LastTransitionTime: metav1.NewTime(now)}
	tests := []struct {
		name     string
		source   *corev1.Pod
		delegate *corev1.Pod
		want     corev1.PodStatus
	}{{
		name:     "running delegate is mirrored; QoS class and PodScheduled stay the source's",
		source:   sourcePod(),
		delegate: runningDelegate(),
		want:     mirrored(),
	}, {
		name:   "a delegate just created is Pending with nothing to mirror yet",
		source: sourcePod(),
		delegate: &corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
		}}},
		want: corev1.PodStatus{
			Phase:    corev1.PodPending,
			QOSClass: corev1.PodQOSBestEffort,
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: t0},
			},
		},
	}, {
		name:   "reason and message of a failed delegate are mirrored",
		source: sourcePod(),
		delegate: runningDelegate(func(d *corev1.Pod) {
			d.Status.Phase, d.Status.Reason, d.Status.Message = corev1.PodFailed, "Evicted", "The node was low on resource: memory."
		}),
		want: mirrored(func(s *corev1.PodStatus) {
			s.Phase, s.Reason, s.Message = corev1.PodFailed, "Evicted", "The node was low on resource: memory."
		}),
	}, {
		name:   "a malformed delegate is cleaned: bad IPs, unknown containers, duplicates, untyped conditions, odd phase",
		source: sourcePod(),
		delegate: runningDelegate(func(d *corev1.Pod) {
			d.Status.Phase = "Exploded"
			d.Status.HostIP, d.Status.HostIPs = "not-an-ip", nil
			d.Status.PodIP = "10.244.1.9"
			d.Status.PodIPs = []corev1.PodIP{{IP: "010.1.1.1"}, {IP: "10.244.1.9"}, {IP: "10.244.1.10"}, {IP: "fe80::1%eth0"}, {IP: "fd00::9"}}
			d.Status.Conditions = append(d.Status.Conditions, corev1.PodCondition{Status: corev1.ConditionTrue},
				corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse})
			d.Status.ContainerStatuses = append(d.Status.ContainerStatuses,
				corev1.ContainerStatus{Name: "sidecar-of-the-target"}, corev1.ContainerStatus{Name: "app"})
		}),
		want: mirrored(func(s *corev1.PodStatus) {
			s.Phase = corev1.PodUnknown
			s.HostIP, s.HostIPs = "", nil
			s.PodIPs = []corev1.PodIP{{IP: "10.244.1.9"}, {IP: "fd00::9"}}
		}),
	}, {
		name:   "the pod IP alone is used when the delegate has no pod IPs",
		source: sourcePod(),
		delegate: runningDelegate(func(d *corev1.Pod) {
			d.Status.PodIPs = nil
			d.Status.HostIPs = nil
		}),
		want: mirrored(),
	}, {
		name: "source-only conditions stay, stale kubelet conditions of the source go",
		source: sourcePod(func(p *corev1.Pod) {
			p.Status.Conditions = append(p.Status.Conditions,
				corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "EvictionByEvictionAPI", LastTransitionTime: t1},
				corev1.PodCondition{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionFalse, LastTransitionTime: t0})
		}),
		delegate: runningDelegate(),
		want: mirrored(func(s *corev1.PodStatus) {
			s.Conditions = append([]corev1.PodCondition{s.Conditions[0],
				{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "EvictionByEvictionAPI", LastTransitionTime: t1}},
				s.Conditions[1:]...)
		}),
	}, {
		name: "a readiness gate of the source that is not True keeps the pod not Ready",
		source: sourcePod(func(p *corev1.Pod) {
			p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "example.com/lb"}}
		}),
		delegate: runningDelegate(),
		want: mirrored(func(s *corev1.PodStatus) {
			s.Conditions[2] = corev1.PodCondition{
				Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: t1,
				Reason: ReasonReadinessGatesNotReady, Message: `the status of pod readiness gate(s) example.com/lb is not "True"`,
			}
		}),
	}, {
		name: "a readiness gate of the source that is True lets the pod be Ready",
		source: sourcePod(func(p *corev1.Pod) {
			p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "example.com/lb"}}
			p.Status.Conditions = append(p.Status.Conditions,
				corev1.PodCondition{Type: "example.com/lb", Status: corev1.ConditionTrue, LastTransitionTime: t1})
		}),
		delegate: runningDelegate(),
		want: mirrored(func(s *corev1.PodStatus) {
			s.Conditions = append([]corev1.PodCondition{s.Conditions[0],
				{Type: "example.com/lb", Status: corev1.ConditionTrue, LastTransitionTime: t1}},
				s.Conditions[1:]...)
		}),
	}, {
		name:   "a lost delegate fails the source pod; containers not seen to stop are ContainerStatusUnknown",
		source: sourcePod(func(p *corev1.Pod) { p.Status = mirrored() }),
		want: mirrored(func(s *corev1.PodStatus) {
			s.Phase = corev1.PodFailed
			s.Reason = ReasonDelegateLost
			s.Message = "The delegate of this pod in target tgt no longer exists"
			s.Conditions[2] = corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: reasonPodCompleted, LastTransitionTime: metav1.NewTime(now)}
			s.Conditions[3] = corev1.PodCondition{Type: corev1.ContainersReady, Status: corev1.ConditionFalse, Reason: reasonPodCompleted, LastTransitionTime: metav1.NewTime(now)}
			s.Conditions = append(s.Conditions, lostCondition)
			s.ContainerStatuses[0].Ready = false
			s.ContainerStatuses[0].Started = &notStarted
			s.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: exitCodeUnknown, Reason: ReasonContainerStatusUnknown,
				Message:   "The container could not be located: its delegate in target tgt no longer exists",
				StartedAt: t1, FinishedAt: metav1.NewTime(now), ContainerID: "containerd://1",
			}}
		}),
	}, {
		name:   "a lost delegate of a pod that never started fails it; init containers that never ran stay waiting",
		source: sourcePod(),
		want: corev1.PodStatus{
			Phase:    corev1.PodFailed,
			QOSClass: corev1.PodQOSBestEffort,
			Reason:   ReasonDelegateLost,
			Message:  "The delegate of this pod in target tgt no longer exists",
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: t0},
				{Type: corev1.ContainersReady, Status: corev1.ConditionFalse, Reason: reasonPodCompleted, LastTransitionTime: metav1.NewTime(now)},
				{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: reasonPodCompleted, LastTransitionTime: metav1.NewTime(now)},
				lostCondition,
			},
			ContainerStatuses: []corev1.ContainerStatus{{
				Name: "app", Image: "nginx", Started: &notStarted,
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
					ExitCode: exitCodeUnknown, Reason: ReasonContainerStatusUnknown,
					Message:    "The container could not be located: its delegate in target tgt no longer exists",
					FinishedAt: metav1.NewTime(now),
				}},
			}},
		},
	}, {
		name: "a deleted source pod whose containers all exited 0 Succeeded",
		source: sourcePod(func(p *corev1.Pod) {
			p.DeletionTimestamp = &t1
			p.Status = mirrored(func(s *corev1.PodStatus) {
				s.ContainerStatuses[0].Ready = false
				s.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}
			})
		}),
		want: mirrored(func(s *corev1.PodStatus) {
			s.Phase = corev1.PodSucceeded
			s.Conditions[2] = corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: reasonPodCompleted, LastTransitionTime: metav1.NewTime(now)}
			s.Conditions[3] = corev1.PodCondition{Type: corev1.ContainersReady, Status: corev1.ConditionFalse, Reason: reasonPodCompleted, LastTransitionTime: metav1.NewTime(now)}
			s.ContainerStatuses[0].Ready = false
			s.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}
		}),
	}, {
		name: "a deleted source pod whose delegate vanished running Failed, without DelegateLost",
		source: sourcePod(func(p *corev1.Pod) {
			p.DeletionTimestamp = &t1
			p.Status = mirrored()
		}),
		want: mirrored(func(s *corev1.PodStatus) {
			s.Phase = corev1.PodFailed
			s.Conditions[2] = corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: reasonPodCompleted, LastTransitionTime: metav1.NewTime(now)}
			s.Conditions[3] = corev1.PodCondition{Type: corev1.ContainersReady, Status: corev1.ConditionFalse, Reason: reasonPodCompleted, LastTransitionTime: metav1.NewTime(now)}
			s.ContainerStatuses[0].Ready = false
			s.ContainerStatuses[0].Started = &notStarted
			s.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: exitCodeUnknown, Reason: ReasonContainerStatusUnknown,
				Message:   "The container's end was not observed before its delegate in target tgt was deleted",
				StartedAt: t1, FinishedAt: metav1.NewTime(now), ContainerID: "containerd://1",
			}}
		}),
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sourceBefore := tt.source.DeepCopy()
			var delegateBefore *corev1.Pod
			if tt.delegate != nil {
				delegateBefore = tt.delegate.DeepCopy()
			}
			got := desiredStatus(tt.source, tt.delegate, "tgt", kwokPodCIDRs, now)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("desiredStatus (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(sourceBefore, tt.source); diff != "" {
				t.Errorf("desiredStatus changed the source pod:\n%s", diff)
			}
			if diff := cmp.Diff(delegateBefore, tt.delegate); diff != "" {
				t.Errorf("desiredStatus changed the delegate:\n%s", diff)
			}
			// The same inputs at a later time give the same status once it
			// is written: a status that is not stable would be rewritten on
			// every event.
			written := tt.source.DeepCopy()
			written.Status = got
			if !isTerminal(got.Phase) {
				if diff := cmp.Diff(got, desiredStatus(written, tt.delegate, "tgt", kwokPodCIDRs, now.Add(time.Hour))); diff != "" {
					t.Errorf("status not stable once written (-first +second):\n%s", diff)
				}
			}
		})
	}
}

func TestValidIPs(t *testing.T) {
	tests := []struct {
		in   []string
		want []string
	}{
		{nil, nil},
		{[]string{""}, nil},
		{[]string{"10.0.0.1"}, []string{"10.0.0.1"}},
		{[]string{"fd00::1", "10.0.0.1"}, []string{"fd00::1", "10.0.0.1"}},
		{[]string{"10.0.0.1", "10.0.0.2", "fd00::1", "fd00::2"}, []string{"10.0.0.1", "fd00::1"}},
		{[]string{"::ffff:10.0.0.1", "1.2.3", "10.0.0.01", "fe80::1%eth0", "10.0.0.3"}, []string{"10.0.0.3"}},
	}
	for _, tt := range tests {
		if got := validIPs(tt.in); !cmp.Equal(got, tt.want) {
			t.Errorf("validIPs(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestRoutableIPs(t *testing.T) {
	v4 := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}
	dual := append(slices.Clone(v4), netip.MustParsePrefix("fd00:10:244::/56"))
	wide := []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}
	tests := []struct {
		name  string
		ips   []string
		cidrs []netip.Prefix
		want  []string
	}{
		{"inside", []string{"10.244.3.7"}, v4, []string{"10.244.3.7"}},
		{"outside", []string{"10.96.0.10"}, v4, nil},
		{"one inside, one outside", []string{"192.168.1.1", "10.244.0.2"}, v4, []string{"10.244.0.2"}},
		{"IPv6 inside", []string{"10.244.0.2", "fd00:10:244::5"}, dual, []string{"10.244.0.2", "fd00:10:244::5"}},
		{"IPv6 outside", []string{"fd00:10:245::5"}, dual, nil},
		{"IPv6 with no IPv6 network listed", []string{"fd00:10:244::5"}, v4, nil},
		{"IPv4 in IPv6 is not IPv4", []string{"::ffff:10.244.0.2"}, wide, nil},
		{"malformed", []string{"", "10.244.0", "10.244.0.002", "10.244.0.2/32", "fd00:10:244::5%eth0", "nope"}, dual, nil},
		{"loopback, even listed", []string{"127.0.0.1", "::1"}, wide, nil},
		{"link-local, even listed", []string{"169.254.169.254", "fe80::1"}, wide, nil},
		{"unspecified, even listed", []string{"0.0.0.0", "::"}, wide, nil},
		{"multicast, even listed", []string{"224.0.0.1", "ff02::1", "ff01::1"}, wide, nil},
		{"an ordinary address is kept under a wide network", []string{"192.0.2.10"}, wide, []string{"192.0.2.10"}},
		{"none listed", []string{"10.244.0.2", "fd00:10:244::5"}, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := routableIPs(tt.ips, tt.cidrs); !cmp.Equal(got, tt.want) {
				t.Errorf("routableIPs(%q, %v) = %q, want %q", tt.ips, tt.cidrs, got, tt.want)
			}
		})
	}
}

// TestPodIPsOnlyInsidePodCIDRs: the source pod shows the delegate's pod IP
// only when the target's pod networks hold it; its host IP either way.
func TestPodIPsOnlyInsidePodCIDRs(t *testing.T) {
	delegate := runningDelegate()
	for _, tt := range []struct {
		name   string
		cidrs  []string
		wantIP string
	}{
		{"inside", []string{"10.244.0.0/16"}, "10.244.1.9"},
		{"outside", []string{"10.245.0.0/16"}, ""},
		{"none listed", nil, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cidrs, err := ParsePodCIDRs(tt.cidrs)
			if err != nil {
				t.Fatal(err)
			}
			got := desiredStatus(sourcePod(), delegate, "tgt", cidrs, now)
			if got.PodIP != tt.wantIP || (tt.wantIP == "") != (got.PodIPs == nil) {
				t.Errorf("podIP %q, podIPs %v; want %q", got.PodIP, got.PodIPs, tt.wantIP)
			}
			if got.HostIP != delegate.Status.HostIP || got.Phase != corev1.PodRunning {
				t.Errorf("hostIP %q, phase %q: the rest of the status is mirrored either way", got.HostIP, got.Phase)
			}
		})
	}
}

func TestParsePodCIDRs(t *testing.T) {
	got, err := ParsePodCIDRs([]string{"10.244.0.0/16", "fd00::/64", "10.1.2.3/8"})
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00::/64"), netip.MustParsePrefix("10.0.0.0/8")}
	if !cmp.Equal(got, want, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })) {
		t.Errorf("ParsePodCIDRs = %v, want %v", got, want)
	}
	for _, bad := range []string{"10.244.0.0", "10.244.0.0/33", "", "fd00::/129"} {
		if _, err := ParsePodCIDRs([]string{bad}); err == nil {
			t.Errorf("ParsePodCIDRs(%q): no error", bad)
		}
	}
}
