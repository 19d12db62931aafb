package e2e

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/invitation"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// invited is a ClusterSource as its invited identity holds it: the
// invitation's status, the kubeconfig the target's agent wrote for its
// managed ServiceAccount, and a client with that kubeconfig, which is how
// a source (or an attacker holding its token) talks to the target.
type invited struct {
	status     v1alpha1.SourceStatus
	kubeconfig []byte
	client     kubernetes.Interface
}

// inviteReady creates cs in tgt, whose agent runs, waits until it is Ready and
// returns what its invited identity holds. cs must invite a managed
// ServiceAccount.
func inviteReady(t *testing.T, tgt *sandbox.Cluster, cs *v1alpha1.ClusterSource) invited {
	t.Helper()
	ctx := t.Context()
	cl := tgt.CRClient()
	if err := cl.Create(ctx, cs); err != nil {
		t.Fatal(err)
	}
	var status v1alpha1.SourceStatus
	waitFor(t, 30*time.Second, "the ClusterSource Ready", func() (bool, string) {
		got := &v1alpha1.ClusterSource{}
		if err := cl.Get(ctx, client.ObjectKeyFromObject(cs), got); err != nil {
			return false, err.Error()
		}
		status = got.Status
		return meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.SourceReady), fmt.Sprintf("%+v", got.Status.Conditions)
	})
	secret, err := tgt.Client().CoreV1().Secrets(sandbox.AgentNamespace).Get(ctx, status.KubeconfigSecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kc := secret.Data[invitation.KubeconfigKey]
	return invited{status: status, kubeconfig: kc, client: clientFromKubeconfig(t, kc)}
}

// agentsOnSourceAndTarget starts a source cluster "src" (no Flotilla scheduler, the
// namespace placementNS enabled) and a target "tgt" with nodes, each with
// its release's agent: the pair most tests of one invitation start from.
func agentsOnSourceAndTarget(t *testing.T, nodes ...sandbox.NodeSpec) (src, tgt *sandbox.Cluster) {
	t.Helper()
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{
		{Name: "src", WithoutScheduler: true},
		{Name: "tgt", Nodes: nodes},
	}})
	ctx := t.Context()
	src, tgt = s.Cluster("src"), s.Cluster("tgt")
	createNamespace(t, src.Client(), placementNS)
	if _, err := sandbox.StartAgent(ctx, tgt, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := sandbox.StartAgent(ctx, src, nil); err != nil {
		t.Fatal(err)
	}
	return src, tgt
}
