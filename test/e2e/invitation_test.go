package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/invitation"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/reservation"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// TestInvitation invites a source into a target through a ClusterSource,
// checks the least privilege the invited identity gets there with its own
// kubeconfig, places pods through the invitation, renews the token, and
// revokes it.
func TestInvitation(t *testing.T) {
	t.Parallel()
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{
		{Name: "src", WithoutScheduler: true},
		{Name: "tgt", Nodes: []sandbox.NodeSpec{{CPU: "8"}}},
	}})
	ctx := t.Context()
	src, tgt := s.Cluster("src"), s.Cluster("tgt")
	tgtAdmin := tgt.Client()
	createNamespace(t, tgtAdmin, placementNS)
	for _, ns := range []string{placementNS, "fresh", "private"} {
		createNamespace(t, src.Client(), ns)
	}
	// The target's agent applies invitations; its tokens live 10 minutes,
	// the shortest the API server issues.
	tgtAgent, err := sandbox.StartAgent(ctx, tgt, nil, "agent.invitationTokenTTL=10m")
	if err != nil {
		t.Fatal(err)
	}
	tgtCR := tgt.CRClient()
	cs := &v1alpha1.ClusterSource{ObjectMeta: metav1.ObjectMeta{Name: "src"}}
	cs.Spec.ClusterName = "src"
	cs.Spec.Identity.ManagedServiceAccount = &v1alpha1.ManagedServiceAccount{}
	cs.Spec.Namespaces = []string{placementNS, "fresh"}
	cs.Spec.CreateNamespaces = true
	if err := tgtCR.Create(ctx, cs); err != nil {
		t.Fatal(err)
	}
	var status v1alpha1.SourceStatus
	waitFor(t, 30*time.Second, "the ClusterSource Ready", func() (bool, string) {
		got := &v1alpha1.ClusterSource{}
		if err := tgtCR.Get(ctx, client.ObjectKey{Name: "src"}, got); err != nil {
			return false, err.Error()
		}
		status = got.Status
		return meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.SourceReady), fmt.Sprintf("%+v", got.Status.Conditions)
	})
	if _, err := tgtAdmin.CoreV1().Namespaces().Get(ctx, "fresh", metav1.GetOptions{}); err != nil {
		t.Fatalf("the invited namespace was not created: %v", err)
	}
	saNS := sandbox.AgentNamespace
	secret, err := tgtAdmin.CoreV1().Secrets(saNS).Get(ctx, status.KubeconfigSecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	invited := clientFromKubeconfig(t, secret.Data[invitation.KubeconfigKey])

	t.Run("the invited identity can do what the protocol needs and nothing else", func(t *testing.T) {
		other := candidatePod("other-source", "elsewhere")
		if _, err := tgtAdmin.CoreV1().Pods(placementNS).Create(ctx, other, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		refused := []struct {
			name string
			call func() error
		}{
			{"read Secrets of another namespace", func() error {
				_, err := invited.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
				return err
			}},
			{"read Secrets of an invited namespace", func() error {
				_, err := invited.CoreV1().Secrets(placementNS).List(ctx, metav1.ListOptions{})
				return err
			}},
			{"read Pods outside the invited namespaces", func() error {
				_, err := invited.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
				return err
			}},
			{"list nodes", func() error {
				_, err := invited.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
				return err
			}},
			{"create a pod with another schedulerName", func() error {
				p := candidatePod("plain", "src")
				p.Spec.SchedulerName = "default-scheduler"
				_, err := invited.CoreV1().Pods(placementNS).Create(ctx, p, metav1.CreateOptions{})
				return err
			}},
			{"create a privileged pod", func() error {
				p := candidatePod("privileged", "src")
				p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
				_, err := invited.CoreV1().Pods(placementNS).Create(ctx, p, metav1.CreateOptions{})
				return err
			}},
			{"create a hostPath pod", func() error {
				p := candidatePod("hostpath", "src")
				p.Spec.Volumes = []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
				_, err := invited.CoreV1().Pods(placementNS).Create(ctx, p, metav1.CreateOptions{})
				return err
			}},
			{"create a hostNetwork pod", func() error {
				p := candidatePod("hostnet", "src")
				p.Spec.HostNetwork = true
				_, err := invited.CoreV1().Pods(placementNS).Create(ctx, p, metav1.CreateOptions{})
				return err
			}},
			{"create a pod labelled as another source's candidate", func() error {
				_, err := invited.CoreV1().Pods(placementNS).Create(ctx, candidatePod("impostor", "elsewhere"), metav1.CreateOptions{})
				return err
			}},
			{"patch another source's candidate", func() error {
				_, err := invited.CoreV1().Pods(placementNS).Patch(ctx, other.Name, types.MergePatchType,
					[]byte(`{"metadata":{"annotations":{"multicluster.flotilla.dev/allowed":"x/1/y"}}}`), metav1.PatchOptions{})
				return err
			}},
			{"delete another source's candidate", func() error {
				return invited.CoreV1().Pods(placementNS).Delete(ctx, other.Name, metav1.DeleteOptions{})
			}},
			{"renew another ServiceAccount's token", func() error {
				_, err := invited.CoreV1().ServiceAccounts(saNS).CreateToken(ctx, "default", &authnTokenRequest, metav1.CreateOptions{})
				return err
			}},
		}
		for _, tc := range refused {
			err := tc.call()
			if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
				t.Errorf("%s: want Forbidden or Invalid, got %v", tc.name, err)
			} else {
				t.Logf("%s: refused: %v", tc.name, err)
			}
		}
		// What the protocol needs.
		own, err := invited.CoreV1().Pods(placementNS).Create(ctx, candidatePod("own", "src"), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating its own candidate: %v", err)
		}
		if _, err := invited.CoreV1().Pods(placementNS).Patch(ctx, own.Name, types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"multicluster.flotilla.dev/allowed":"x/1/y"}}}`), metav1.PatchOptions{}); err != nil {
			t.Fatalf("annotating its own candidate: %v", err)
		}
		if _, err := invited.CoreV1().Pods(placementNS).List(ctx, metav1.ListOptions{}); err != nil {
			t.Fatalf("listing pods of an invited namespace: %v", err)
		}
		if err := invited.CoreV1().Pods(placementNS).Delete(ctx, own.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("deleting its own candidate: %v", err)
		}
		sa := strings.TrimPrefix(status.ServiceAccount, saNS+"/")
		if _, err := invited.CoreV1().ServiceAccounts(saNS).CreateToken(ctx, sa, &authnTokenRequest, metav1.CreateOptions{}); err != nil {
			t.Fatalf("renewing its own token: %v", err)
		}
		if err := tgtAdmin.CoreV1().Pods(placementNS).Delete(ctx, other.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	})

	// The source: its release, the Secret copied over into the release's
	// namespace, and a ClusterTarget naming it.
	if _, err := sandbox.StartAgent(ctx, src, nil, "agent.tokenRenewAfter=0.02"); err != nil {
		t.Fatal(err)
	}
	srcCR := src.CRClient()
	copied := sandbox.KubeconfigSecret("tgt-invitation", nil)
	copied.Data = secret.Data
	if err := srcCR.Create(ctx, copied); err != nil {
		t.Fatal(err)
	}
	createClusterTarget(t, srcCR, "tgt", copied.Name)
	if err := src.WaitTarget(ctx, client.ObjectKey{Name: "tgt"}, 30*time.Second, func(st *v1alpha1.TargetStatus) bool {
		return meta.IsStatusConditionTrue(st.Conditions, v1alpha1.TargetReady) && strings.Join(st.Namespaces, ",") == "fresh,"+placementNS
	}); err != nil {
		t.Fatal(err)
	}
	srcClient := src.Client()

	t.Run("pods of invited namespaces run there, one of a namespace not invited is told why", func(t *testing.T) {
		for _, ns := range []string{placementNS, "fresh"} {
			if _, err := srcClient.CoreV1().Pods(ns).Create(ctx, optedInPod("web", "1"), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := srcClient.CoreV1().Pods("private").Create(ctx, optedInPod("web", "1"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, ns := range []string{placementNS, "fresh"} {
			waitPod(t, srcClient, ns, "web", "running in tgt", func(p *corev1.Pod) bool {
				return p.Spec.NodeName == "flotilla-tgt" && p.Status.Phase == corev1.PodRunning
			})
		}
		waitPod(t, srcClient, "private", "web", "PodScheduled=False, Unschedulable, naming the target", func(p *corev1.Pod) bool {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
					return strings.Contains(c.Message, "target tgt") && strings.Contains(c.Message, "namespace private")
				}
			}
			return false
		})
		waitFor(t, 30*time.Second, "a NotInvited event", func() (bool, string) {
			evs, err := srcClient.EventsV1().Events("private").List(ctx, metav1.ListOptions{FieldSelector: "reason=" + reservation.ReasonNotInvited})
			if err != nil {
				return false, err.Error()
			}
			return len(evs.Items) > 0, fmt.Sprintf("%d events", len(evs.Items))
		})
		if pods, err := tgtAdmin.CoreV1().Pods("private").List(ctx, metav1.ListOptions{}); err != nil || len(pods.Items) != 0 {
			t.Fatalf("the target got pods of a namespace it did not invite: %v %v", pods, err)
		}
	})

	t.Run("the summary tells the source what the target holds; an absurd one is not believed", func(t *testing.T) {
		sum := &v1alpha1.ClusterSummary{}
		waitFor(t, 30*time.Second, "the ClusterSummary", func() (bool, string) {
			if err := tgtCR.Get(ctx, client.ObjectKey{Name: status.Summary}, sum); err != nil {
				return false, err.Error()
			}
			st := sum.Status
			return st.Nodes == 1 && st.Allocatable.Cpu().Cmp(resource.MustParse("8")) == 0 && st.Invitation == "src" &&
					strings.Join(st.Namespaces, ",") == "fresh,"+placementNS && st.Free.Cpu().Cmp(resource.MustParse("6")) == 0,
				fmt.Sprintf("%+v", st)
		})
		// With the target's agent stopped, nobody repairs the summary.
		if err := tgtAgent.Stop(); err != nil {
			t.Fatal(err)
		}
		sum.Status.Nodes = -5
		sum.Status.Free = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1e12")}
		if err := tgtCR.Update(ctx, sum); err != nil {
			t.Fatal(err)
		}
		if err := src.WaitTarget(ctx, client.ObjectKey{Name: "tgt"}, 15*time.Second, func(st *v1alpha1.TargetStatus) bool {
			c := meta.FindStatusCondition(st.Conditions, v1alpha1.TargetReady)
			return c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.ReasonSummaryInvalid && strings.Contains(c.Message, "nodes")
		}); err != nil {
			t.Fatal(err)
		}
		if err := tgtAgent.Start(); err != nil {
			t.Fatal(err)
		}
		if err := tgtAgent.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		if err := src.WaitTarget(ctx, client.ObjectKey{Name: "tgt"}, 30*time.Second, func(st *v1alpha1.TargetStatus) bool {
			return meta.IsStatusConditionTrue(st.Conditions, v1alpha1.TargetReady)
		}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a namespaced Source invites into its namespace only, and deleting it takes everything back", func(t *testing.T) {
		createNamespace(t, tgtAdmin, "team")
		src2 := &v1alpha1.Source{ObjectMeta: metav1.ObjectMeta{Name: "src2", Namespace: "team"}}
		src2.Spec.ClusterName = "src2"
		src2.Spec.Identity.ManagedServiceAccount = &v1alpha1.ManagedServiceAccount{}
		if err := tgtCR.Create(ctx, src2); err != nil {
			t.Fatal(err)
		}
		var st2 v1alpha1.SourceStatus
		waitFor(t, 30*time.Second, "the Source Ready", func() (bool, string) {
			got := &v1alpha1.Source{}
			if err := tgtCR.Get(ctx, client.ObjectKeyFromObject(src2), got); err != nil {
				return false, err.Error()
			}
			st2 = got.Status
			return meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.SourceReady), fmt.Sprintf("%+v", got.Status.Conditions)
		})
		kc, err := tgtAdmin.CoreV1().Secrets("team").Get(ctx, st2.KubeconfigSecret, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		team := clientFromKubeconfig(t, kc.Data[invitation.KubeconfigKey])
		if _, err := team.CoreV1().Pods(placementNS).Create(ctx, candidatePod("x", "src2"), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
			t.Fatalf("a Source of namespace team let its source into %s: %v", placementNS, err)
		}
		waiting, err := team.CoreV1().Pods("team").Create(ctx, candidatePod("waiting", "src2"), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating a candidate in the invited namespace: %v", err)
		}
		if err := tgtCR.Delete(ctx, src2); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, "access, identity and the waiting candidate gone", func() (bool, string) {
			if _, err := team.CoreV1().Pods("team").List(ctx, metav1.ListOptions{}); !apierrors.IsUnauthorized(err) && !apierrors.IsForbidden(err) {
				return false, fmt.Sprintf("still lists pods: %v", err)
			}
			if _, err := tgtAdmin.CoreV1().Pods("team").Get(ctx, waiting.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, fmt.Sprintf("waiting candidate: %v", err)
			}
			rbs, err := tgtAdmin.RbacV1().RoleBindings("team").List(ctx, metav1.ListOptions{LabelSelector: invitation.InvitationLabel})
			if err != nil || len(rbs.Items) != 0 {
				return false, fmt.Sprintf("role bindings left: %v %v", rbs, err)
			}
			_, err = tgtAdmin.CoreV1().ServiceAccounts("team").Get(ctx, strings.TrimPrefix(st2.ServiceAccount, "team/"), metav1.GetOptions{})
			return apierrors.IsNotFound(err), fmt.Sprintf("ServiceAccount: %v", err)
		})
	})

	t.Run("the token is renewed and placement goes on", func(t *testing.T) {
		first := tokenOf(t, secret.Data[invitation.KubeconfigKey])
		waitFor(t, 60*time.Second, "a renewed token in the source's Secret", func() (bool, string) {
			got, err := srcClient.CoreV1().Secrets(sandbox.AgentNamespace).Get(ctx, copied.Name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return tokenOf(t, got.Data[invitation.KubeconfigKey]) != first, "same token"
		})
		if _, err := srcClient.CoreV1().Pods(placementNS).Create(ctx, optedInPod("after-renewal", "1"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitPod(t, srcClient, placementNS, "after-renewal", "running in tgt", func(p *corev1.Pod) bool {
			return p.Spec.NodeName == "flotilla-tgt" && p.Status.Phase == corev1.PodRunning
		})
	})

	t.Run("revoking the invitation deletes waiting candidates and stops access within seconds", func(t *testing.T) {
		if _, err := srcClient.CoreV1().Pods(placementNS).Create(ctx, optedInPod("toobig", "64"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, "the waiting candidate in tgt", func() (bool, string) {
			n := countCandidates(t, tgtAdmin, "toobig")
			return n == 1, fmt.Sprintf("%d candidates", n)
		})
		if err := tgtCR.Delete(ctx, &v1alpha1.ClusterSource{ObjectMeta: metav1.ObjectMeta{Name: "src"}}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		waitFor(t, 30*time.Second, "the invitation's access gone", func() (bool, string) {
			_, err := invited.CoreV1().Pods(placementNS).List(ctx, metav1.ListOptions{})
			return apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err), fmt.Sprintf("listing pods: %v", err)
		})
		t.Logf("access revoked after %s", time.Since(start).Round(time.Millisecond))
		waitFor(t, 30*time.Second, "the waiting candidate deleted", func() (bool, string) {
			n := countCandidates(t, tgtAdmin, "toobig")
			return n == 0, fmt.Sprintf("%d candidates", n)
		})
		if err := src.WaitTarget(ctx, client.ObjectKey{Name: "tgt"}, 15*time.Second, func(st *v1alpha1.TargetStatus) bool {
			c := meta.FindStatusCondition(st.Conditions, v1alpha1.TargetReady)
			return c != nil && c.Status == metav1.ConditionFalse
		}); err != nil {
			t.Fatal(err)
		}
	})
}

var authnTokenRequest = authenticationv1TokenRequest()

func candidatePod(name, sourceCluster string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			protocol.CandidateLabel: "true", protocol.SourceClusterLabel: sourceCluster,
		}},
		Spec: corev1.PodSpec{
			SchedulerName:                protocol.SchedulerName,
			AutomountServiceAccountToken: ptr.To(false),
			// A toleration-free pod no scheduler binds: the flotilla
			// profile waits for an allowance that never comes.
			Containers: []corev1.Container{{Name: "c", Image: "registry.example/app:1"}},
		},
	}
}

func clientFromKubeconfig(t *testing.T, data []byte) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	return kubernetes.NewForConfigOrDie(cfg)
}

func tokenOf(t *testing.T, kubeconfig []byte) string {
	t.Helper()
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.BearerToken
}

func waitPod(t *testing.T, c kubernetes.Interface, ns, name, what string, ok func(*corev1.Pod) bool) {
	t.Helper()
	waitFor(t, 60*time.Second, ns+"/"+name+" "+what, func() (bool, string) {
		p, err := c.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return ok(p), fmt.Sprintf("node %q phase %s conditions %+v", p.Spec.NodeName, p.Status.Phase, p.Status.Conditions)
	})
}

func authenticationv1TokenRequest() authenticationv1.TokenRequest {
	return authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}
}
