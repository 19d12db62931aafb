package vnode

import (
	"encoding/json"
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/apis/core"
	k8sv1 "k8s.io/kubernetes/pkg/apis/core/v1"
	"k8s.io/kubernetes/pkg/apis/core/validation"
)

// FuzzDesiredStatus: a delegate's status is written by the target (its
// kubelet, or anyone with pods/status rights there). Whatever it holds, the
// status the virtual node writes on the source pod reports only containers
// the source pod has, each once, valid addresses, at most one per family,
// and is one the source's kube-apiserver accepts whenever it accepts the
// source pod's current status: a malformed delegate never blocks the source
// pod's status updates.
func FuzzDesiredStatus(f *testing.F) {
	src, err := json.Marshal(sourcePod())
	if err != nil {
		f.Fatal(err)
	}
	del, err := json.Marshal(runningDelegate().Status)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(src), string(del), false)
	f.Add(string(src), string(del), true)
	for _, seed := range []string{
		`{}`, `null`, `{"phase":"Nope","podIP":"::ffff:1.2.3.4","podIPs":[{"ip":"1.2.3.4"},{"ip":"5.6.7.8"},{"ip":"fe80::1%eth0"},{"ip":"::1"},{"ip":"::2"}]}`,
		`{"hostIP":"01.2.3.4","hostIPs":[]}`,
		`{"podIP":"192.0.2.1","podIPs":[{"ip":"127.0.0.1"},{"ip":"169.254.169.254"},{"ip":"0.0.0.0"},{"ip":"224.0.0.1"},{"ip":"::"},{"ip":"ff02::1"},{"ip":"fe80::1"}]}`,
		`{"podIP":"192.0.2.1"}`,
		`{"containerStatuses":[{"name":"app"},{"name":"app"},{"name":"ghost"}],"initContainerStatuses":[{"name":"app"}]}`,
		`{"conditions":[{"type":""},{"type":"Ready","status":"True","observedGeneration":-5},{"type":"Ready","status":"False"},{"type":"bad type!","status":"True"}]}`,
		`{"containerStatuses":[{"name":"app","user":{"linux":{"uid":-1,"gid":-1,"supplementalGroups":[-1]}}}]}`,
		`{"containerStatuses":[{"name":"app","allocatedResourcesStatus":[{"name":"nvidia.com/gpu","resources":[{"resourceID":"a","health":"Sick"},{"resourceID":"a","health":"Healthy"}]}]}]}`,
		`{"containerStatuses":[{"name":"app","state":{"running":{}}}]}`,
		`{"resourceClaimStatuses":[{"name":"c"}],"nominatedNodeName":"x y","qosClass":"Guaranteed","observedGeneration":-1}`,
	} {
		f.Add(string(src), seed, false)
	}
	f.Fuzz(func(t *testing.T, rawSource, rawDelegate string, deleting bool) {
		var source corev1.Pod
		var delegate corev1.Pod
		if json.Unmarshal([]byte(rawSource), &source) != nil || json.Unmarshal([]byte(rawDelegate), &delegate.Status) != nil {
			return
		}
		var d *corev1.Pod
		if !deleting {
			d = &delegate
		}
		before := *source.DeepCopy()
		out := desiredStatus(&source, d, "tgt", fuzzPodCIDRs, now)
		// A virtual node that finds no delegate writes the same either way.
		if d != nil {
			checkContainers(t, "containerStatuses", out.ContainerStatuses, source.Spec.Containers)
			checkContainers(t, "initContainerStatuses", out.InitContainerStatuses, source.Spec.InitContainers)
			checkAddresses(t, out)
			checkPodIPsRoutable(t, out)
		}
		if !acceptedUpdate(before, before.Status) {
			return // the source pod itself is not valid: nothing to compare with
		}
		if errs := statusUpdateErrors(before, out); len(errs) > 0 {
			t.Fatalf("the source's API server refuses the status of source %s with delegate status %s: %v", rawSource, rawDelegate, errs)
		}
	})
}

