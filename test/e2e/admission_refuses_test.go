package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	flotillacandidate "github.com/flotilla-dev/flotilla/pkg/candidate"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// TestAdmissionRefusesWhatTheInvitedIdentityMayNotAsk acts as a malicious
// source: with the invited identity's own token it sends the target's API
// server what its RBAC allows, beyond what Flotilla's agent sends. Each
// attempt is refused by the invitation's admission policy with a message
// naming the field; ordinary candidates and bounded tokens still pass;
// revoking the invitation leaves no token of the identity that works.
func TestAdmissionRefusesWhatTheInvitedIdentityMayNotAsk(t *testing.T) {
	t.Parallel()
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{
		{Name: "tgt", Nodes: []sandbox.NodeSpec{{CPU: "8"}}},
	}})
	ctx := t.Context()
	tgt := s.Cluster("tgt")
	admin := tgt.Client()
	createNamespace(t, admin, placementNS)
	// What a namespace of the target holds that a source must not reach:
	// a ServiceAccount with rights, a PriorityClass.
	if _, err := admin.CoreV1().ServiceAccounts(placementNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "deployer"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, pc := range []schedulingv1.PriorityClass{
		{ObjectMeta: metav1.ObjectMeta{Name: "batch"}, Value: 100},
		{ObjectMeta: metav1.ObjectMeta{Name: "high"}, Value: 1000000},
	} {
		if _, err := admin.SchedulingV1().PriorityClasses().Create(ctx, &pc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := sandbox.StartAgent(ctx, tgt, nil, "agent.invitationTokenTTL=10m"); err != nil {
		t.Fatal(err)
	}
	cs := &v1alpha1.ClusterSource{ObjectMeta: metav1.ObjectMeta{Name: "src"}}
	cs.Spec.ClusterName = "src"
	cs.Spec.Identity.ManagedServiceAccount = &v1alpha1.ManagedServiceAccount{}
	cs.Spec.Namespaces = []string{placementNS, "fresh"}
	cs.Spec.CreateNamespaces = true
	cs.Spec.AllowPriorityClasses = []string{"batch"}
	cs.Spec.MaxTokenLifetime = &metav1.Duration{Duration: time.Hour}
	source := inviteReady(t, tgt, cs)
	status, kubeconfig, invited := source.status, source.kubeconfig, source.client
	pods := invited.CoreV1().Pods(placementNS)
	saNS, saName, _ := strings.Cut(status.ServiceAccount, "/")

	t.Run("a namespace created for the invitation enforces baseline", func(t *testing.T) {
		ns, err := admin.CoreV1().Namespaces().Get(ctx, "fresh", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range map[string]string{
			"pod-security.kubernetes.io/enforce": "baseline", "pod-security.kubernetes.io/enforce-version": "latest",
			"pod-security.kubernetes.io/audit": "restricted", "pod-security.kubernetes.io/audit-version": "latest",
		} {
			if ns.Labels[k] != v {
				t.Errorf("namespace fresh: label %s=%q, want %q", k, ns.Labels[k], v)
			}
		}
		// A warning would come back to the source's agent with every
		// candidate it creates.
		if v, ok := ns.Labels["pod-security.kubernetes.io/warn"]; ok {
			t.Errorf("namespace fresh: label pod-security.kubernetes.io/warn=%q, want none", v)
		}
	})

	// Ordinary candidates pass: one as the agent builds it from a pod,
	// one with only the protocol's labels, one of an allowed class.
	built := builtCandidate(t)
	normal := candidatePod("normal", "src")
	batch := candidatePod("batch", "src")
	batch.Spec.PriorityClassName = "batch"
	uids := map[string]types.UID{}
	for _, p := range []*corev1.Pod{built, normal, batch} {
		created, err := pods.Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("an ordinary candidate %s is refused: %v", p.Name, err)
		}
		uids[p.Name] = created.UID
	}
	// And a copy, as the source's agent writes it: created, then owned by
	// a candidate (the garbage collector deletes a copy whose owners are
	// gone).
	copied := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: protocol.CopyName("src", "config"),
		Labels: map[string]string{protocol.CopyLabel: "true", protocol.SourceClusterLabel: "src"}}, Data: map[string]string{"a": "b"}}
	if _, err := invited.CoreV1().ConfigMaps(placementNS).Create(ctx, copied, metav1.CreateOptions{}); err != nil {
		t.Fatalf("a copy is refused: %v", err)
	}
	owners := fmt.Appendf(nil, `{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"Pod","name":%q,"uid":%q}]}}`, normal.Name, uids[normal.Name])
	if _, err := invited.CoreV1().ConfigMaps(placementNS).Patch(ctx, copied.Name, types.StrategicMergePatchType, owners, metav1.PatchOptions{}); err != nil {
		t.Fatalf("making a candidate the owner of its copy is refused: %v", err)
	}

	pod := func(name string, f func(*corev1.Pod)) func() error {
		return func() error {
			p := candidatePod(name, "src")
			f(p)
			_, err := pods.Create(ctx, p, metav1.CreateOptions{})
			return err
		}
	}
	container := func(name string, f func(*corev1.Container)) func() error {
		return pod(name, func(p *corev1.Pod) { f(&p.Spec.Containers[0]) })
	}
	securityContext := func(name string, sc *corev1.SecurityContext) func() error {
		return container(name, func(c *corev1.Container) { c.SecurityContext = sc })
	}
	patch := func(name string, body string) func() error {
		return func() error {
			_, err := pods.Patch(ctx, name, types.MergePatchType, []byte(body), metav1.PatchOptions{})
			return err
		}
	}
	copyMeta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: protocol.CopyName("src", name), Labels: map[string]string{protocol.CopyLabel: "true", protocol.SourceClusterLabel: "src"}}
	}
	tokenRequest := func(seconds int64, audiences ...string) func() error {
		return func() error {
			_, err := invited.CoreV1().ServiceAccounts(saNS).CreateToken(ctx, saName, &authenticationv1.TokenRequest{
				Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds, Audiences: audiences},
			}, metav1.CreateOptions{})
			return err
		}
	}

	for _, class := range []struct {
		name     string
		attempts []struct {
			name, want string
			call       func() error
		}
	}{
		{"a candidate is scheduled by the flotilla scheduler only", []struct {
			name, want string
			call       func() error
		}{
			{"create a pod on a node of its choosing", "spec.nodeName", pod("pinned", func(p *corev1.Pod) { p.Spec.NodeName = "tgt-node-0" })},
			{"create a pod for another scheduler", "schedulerName", pod("other-scheduler", func(p *corev1.Pod) { p.Spec.SchedulerName = "default-scheduler" })},
			{"bind its candidate itself", "pods/binding", func() error {
				return pods.Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: normal.Name}, Target: corev1.ObjectReference{Kind: "Node", Name: "tgt-node-0"}}, metav1.CreateOptions{})
			}},
		}},
		{"a candidate's priority is the invitation's", []struct {
			name, want string
			call       func() error
		}{
			{"name a PriorityClass the invitation does not list", "spec.priorityClassName", pod("high", func(p *corev1.Pod) { p.Spec.PriorityClassName = "high" })},
			{"name a system PriorityClass", "spec.priorityClassName", pod("critical", func(p *corev1.Pod) { p.Spec.PriorityClassName = "system-node-critical" })},
			{"set a priority without a class", "priority", pod("priority", func(p *corev1.Pod) { p.Spec.Priority = ptr.To[int32](1000000000) })},
		}},
		{"a candidate meets the Pod Security Standards' baseline", []struct {
			name, want string
			call       func() error
		}{
			{"add SYS_ADMIN", "securityContext.capabilities.add", securityContext("sys-admin", &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}}})},
			{"open a host port", "hostPort", container("host-port", func(c *corev1.Container) {
				c.Ports = []corev1.ContainerPort{{ContainerPort: 22, HostPort: 22}}
			})},
			{"run seccomp Unconfined", "securityContext.seccompProfile.type", pod("seccomp", func(p *corev1.Pod) {
				p.Spec.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}}
			})},
			{"run AppArmor unconfined", "securityContext.appArmorProfile.type", securityContext("apparmor", &corev1.SecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}})},
			{"choose an SELinux type", "securityContext.seLinuxOptions", securityContext("selinux", &corev1.SecurityContext{SELinuxOptions: &corev1.SELinuxOptions{Type: "spc_t"}})},
			{"set an unsafe sysctl", "spec.securityContext.sysctls", pod("sysctl", func(p *corev1.Pod) {
				p.Spec.SecurityContext = &corev1.PodSecurityContext{Sysctls: []corev1.Sysctl{{Name: "kernel.msgmax", Value: "65536"}}}
			})},
			{"probe another host", "host", container("probe", func(c *corev1.Container) {
				c.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Host: "169.254.169.254", Path: "/", Port: intstr.FromInt32(80)}}}
			})},
			{"a privileged init container", "privileged", pod("privileged-init", func(p *corev1.Pod) {
				p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox", SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}}
			})},
		}},
		{"nothing is created on the identity's behalf", []struct {
			name, want string
			call       func() error
		}{
			{"claim a volume through a generic ephemeral volume", "spec.volumes[].ephemeral", pod("ephemeral", func(p *corev1.Pod) {
				p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
					VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: corev1.PersistentVolumeClaimSpec{
						AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
						Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
					}},
				}}}}
			})},
			{"mount a claim of the namespace, someone else's data", "spec.volumes[].persistentVolumeClaim", pod("claim", func(p *corev1.Pod) {
				p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "payments-db"}}}}
			})},
			{"run as another ServiceAccount of the namespace", "spec.serviceAccountName", pod("deployer", func(p *corev1.Pod) { p.Spec.ServiceAccountName = "deployer" })},
			{"mount the namespace's token automatically", "serviceAccountToken", pod("automount", func(p *corev1.Pod) { p.Spec.AutomountServiceAccountToken = nil })},
			{"project a token for another audience", "serviceAccountToken", pod("projected", func(p *corev1.Pod) {
				p.Spec.Volumes = []corev1.Volume{{Name: "vault", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
					Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: "vault", Path: "token"}}},
				}}}}
			})},
			{"create a service-account-token Secret", "type", func() error {
				s := &corev1.Secret{ObjectMeta: copyMeta("default-token"), Type: corev1.SecretTypeServiceAccountToken}
				s.Annotations = map[string]string{corev1.ServiceAccountNameKey: "default"}
				_, err := invited.CoreV1().Secrets(placementNS).Create(ctx, s, metav1.CreateOptions{})
				return err
			}},
			{"create a bootstrap token Secret", "type", func() error {
				s := &corev1.Secret{ObjectMeta: copyMeta("bootstrap-token-abcdef"), Type: corev1.SecretTypeBootstrapToken,
					StringData: map[string]string{"token-id": "abcdef", "token-secret": "0123456789abcdef"}}
				_, err := invited.CoreV1().Secrets(placementNS).Create(ctx, s, metav1.CreateOptions{})
				return err
			}},
		}},
		{"what the identity writes does not change how the target treats it", []struct {
			name, want string
			call       func() error
		}{
			{"create a candidate with a finalizer", "metadata.finalizers", pod("finalizer", func(p *corev1.Pod) { p.Finalizers = []string{"example.com/hold"} })},
			{"add a finalizer to its candidate", "metadata.finalizers", patch(normal.Name, `{"metadata":{"finalizers":["example.com/hold"]}}`)},
			{"create a candidate owned by a ReplicaSet", "metadata.ownerReferences", pod("owned", func(p *corev1.Pod) {
				p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-5d4f", UID: "0b6a3e4e-0000-4000-8000-000000000001", Controller: ptr.To(true)}}
			})},
			{"create a candidate whose anti-affinity keeps the target's own pods off a zone", "spec.affinity", pod("repel", func(p *corev1.Pod) {
				p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
					LabelSelector:     &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: protocol.SourceLabelPrefix + "x", Operator: metav1.LabelSelectorOpDoesNotExist}}},
					NamespaceSelector: &metav1.LabelSelector{}, TopologyKey: "topology.kubernetes.io/zone",
				}}}}
			})},
			{"create a candidate whose affinity follows another source's candidates", "spec.affinity", pod("follow", func(p *corev1.Pod) {
				p.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{Weight: 100, PodAffinityTerm: corev1.PodAffinityTerm{
					LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{protocol.SourceClusterLabel: "other", protocol.SourceLabelPrefix + "app": "web"}}, TopologyKey: "kubernetes.io/hostname",
				}}}}}
			})},
			{"create a candidate a Service selects", "metadata.labels", pod("selected", func(p *corev1.Pod) { p.Labels["app"] = "payments" })},
			{"label its candidate", "metadata.labels", patch(normal.Name, `{"metadata":{"labels":{"app":"payments"}}}`)},
			{"unmark its copy", protocol.CopyLabel, func() error {
				_, err := invited.CoreV1().ConfigMaps(placementNS).Patch(ctx, protocol.CopyName("src", "config"), types.MergePatchType,
					fmt.Appendf(nil, `{"metadata":{"labels":{%q:"false"}}}`, protocol.CopyLabel), metav1.PatchOptions{})
				return err
			}},
			{"create a ConfigMap a controller selects", "metadata.labels", func() error {
				cm := &corev1.ConfigMap{ObjectMeta: copyMeta("selected")}
				cm.Labels["app"] = "payments"
				_, err := invited.CoreV1().ConfigMaps(placementNS).Create(ctx, cm, metav1.CreateOptions{})
				return err
			}},
			{"create a copy that blocks its owner's deletion", "metadata.ownerReferences", func() error {
				cm := &corev1.ConfigMap{ObjectMeta: copyMeta("blocking")}
				cm.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: normal.Name, UID: "0b6a3e4e-0000-4000-8000-000000000002", BlockOwnerDeletion: ptr.To(true)}}
				_, err := invited.CoreV1().ConfigMaps(placementNS).Create(ctx, cm, metav1.CreateOptions{})
				return err
			}},
		}},
		{"the identity's own tokens are bounded", []struct {
			name, want string
			call       func() error
		}{
			{"a token longer than maxTokenLifetime", "spec.expirationSeconds", tokenRequest(7200)},
			{"a token for another audience", "spec.audiences", tokenRequest(600, "vault")},
		}},
	} {
		t.Run(class.name, func(t *testing.T) {
			for _, a := range class.attempts {
				err := a.call()
				switch {
				case !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err):
					t.Errorf("%s: want Forbidden or Invalid, got %v", a.name, err)
				case !strings.Contains(err.Error(), a.want):
					t.Errorf("%s: refused, but the reason does not name %s: %v", a.name, a.want, err)
				default:
					t.Logf("%s: refused: %v", a.name, err)
				}
			}
		})
	}

	// A token within bounds is issued; deleting the invitation leaves it,
	// and the kubeconfig's, useless.
	var minted string
	t.Run("a token within bounds is issued", func(t *testing.T) {
		tr, err := invited.CoreV1().ServiceAccounts(saNS).CreateToken(ctx, saName, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("a token of 600 seconds for this API server is refused: %v", err)
		}
		minted = tr.Status.Token
	})
	t.Run("revoking the invitation leaves no token of the identity that authenticates", func(t *testing.T) {
		if minted == "" {
			t.Skip("no token was minted")
		}
		withMinted := clientWithToken(t, kubeconfig, minted)
		if _, err := withMinted.CoreV1().Pods(placementNS).List(ctx, metav1.ListOptions{}); err != nil {
			t.Fatalf("the minted token does not work before the revocation: %v", err)
		}
		if err := tgt.CRClient().Delete(ctx, &v1alpha1.ClusterSource{ObjectMeta: metav1.ObjectMeta{Name: "src"}}); err != nil {
			t.Fatal(err)
		}
		for name, c := range map[string]kubernetes.Interface{"the kubeconfig's token": invited, "the minted token": withMinted} {
			waitFor(t, 30*time.Second, name+" refused as unauthenticated", func() (bool, string) {
				_, err := c.CoreV1().Pods(placementNS).List(ctx, metav1.ListOptions{})
				return apierrors.IsUnauthorized(err), fmt.Sprintf("listing pods: %v", err)
			})
		}
	})
}

// builtCandidate is the candidate Flotilla's agent builds of an ordinary
// pod for a target that does not keep its sources' labels.
func builtCandidate(t *testing.T) *corev1.Pod {
	t.Helper()
	spec := corev1.PodSpec{Containers: []corev1.Container{{
		Name: "web", Image: "registry.example/web:1",
		Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
	}}}
	raw, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	source := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: "web", Namespace: placementNS, UID: "0b6a3e4e-0000-4000-8000-000000000003",
		Labels:      map[string]string{"app": "web", protocol.ElectLabel: "true"},
		Annotations: map[string]string{protocol.SourceSpecAnnotation: string(raw)},
	}}
	c, err := flotillacandidate.Build(source, "src", "tgt", placementNS, false, false)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// clientWithToken is a client of the kubeconfig's server with another
// bearer token.
func clientWithToken(t *testing.T, kubeconfig []byte, token string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.BearerToken, cfg.BearerTokenFile = token, ""
	return kubernetes.NewForConfigOrDie(cfg)
}
