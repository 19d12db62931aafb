package invitation

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/cel-go/common/types"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
	psapi "k8s.io/pod-security-admission/api"
	psapolicy "k8s.io/pod-security-admission/policy"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/candidate"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// apiAudience is what the sample API server gives a token asking for none.
const apiAudience = "https://kubernetes.default.svc.cluster.local"

// evaluated is an invitation's policy, compiled as the API server compiles
// a ValidatingAdmissionPolicy's validations.
type evaluated struct {
	policy *admissionregistrationv1.ValidatingAdmissionPolicy
	cond   plugincel.ConditionEvaluator
}

func compile(t *testing.T, inv Invitation) evaluated {
	t.Helper()
	p := inv.Policy()
	accessors := make([]plugincel.ExpressionAccessor, len(p.Spec.Validations))
	for i, v := range p.Spec.Validations {
		accessors[i] = &validating.ValidationCondition{Expression: v.Expression, Message: v.Message}
	}
	env := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())
	cond := plugincel.NewConditionCompiler(env).CompileCondition(accessors, plugincel.OptionalVariableDeclarations{}, environment.StoredExpressions)
	for _, err := range cond.CompilationErrors() {
		t.Fatalf("the policy does not compile: %v", err)
	}
	return evaluated{policy: p, cond: cond}
}

// refusals are the messages of the validations a request fails; a
// validation that errors fails too, as failurePolicy Fail makes it.
func (e evaluated) refusals(t *testing.T, op admission.Operation, resource, subresource string, obj, old runtime.Object) []string {
	t.Helper()
	gvr := schema.GroupVersionResource{Version: "v1", Resource: resource}
	gvk := corev1.SchemeGroupVersion.WithKind(map[string]string{"pods": "Pod", "configmaps": "ConfigMap", "secrets": "Secret"}[resource])
	if subresource == "token" {
		gvk = authenticationv1.SchemeGroupVersion.WithKind("TokenRequest")
	}
	attrs := admission.NewAttributesRecord(obj, old, gvk, "shop", "x", gvr, subresource, op, nil, false, &user.DefaultInfo{Name: "system:serviceaccount:flotilla-system:flotilla-source-c1"})
	versioned := &admission.VersionedAttributes{Attributes: attrs, VersionedKind: gvk, VersionedObject: admission.NewLazyObject(obj), VersionedOldObject: admission.NewLazyObject(old)}
	req := plugincel.CreateAdmissionRequest(attrs, metav1.GroupVersionResource(gvr), metav1.GroupVersionKind(gvk))
	results, _, err := e.cond.ForInput(context.Background(), versioned, req, plugincel.OptionalVariableBindings{}, nil, celconfig.RuntimeCELCostBudget)
	if err != nil {
		t.Fatalf("evaluating the policy: %v", err)
	}
	var out []string
	for i, r := range results {
		switch {
		case r.Error != nil:
			out = append(out, "error: "+r.Error.Error()+" in "+e.policy.Spec.Validations[i].Expression)
		case r.EvalResult != types.True:
			out = append(out, e.policy.Spec.Validations[i].Message)
		}
	}
	return out
}

// normalCandidate is what candidate.Build makes of an ordinary pod, as
// this API server's mutating admission leaves it: ServiceAccount
// "default", priority 0 from no PriorityClass.
func normalCandidate(t *testing.T) *corev1.Pod {
	t.Helper()
	return buildCandidate(t, false)
}

