package e2e

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/invitation"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// TestChart installs charts/flotilla with the real helm and runs its agent
// and scheduler with the chart's arguments, configuration and
// ServiceAccounts: RBAC the chart forgot fails here.
func TestChart(t *testing.T) {
	t.Parallel()
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{
		// The release's scheduler takes the candidates: the cluster's own
		// scheduler serves only default-scheduler.
		{Name: "c1", Nodes: []sandbox.NodeSpec{{CPU: "4"}}},
	}})
	ctx := t.Context()
	c := s.Cluster("c1")
	client := c.Client()
	helm := filepath.Join(c.BinDir(), "helm")

	t.Run("lint and a server-side dry run", func(t *testing.T) {
		if out, err := exec.CommandContext(ctx, helm, "lint", "--strict", sandbox.ChartDir(), "--set", "clusterName=c1").CombinedOutput(); err != nil {
			t.Fatalf("helm lint: %v\n%s", err, out)
		}
		if _, err := c.Helm(ctx, "install", "dry", sandbox.ChartDir(), "-n", sandbox.ReleaseNamespace, "--create-namespace",
			"--dry-run=server", "--set", "clusterName=c1"); err != nil {
			t.Fatal(err)
		}
	})

	release, err := c.InstallRelease(ctx, sandbox.ReleaseOptions{Scheduler: true})
	if err != nil || release.Scheduler == nil || !release.Scheduler.Running() {
		t.Fatalf("the release's scheduler does not run: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	createNamespace(t, client, placementNS)
	if err := c.AddTarget(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitTargetReady(ctx, "c1", 60*time.Second); err != nil {
		t.Fatal(err)
	}

	t.Run("a pod is placed by the chart's agent and scheduler under their own ServiceAccounts", func(t *testing.T) {
		if _, err := client.CoreV1().Pods(placementNS).Create(ctx, optedInPod("charted", "1"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitPod(t, client, placementNS, "charted", "Running on flotilla-c1", func(p *corev1.Pod) bool {
			return p.Spec.NodeName == "flotilla-c1" && p.Status.Phase == corev1.PodRunning
		})
	})

	t.Run("the agent's and the scheduler's Lease renewals go to the leader-election priority level", func(t *testing.T) {
		// Left with the ServiceAccounts' catch-all (workload-low, one flow
		// per user), a renewal queued behind the agent's own requests in a
		// burst, timed out, and the agent lost its lease and stopped.
		l, err := client.FlowcontrolV1().FlowSchemas().List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release.Name})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Items) != 1 || l.Items[0].Spec.PriorityLevelConfiguration.Name != "leader-election" {
			t.Fatalf("the release's FlowSchemas: %d, want one for the leader-election priority level", len(l.Items))
		}
		series := fmt.Sprintf(`apiserver_flowcontrol_dispatched_requests_total{flow_schema=%q,priority_level="leader-election"}`, l.Items[0].Name)
		waitFor(t, time.Minute, "a Lease request dispatched under the release's FlowSchema", func() (bool, string) {
			raw, err := client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
			if err != nil {
				return false, err.Error()
			}
			for _, line := range strings.Split(string(raw), "\n") {
				if strings.HasPrefix(line, series+" ") && !strings.HasSuffix(line, " 0") {
					return true, ""
				}
			}
			return false, "no " + series
		})
	})

	t.Run("with the agent down, other pods run and opted-in pods are refused naming Flotilla", func(t *testing.T) {
		if err := release.Agent.Stop(); err != nil {
			t.Fatal(err)
		}
		plain := optedInPod("plain", "100m")
		delete(plain.Labels, protocol.ElectLabel)
		if _, err := client.CoreV1().Pods(placementNS).Create(ctx, plain, metav1.CreateOptions{}); err != nil {
			t.Fatalf("a pod that is not opted in was refused while the agent is down: %v", err)
		}
		waitPod(t, client, placementNS, "plain", "scheduled by the cluster's scheduler", func(p *corev1.Pod) bool {
			return p.Spec.NodeName != "" && !strings.HasPrefix(p.Spec.NodeName, "flotilla-")
		})
		_, err := client.CoreV1().Pods(placementNS).Create(ctx, optedInPod("refused", "100m"), metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), "pods.multicluster.flotilla.dev") {
			t.Fatalf("an opted-in pod while the agent is down: want a refusal naming the webhook, got %v", err)
		}
		t.Logf("refused: %v", err)
		if err := release.Agent.Start(); err != nil {
			t.Fatal(err)
		}
		if err := release.Agent.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("an upgrade keeps the webhook's CA: opted-in pods are admitted throughout", func(t *testing.T) {
		before := caBundleOf(t, client)
		if _, err := c.Helm(ctx, "upgrade", release.Name, sandbox.ChartDir(), "-n", sandbox.ReleaseNamespace, "--reuse-values", "--set", "agent.workers=32"); err != nil {
			t.Fatal(err)
		}
		if after := caBundleOf(t, client); after != before {
			t.Fatalf("helm upgrade changed the webhook's caBundle (%d bytes → %d)", len(before), len(after))
		}
		if ok, msg := admitted(ctx, client, placementNS); !ok {
			t.Fatalf("after the upgrade: %s", msg)
		}
	})

	t.Run("helm uninstall leaves nothing of Flotilla behind, and no webhook blocks pods", func(t *testing.T) {
		// Something of each kind the agent makes: an invitation (RBAC,
		// policy, ServiceAccount, summary) besides the target and its node.
		cs := &v1alpha1.ClusterSource{ObjectMeta: metav1.ObjectMeta{Name: "other"}}
		cs.Spec.ClusterName = "other"
		cs.Spec.Identity.ManagedServiceAccount = &v1alpha1.ManagedServiceAccount{}
		cs.Spec.Namespaces = []string{placementNS}
		cl := c.CRClient()
		if err := cl.Create(ctx, cs); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, "the ClusterSource Ready", func() (bool, string) {
			got := &v1alpha1.ClusterSource{}
			if err := cl.Get(ctx, crclient.ObjectKeyFromObject(cs), got); err != nil {
				return false, err.Error()
			}
			return meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.SourceReady), fmt.Sprintf("%+v", got.Status.Conditions)
		})
		if err := release.Uninstall(ctx); err != nil {
			t.Fatal(err)
		}
		checkNothingLeft(t, c)
		if _, err := c.Client().CoreV1().Pods(placementNS).Create(ctx, optedInPod("after-uninstall", "100m"), metav1.CreateOptions{}); err != nil {
			t.Fatalf("an opted-in pod after the uninstall: %v", err)
		}
		// The CRs can be deleted without the agent.
		for _, o := range []crclient.Object{cs, &v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: "c1"}}} {
			if err := cl.Delete(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, 30*time.Second, "the CRs gone", func() (bool, string) {
			err1 := cl.Get(ctx, crclient.ObjectKeyFromObject(cs), &v1alpha1.ClusterSource{})
			err2 := cl.Get(ctx, crclient.ObjectKey{Name: "c1"}, &v1alpha1.ClusterTarget{})
			return apierrors.IsNotFound(err1) && apierrors.IsNotFound(err2), fmt.Sprintf("%v, %v", err1, err2)
		})
	})
}