func checkContainers(t *testing.T, field string, statuses []corev1.ContainerStatus, spec []corev1.Container) {
	t.Helper()
	names := map[string]bool{}
	for _, c := range spec {
		names[c.Name] = true
	}
	for _, cs := range statuses {
		if !names[cs.Name] {
			t.Fatalf("%s has %q, which the source pod does not have or already has a status of", field, cs.Name)
		}
		names[cs.Name] = false
	}
}

// fuzzPodCIDRs hold every address but 192.0.2.0/24, so that the fuzzer
// reaches both the check of the networks and those of unusable addresses.
var fuzzPodCIDRs = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/1"), netip.MustParsePrefix("128.0.0.0/2"), netip.MustParsePrefix("192.0.0.0/23"),
	netip.MustParsePrefix("192.0.3.0/24"), netip.MustParsePrefix("192.0.4.0/22"), netip.MustParsePrefix("192.0.8.0/21"),
	netip.MustParsePrefix("192.0.16.0/20"), netip.MustParsePrefix("192.0.32.0/19"), netip.MustParsePrefix("192.0.64.0/18"),
	netip.MustParsePrefix("192.0.128.0/17"), netip.MustParsePrefix("192.1.0.0/16"), netip.MustParsePrefix("192.2.0.0/15"),
	netip.MustParsePrefix("192.4.0.0/14"), netip.MustParsePrefix("192.8.0.0/13"), netip.MustParsePrefix("192.16.0.0/12"),
	netip.MustParsePrefix("192.32.0.0/11"), netip.MustParsePrefix("192.64.0.0/10"), netip.MustParsePrefix("192.128.0.0/9"),
	netip.MustParsePrefix("193.0.0.0/8"), netip.MustParsePrefix("194.0.0.0/7"), netip.MustParsePrefix("196.0.0.0/6"),
	netip.MustParsePrefix("200.0.0.0/5"), netip.MustParsePrefix("208.0.0.0/4"), netip.MustParsePrefix("224.0.0.0/3"),
	netip.MustParsePrefix("::/0"),
}

// checkPodIPsRoutable: a mirrored pod IP lies inside the target's pod
// networks and is one a pod of another cluster may have.
func checkPodIPsRoutable(t *testing.T, s corev1.PodStatus) {
	t.Helper()
	for _, ip := range s.PodIPs {
		a, err := netip.ParseAddr(ip.IP)
		if err != nil || !usablePodIP(a) || !slices.ContainsFunc(fuzzPodCIDRs, func(p netip.Prefix) bool { return p.Contains(a) }) {
			t.Fatalf("pod IP %q mirrored: not a usable address inside the target's pod networks", ip.IP)
		}
	}
}

func checkAddresses(t *testing.T, s corev1.PodStatus) {
	t.Helper()
	if len(s.PodIPs) > 2 || len(s.HostIPs) > 2 || (len(s.PodIPs) > 0 && s.PodIP != s.PodIPs[0].IP) || (len(s.HostIPs) > 0 && s.HostIP != s.HostIPs[0].IP) {
		t.Fatalf("addresses %q %v, %q %v", s.PodIP, s.PodIPs, s.HostIP, s.HostIPs)
	}
}

func acceptedUpdate(pod corev1.Pod, status corev1.PodStatus) bool {
	return len(statusUpdateErrors(pod, status)) == 0
}

// statusUpdateErrors is what the kube-apiserver's validation says of
// writing status on pod (as pods/status does: the rest of the pod stays).
func statusUpdateErrors(pod corev1.Pod, status corev1.PodStatus) []error {
	pod = *pod.DeepCopy()
	pod.ResourceVersion = "1" // the API server's, not the writer's
	updated := *pod.DeepCopy()
	updated.Status = status
	var oldPod, newPod core.Pod
	if err := k8sv1.Convert_v1_Pod_To_core_Pod(&pod, &oldPod, nil); err != nil {
		return []error{err}
	}
	if err := k8sv1.Convert_v1_Pod_To_core_Pod(&updated, &newPod, nil); err != nil {
		return []error{err}
	}
	opts := validation.PodValidationOptions{AllowContainerRestartPolicyRules: true}
	var errs []error
	for _, e := range validation.ValidatePodStatusUpdate(&newPod, &oldPod, opts) {
		errs = append(errs, e)
	}
	return errs
}