// buildCandidate builds the candidate for a target that keeps its
// sources' labels or not.
func buildCandidate(t *testing.T, keepSourceLabels bool) *corev1.Pod {
	t.Helper()
	spec := corev1.PodSpec{
		Containers: []corev1.Container{{
			Name: "web", Image: "registry.example/web:1",
			Ports:          []corev1.ContainerPort{{ContainerPort: 8080}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready"}}},
			SecurityContext: &corev1.SecurityContext{
				Capabilities:   &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE"}, Drop: []corev1.Capability{"ALL"}},
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
		}},
		InitContainers: []corev1.Container{{Name: "init", Image: "registry.example/init:1"}},
		SecurityContext: &corev1.PodSecurityContext{
			Sysctls: []corev1.Sysctl{{Name: "net.ipv4.ip_local_port_range", Value: "1024 65535"}},
		},
		Volumes: []corev1.Volume{
			{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "config"}}}},
			{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		},
		NodeName: "source-node", ServiceAccountName: "web",
		// Terms that select the pod's siblings: the candidate's select
		// the source's candidates alone, as the policy wants them.
		Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, TopologyKey: "kubernetes.io/hostname",
				NamespaceSelector: &metav1.LabelSelector{},
			}},
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{Weight: 10, PodAffinityTerm: corev1.PodAffinityTerm{
				LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpDoesNotExist}}}, TopologyKey: "zone",
			}}},
		}},
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	source := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: "web", Namespace: "shop", UID: "uid-1",
		Labels:      map[string]string{"app": "web", protocol.ElectLabel: "true"},
		Annotations: map[string]string{protocol.SourceSpecAnnotation: string(raw)},
	}}
	c, err := candidate.Build(source, "c1", "t1", "shop", false, keepSourceLabels)
	if err != nil {
		t.Fatal(err)
	}
	c.Spec.ServiceAccountName = "default"
	c.Spec.Priority = ptr.To[int32](0)
	return c
}