// checkNothingLeft lists what an uninstall must not leave behind.
func checkNothingLeft(t *testing.T, c *sandbox.Cluster) {
	t.Helper()
	ctx := t.Context()
	client := c.Client()
	cl := c.CRClient()
	var left []string
	mwcs, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mwcs.Items {
		left = append(left, "MutatingWebhookConfiguration "+m.Name)
	}
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "type=virtual-kubelet"})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		left = append(left, "virtual node "+n.Name)
	}
	leases, err := client.CoordinationV1().Leases(sandbox.ReleaseNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leases.Items {
		left = append(left, "Lease "+l.Name)
	}
	vaps, err := client.AdmissionregistrationV1().ValidatingAdmissionPolicies().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vaps.Items {
		left = append(left, "ValidatingAdmissionPolicy "+v.Name)
	}
	roles, err := client.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{LabelSelector: invitation.InvitationLabel})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range roles.Items {
		left = append(left, "ClusterRole "+r.Name)
	}
	summaries := &v1alpha1.ClusterSummaryList{}
	if err := cl.List(ctx, summaries); err != nil {
		t.Fatal(err)
	}
	for _, s := range summaries.Items {
		left = append(left, "ClusterSummary "+s.Name)
	}
	for _, list := range []crclient.ObjectList{&v1alpha1.ClusterTargetList{}, &v1alpha1.TargetList{}, &v1alpha1.ClusterSourceList{}, &v1alpha1.SourceList{}} {
		if err := cl.List(ctx, list); err != nil {
			t.Fatal(err)
		}
		_ = meta.EachListItem(list, func(o runtime.Object) error {
			obj := o.(crclient.Object)
			if len(obj.GetFinalizers()) > 0 {
				left = append(left, fmt.Sprintf("%T %s with finalizers %v", obj, obj.GetName(), obj.GetFinalizers()))
			}
			return nil
		})
	}
	if len(left) > 0 {
		t.Fatalf("helm uninstall left: %s", strings.Join(left, "; "))
	}
}

func caBundleOf(t *testing.T, client kubernetes.Interface) string {
	t.Helper()
	var ca string
	waitFor(t, 30*time.Second, "a caBundle in the webhook configuration", func() (bool, string) {
		mwc, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(t.Context(), "flotilla", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		ca = string(mwc.Webhooks[0].ClientConfig.CABundle)
		return ca != "", fmt.Sprintf("%d bytes", len(ca))
	})
	return ca
}