func baselineAllows(t *testing.T, p *corev1.Pod) bool {
	t.Helper()
	eval, err := psapolicy.NewEvaluator(psapolicy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	res := psapolicy.AggregateCheckResults(eval.EvaluatePod(psapi.LevelVersion{Level: psapi.LevelBaseline, Version: psapi.LatestVersion()}, &p.ObjectMeta, &p.Spec))
	return res.Allowed
}

func policyInvitation() Invitation {
	inv := sample("ClusterSource")
	inv.APIAudiences = []string{apiAudience}
	return inv
}

func TestPolicyAdmitsNormalCandidates(t *testing.T) {
	inv := policyInvitation()
	e := compile(t, inv)
	c := normalCandidate(t)
	if c.Labels[protocol.TargetLabel] != protocol.TargetLabelValue("t1") {
		t.Fatalf("candidate.Build gave no target label: %v", c.Labels)
	}
	if got := e.refusals(t, admission.Create, "pods", "", c, nil); len(got) > 0 {
		t.Fatalf("a normal candidate is refused: %q", got)
	}
	// The source's labels, carried under a subdomain of Flotilla's.
	carried := c.DeepCopy()
	carried.Labels["label."+protocol.Prefix+"app"] = "web"
	if got := e.refusals(t, admission.Create, "pods", "", carried, nil); len(got) > 0 {
		t.Fatalf("a candidate carrying its source's labels under Flotilla's domain is refused: %q", got)
	}
	if !baselineAllows(t, c) {
		t.Fatal("the normal candidate does not meet baseline: fix the sample")
	}
	// The source annotates its candidate after the scheduler bound it.
	bound := c.DeepCopy()
	bound.Spec.NodeName = "t1-node-0"
	next := bound.DeepCopy()
	next.Annotations[protocol.AllowedAnnotation] = "uid-1/1/n"
	if got := e.refusals(t, admission.Update, "pods", "", next, bound); len(got) > 0 {
		t.Fatalf("annotating a bound candidate is refused: %q", got)
	}
	// A label this cluster set on the candidate stays, and does not stop
	// the source's updates.
	labelled := bound.DeepCopy()
	labelled.Labels["security.istio.io/tlsMode"] = "istio"
	next = labelled.DeepCopy()
	next.Annotations[protocol.AllowedAnnotation] = "uid-1/1/n"
	if got := e.refusals(t, admission.Update, "pods", "", next, labelled); len(got) > 0 {
		t.Fatalf("annotating a candidate this cluster labelled is refused: %q", got)
	}
	if got := e.refusals(t, admission.Delete, "pods", "", nil, c); len(got) > 0 {
		t.Fatalf("deleting its candidate is refused: %q", got)
	}
	// With keepSourceLabels, the candidate keeps its source's labels.
	keep := policyInvitation()
	keep.Spec.KeepSourceLabels = true
	withLabels := buildCandidate(t, true)
	if withLabels.Labels["app"] != "web" {
		t.Fatalf("candidate.Build with keepSourceLabels drops the source's labels: %v", withLabels.Labels)
	}
	if got := compile(t, keep).refusals(t, admission.Create, "pods", "", withLabels, nil); len(got) > 0 {
		t.Fatalf("a candidate with its source's labels is refused under keepSourceLabels: %q", got)
	}
	// A privileged invitation lets baseline go, and nothing else.
	priv := policyInvitation()
	priv.Spec.AllowPrivileged = true
	hostPort := c.DeepCopy()
	hostPort.Spec.Containers[0].Ports[0].HostPort = 80
	if got := compile(t, priv).refusals(t, admission.Create, "pods", "", hostPort, nil); len(got) > 0 {
		t.Fatalf("allowPrivileged still refuses a host port: %q", got)
	}
}

// TestPolicyRefusesPods tries a bad candidate for each rule: each is
// refused, with a message naming the field.
func TestPolicyRefusesPods(t *testing.T) {
	container := func(f func(c *corev1.Container)) func(*corev1.Pod) {
		return func(p *corev1.Pod) { f(&p.Spec.Containers[0]) }
	}
	sc := func(f func(sc *corev1.SecurityContext)) func(*corev1.Pod) {
		return container(func(c *corev1.Container) { f(c.SecurityContext) })
	}
	podSC := func(f func(sc *corev1.PodSecurityContext)) func(*corev1.Pod) {
		return func(p *corev1.Pod) { f(p.Spec.SecurityContext) }
	}
	ephemeral := func(f func(c *corev1.EphemeralContainerCommon)) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			e := corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "busybox"}}
			f(&e.EphemeralContainerCommon)
			p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, e)
		}
	}
	for _, tc := range []struct {
		name     string
		mutate   func(*corev1.Pod)
		field    string
		baseline bool // a baseline control: the Pod Security Standards refuse it too
	}{
		{"a node chosen", func(p *corev1.Pod) { p.Spec.NodeName = "t1-node-0" }, "spec.nodeName", false},
		{"a PriorityClass not allowed", func(p *corev1.Pod) { p.Spec.PriorityClassName = "high" }, "spec.priorityClassName", false},
		{"a system PriorityClass", func(p *corev1.Pod) { p.Spec.PriorityClassName = "system-node-critical" }, "spec.priorityClassName", false},
		{"a priority without a class", func(p *corev1.Pod) { p.Spec.Priority = ptr.To[int32](1000000000) }, "spec.priority", false},
		{"Windows HostProcess on the pod", podSC(func(sc *corev1.PodSecurityContext) {
			sc.WindowsOptions = &corev1.WindowsSecurityContextOptions{HostProcess: ptr.To(true)}
		}), "hostProcess", true},
		{"Windows HostProcess in an init container", func(p *corev1.Pod) {
			p.Spec.InitContainers[0].SecurityContext = &corev1.SecurityContext{WindowsOptions: &corev1.WindowsSecurityContextOptions{HostProcess: ptr.To(true)}}
		}, "hostProcess", true},
		{"hostNetwork", func(p *corev1.Pod) { p.Spec.HostNetwork = true }, "network, PID or IPC", true},
		{"hostPID", func(p *corev1.Pod) { p.Spec.HostPID = true }, "network, PID or IPC", true},
		{"hostIPC", func(p *corev1.Pod) { p.Spec.HostIPC = true }, "network, PID or IPC", true},
		{"a privileged ephemeral container", ephemeral(func(c *corev1.EphemeralContainerCommon) {
			c.SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
		}), "privileged", true},
		{"SYS_ADMIN", sc(func(sc *corev1.SecurityContext) { sc.Capabilities.Add = append(sc.Capabilities.Add, "SYS_ADMIN") }), "capabilities.add", true},
		{"NET_RAW in an ephemeral container", ephemeral(func(c *corev1.EphemeralContainerCommon) {
			c.SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_RAW"}}}
		}), "capabilities.add", true},
		{"a hostPath volume", func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}})
		}, "hostPath", true},
		{"a host port", container(func(c *corev1.Container) { c.Ports[0].HostPort = 8080 }), "hostPort", true},
		{"a host port in an init container", func(p *corev1.Pod) {
			p.Spec.InitContainers[0].Ports = []corev1.ContainerPort{{ContainerPort: 22, HostPort: 22}}
		}, "hostPort", true},
		{"AppArmor unconfined on the pod", podSC(func(sc *corev1.PodSecurityContext) {
			sc.AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
		}), "appArmorProfile", true},
		{"AppArmor unconfined in a container", sc(func(sc *corev1.SecurityContext) {
			sc.AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
		}), "appArmorProfile", true},
		{"AppArmor unconfined by annotation", func(p *corev1.Pod) {
			p.Annotations["container.apparmor.security.beta.kubernetes.io/web"] = "unconfined"
		}, "apparmor", true},
		{"an SELinux type", podSC(func(sc *corev1.PodSecurityContext) {
			sc.SELinuxOptions = &corev1.SELinuxOptions{Type: "spc_t"}
		}), "seLinuxOptions", true},
		{"an SELinux user in a container", sc(func(sc *corev1.SecurityContext) {
			sc.SELinuxOptions = &corev1.SELinuxOptions{User: "system_u"}
		}), "seLinuxOptions", true},
		{"an SELinux role in an init container", func(p *corev1.Pod) {
			p.Spec.InitContainers[0].SecurityContext = &corev1.SecurityContext{SELinuxOptions: &corev1.SELinuxOptions{Role: "sysadm_r"}}
		}, "seLinuxOptions", true},
		{"an unmasked /proc", sc(func(sc *corev1.SecurityContext) { sc.ProcMount = ptr.To(corev1.UnmaskedProcMount) }), "procMount", true},
		{"seccomp unconfined on the pod", podSC(func(sc *corev1.PodSecurityContext) {
			sc.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
		}), "seccompProfile", true},
		{"seccomp unconfined in a container", sc(func(sc *corev1.SecurityContext) {
			sc.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
		}), "seccompProfile", true},
		{"an unsafe sysctl", podSC(func(sc *corev1.PodSecurityContext) {
			sc.Sysctls = append(sc.Sysctls, corev1.Sysctl{Name: "kernel.msgmax", Value: "65536"})
		}), "sysctls", true},
		{"a probe of another host", container(func(c *corev1.Container) { c.ReadinessProbe.HTTPGet.Host = "169.254.169.254" }), "host", true},
		{"a lifecycle hook of another host", container(func(c *corev1.Container) {
			c.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{TCPSocket: &corev1.TCPSocketAction{Host: "10.0.0.1"}}}
		}), "host", true},
		{"a generic ephemeral volume", func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{}}})
		}, "spec.volumes[].ephemeral", false},
		{"a claim of the namespace", func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "payments-db"}}})
		}, "spec.volumes[].persistentVolumeClaim", false},
		{"an anti-affinity against every pod lacking a key, in every namespace", func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				LabelSelector:     &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: protocol.SourceLabelPrefix + "x", Operator: metav1.LabelSelectorOpDoesNotExist}}},
				NamespaceSelector: &metav1.LabelSelector{}, TopologyKey: "topology.kubernetes.io/zone",
			}}}}
		}, "spec.affinity", false},
		{"an anti-affinity of the source's own, reaching other namespaces", func(p *corev1.Pod) {
			p.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].Namespaces = []string{"kube-system"}
		}, "spec.affinity", false},
		{"an anti-affinity that does not require the source's own candidates", func(p *corev1.Pod) {
			p.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].LabelSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "payments"}}
		}, "spec.affinity", false},
		{"an anti-affinity that requires another source's candidates", func(p *corev1.Pod) {
			p.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].LabelSelector = &metav1.LabelSelector{MatchLabels: map[string]string{protocol.SourceClusterLabel: "c2"}}
		}, "spec.affinity", false},
		{"a preferred affinity that attracts to the target's own pods", func(p *corev1.Pod) {
			p.Spec.Affinity.PodAffinity = &corev1.PodAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{Weight: 100, PodAffinityTerm: corev1.PodAffinityTerm{
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "payments"}}, TopologyKey: "kubernetes.io/hostname",
			}}}}
		}, "spec.affinity", false},
		{"a resource claim", func(p *corev1.Pod) {
			p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("gpu")}}
		}, "spec.resourceClaims", false},
		{"another ServiceAccount", func(p *corev1.Pod) { p.Spec.ServiceAccountName = "deployer" }, "spec.serviceAccountName", false},
		{"another ServiceAccount by the old field", func(p *corev1.Pod) { p.Spec.DeprecatedServiceAccount = "deployer" }, "spec.serviceAccountName", false},
		{"an automounted token", func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "kube-api-access-x", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}},
			}}})
		}, "serviceAccountToken", false},
		{"a projected token for another audience", func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "vault", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "ca"}}},
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: "vault", Path: "token"}}},
			}}})
		}, "serviceAccountToken", false},
		{"a pod certificate", func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "cert", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{PodCertificate: &corev1.PodCertificateProjection{SignerName: "example.com/signer", KeyType: "ED25519"}}},
			}}})
		}, "serviceAccountToken", false},
		{"a finalizer", func(p *corev1.Pod) { p.Finalizers = []string{"example.com/hold"} }, "metadata.finalizers", false},
		{"an owner", func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-abc", UID: "rs-uid", Controller: ptr.To(true)}}
		}, "metadata.ownerReferences", false},
		{"a label a Service selects", func(p *corev1.Pod) { p.Labels["app"] = "payments" }, "metadata.labels", false},
		{"a label of a look-alike domain", func(p *corev1.Pod) { p.Labels["multicluster.flotilla.dev.example.com/app"] = "payments" }, "metadata.labels", false},
		{"a label of a domain ending like Flotilla's", func(p *corev1.Pod) { p.Labels["xmulticluster.flotilla.dev/app"] = "payments" }, "metadata.labels", false},
		{"another scheduler", func(p *corev1.Pod) { p.Spec.SchedulerName = "default-scheduler" }, "schedulerName", false},
		{"another source's label", func(p *corev1.Pod) { p.Labels[protocol.SourceClusterLabel] = "c2" }, "labelled", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inv := policyInvitation()
			inv.Spec.AllowPriorityClasses = []string{"batch"}
			e := compile(t, inv)
			p := normalCandidate(t)
			tc.mutate(p)
			got := e.refusals(t, admission.Create, "pods", "", p, nil)
			if len(got) == 0 {
				t.Fatalf("admitted")
			}
			found := false
			for _, m := range got {
				if strings.HasPrefix(m, "error") {
					t.Errorf("a validation fails to evaluate: %s", m)
				}
				found = found || strings.Contains(m, tc.field)
			}
			if !found {
				t.Errorf("refused with %q, none naming %s", got, tc.field)
			}
			if !strings.Contains(got[0], "c1") {
				t.Errorf("message %q does not name the source", got[0])
			}
			if baseline := !baselineAllows(t, p); baseline != tc.baseline {
				t.Errorf("the Pod Security Standards' baseline refuses it: %v, want %v", baseline, tc.baseline)
			}
		})
	}
	// A claim of the namespace passes where the invitation allows claims.
	claims := policyInvitation()
	claims.Spec.AllowPersistentVolumeClaims = true
	withClaim := normalCandidate(t)
	withClaim.Spec.Volumes = append(withClaim.Spec.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "shared"}}})
	if got := compile(t, claims).refusals(t, admission.Create, "pods", "", withClaim, nil); len(got) > 0 {
		t.Errorf("allowPersistentVolumeClaims still refuses a claim: %q", got)
	}
	// An allowed PriorityClass passes.
	inv := policyInvitation()
	inv.Spec.AllowPriorityClasses = []string{"batch"}
	p := normalCandidate(t)
	p.Spec.PriorityClassName, p.Spec.Priority = "batch", ptr.To[int32](1000)
	if got := compile(t, inv).refusals(t, admission.Create, "pods", "", p, nil); len(got) > 0 {
		t.Errorf("an allowed PriorityClass is refused: %q", got)
	}
}

// TestPolicyRefusesMetadataChanges updates a candidate in ways that change
// how this cluster treats it.
func TestPolicyRefusesMetadataChanges(t *testing.T) {
	e := compile(t, policyInvitation())
	for _, tc := range []struct {
		name   string
		old    func(*corev1.Pod)
		mutate func(*corev1.Pod)
		field  string
	}{
		{"add a label", nil, func(p *corev1.Pod) { p.Labels["app"] = "payments" }, "metadata.labels"},
		{"change a label this cluster set", func(p *corev1.Pod) { p.Labels["team"] = "a" }, func(p *corev1.Pod) { p.Labels["team"] = "b" }, "metadata.labels"},
		{"remove a label this cluster set", func(p *corev1.Pod) { p.Labels["quarantine"] = "true" }, func(p *corev1.Pod) { delete(p.Labels, "quarantine") }, "metadata.labels"},
		{"change the source UID", nil, func(p *corev1.Pod) { p.Labels[protocol.SourceUIDLabel] = "uid-2" }, protocol.SourceUIDLabel},
		{"drop the source UID", nil, func(p *corev1.Pod) { delete(p.Labels, protocol.SourceUIDLabel) }, protocol.SourceUIDLabel},
		{"hand a candidate to another target of the source", nil, func(p *corev1.Pod) { p.Labels[protocol.TargetLabel] = protocol.TargetLabelValue("t2") }, protocol.TargetLabel},
		{"drop the target", nil, func(p *corev1.Pod) { delete(p.Labels, protocol.TargetLabel) }, protocol.TargetLabel},
		{"take over another source's candidate", func(p *corev1.Pod) { p.Labels[protocol.SourceClusterLabel] = "c2" },
			func(p *corev1.Pod) { p.Labels[protocol.SourceClusterLabel] = "c1" }, "another source"},
		{"add a finalizer", nil, func(p *corev1.Pod) { p.Finalizers = append(p.Finalizers, "example.com/hold") }, "metadata.finalizers"},
		{"remove this cluster's finalizer", func(p *corev1.Pod) { p.Finalizers = []string{"example.com/audit"} }, func(p *corev1.Pod) { p.Finalizers = nil }, "metadata.finalizers"},
		{"add an owner", nil, func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-abc", UID: "rs-uid"}}
		}, "metadata.ownerReferences"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := normalCandidate(t)
			if tc.old != nil {
				tc.old(old)
			}
			p := old.DeepCopy()
			tc.mutate(p)
			got := e.refusals(t, admission.Update, "pods", "", p, old)
			if len(got) == 0 || !strings.Contains(strings.Join(got, "\n"), tc.field) {
				t.Errorf("refused with %q, want a message naming %s", got, tc.field)
			}
		})
	}
}

// TestPolicyCopies checks the ConfigMaps and Secrets the source writes:
// what pkg/objects writes passes, anything more does not.
func TestPolicyCopies(t *testing.T) {
	e := compile(t, policyInvitation())
	owner := metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: "web-0123456789", UID: "cand-uid"}
	meta := func() metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: protocol.CopyName("c1", "config"), Namespace: "shop", Labels: map[string]string{protocol.CopyLabel: "true", protocol.SourceClusterLabel: "c1"}}
	}
	cm := &corev1.ConfigMap{ObjectMeta: meta(), Data: map[string]string{"a": "b"}}
	if got := e.refusals(t, admission.Create, "configmaps", "", cm, nil); len(got) > 0 {
		t.Fatalf("a copy is refused: %q", got)
	}
	owned := cm.DeepCopy()
	owned.OwnerReferences = []metav1.OwnerReference{owner}
	if got := e.refusals(t, admission.Update, "configmaps", "", owned, cm); len(got) > 0 {
		t.Fatalf("a copy owned by a candidate is refused: %q", got)
	}
	secret := &corev1.Secret{ObjectMeta: meta(), Type: corev1.SecretTypeOpaque}
	if got := e.refusals(t, admission.Create, "secrets", "", secret, nil); len(got) > 0 {
		t.Fatalf("a Secret copy is refused: %q", got)
	}
	for _, tc := range []struct {
		name   string
		mutate func(m *metav1.ObjectMeta, s *corev1.Secret)
		field  string
	}{
		{"blockOwnerDeletion", func(m *metav1.ObjectMeta, _ *corev1.Secret) {
			o := owner
			o.BlockOwnerDeletion = ptr.To(true)
			m.OwnerReferences = []metav1.OwnerReference{o}
		}, "metadata.ownerReferences"},
		{"a controller", func(m *metav1.ObjectMeta, _ *corev1.Secret) {
			o := owner
			o.Controller = ptr.To(true)
			m.OwnerReferences = []metav1.OwnerReference{o}
		}, "metadata.ownerReferences"},
		{"an owner that is not a pod", func(m *metav1.ObjectMeta, _ *corev1.Secret) {
			m.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "d"}}
		}, "metadata.ownerReferences"},
		{"a finalizer", func(m *metav1.ObjectMeta, _ *corev1.Secret) { m.Finalizers = []string{"example.com/hold"} }, "metadata.finalizers"},
		{"a label", func(m *metav1.ObjectMeta, _ *corev1.Secret) { m.Labels["app"] = "web" }, "metadata.labels"},
		{"a service-account-token Secret", func(_ *metav1.ObjectMeta, s *corev1.Secret) {
			s.Type = corev1.SecretTypeServiceAccountToken
			s.Annotations = map[string]string{corev1.ServiceAccountNameKey: "default"}
		}, "type"},
		{"a bootstrap token Secret", func(_ *metav1.ObjectMeta, s *corev1.Secret) { s.Type = corev1.SecretTypeBootstrapToken }, "type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := secret.DeepCopy()
			tc.mutate(&s.ObjectMeta, s)
			got := e.refusals(t, admission.Create, "secrets", "", s, nil)
			if len(got) == 0 || !strings.HasPrefix(strings.Join(got, "\n"), tc.field) && !strings.Contains(strings.Join(got, "\n"), tc.field+":") {
				t.Errorf("refused with %q, want a message naming %s", got, tc.field)
			}
		})
	}
}

// TestPolicyTokens checks the identity's requests for its own tokens.
func TestPolicyTokens(t *testing.T) {
	inv := policyInvitation()
	inv.Spec.MaxTokenLifetime = &metav1.Duration{Duration: time.Hour}
	e := compile(t, inv)
	req := func(seconds int64, audiences ...string) *authenticationv1.TokenRequest {
		// The API server has filled in its own audiences when none were
		// asked for.
		if len(audiences) == 0 {
			audiences = []string{apiAudience}
		}
		return &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds, Audiences: audiences}}
	}
	if got := e.refusals(t, admission.Create, "serviceaccounts", "token", req(3600), nil); len(got) > 0 {
		t.Fatalf("a token within bounds is refused: %q", got)
	}
	bound := req(600)
	bound.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: "web"}
	for _, tc := range []struct {
		name  string
		req   *authenticationv1.TokenRequest
		field string
	}{
		{"longer than the invitation allows", req(3601), "spec.expirationSeconds"},
		{"a year", req(365 * 24 * 3600), "spec.expirationSeconds"},
		{"another audience", req(600, "vault"), "spec.audiences"},
		{"this API server's and another", req(600, apiAudience, "sts.amazonaws.com"), "spec.audiences"},
		{"bound to a pod", bound, "spec.boundObjectRef"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := e.refusals(t, admission.Create, "serviceaccounts", "token", tc.req, nil)
			if len(got) != 1 || !strings.HasPrefix(got[0], tc.field) {
				t.Errorf("refused with %q, want one message naming %s", got, tc.field)
			}
		})
	}
	unknown := policyInvitation()
	unknown.APIAudiences = nil
	if got := compile(t, unknown).refusals(t, admission.Create, "serviceaccounts", "token", req(600), nil); len(got) != 1 {
		t.Errorf("with this API server's audiences unknown, a token request is refused with %q, want the audiences' message", got)
	}
	if got := inv.Spec.TokenLifetime(); got != time.Hour {
		t.Errorf("token lifetime %s", got)
	}
	def := policyInvitation()
	if got := def.Spec.TokenLifetime(); got != v1alpha1.DefaultMaxTokenLifetime {
		t.Errorf("default token lifetime %s", got)
	}
}
