package sandbox

import (
	"context"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// AgentNamespace is the agent's namespace, the release's: where it keeps
// its Secrets and looks for a ClusterTarget's Secret.
const AgentNamespace = ReleaseNamespace

// AddTarget makes t a ClusterTarget of c named t.Name: self when t is c,
// otherwise through a Secret holding t's admin kubeconfig.
func (c *Cluster) AddTarget(ctx context.Context, t *Cluster) error {
	if t != c {
		data, err := os.ReadFile(t.Kubeconfig)
		if err != nil {
			return err
		}
		return c.joinWithSecret(ctx, t.Name, map[string][]byte{"kubeconfig": data})
	}
	ct := &v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: t.Name}}
	ct.Spec.Self = true
	if err := c.CRClient().Create(ctx, ct); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ClusterTarget %s: %w", t.Name, err)
	}
	return nil
}

// joinWithSecret stores a target's kubeconfig Secret data (the kubeconfig,
// and the summary key of an invitation) as Secret flotilla-target-<target>
// of the agent's namespace, and makes a ClusterTarget of that name naming
// it. Either may exist already.
func (c *Cluster) joinWithSecret(ctx context.Context, target string, data map[string][]byte) error {
	cl := c.CRClient()
	secret := KubeconfigSecret("flotilla-target-"+target, nil)
	secret.Data = data
	if err := cl.Create(ctx, secret); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the kubeconfig Secret of target %s in %s: %w", target, c.Name, err)
	}
	ct := &v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: target}}
	ct.Spec.KubeconfigSecretRef = &v1alpha1.SecretKeyRef{LocalSecretKeyRef: v1alpha1.LocalSecretKeyRef{Name: secret.Name}}
	if err := cl.Create(ctx, ct); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ClusterTarget %s in %s: %w", target, c.Name, err)
	}
	return nil
}

// KubeconfigSecret is a Secret of the agent's namespace holding a kubeconfig.
func KubeconfigSecret(name string, kubeconfig []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: AgentNamespace},
		Data:       map[string][]byte{"kubeconfig": kubeconfig},
	}
}

// WaitTargetReady waits until ClusterTarget name reports Ready.
func (c *Cluster) WaitTargetReady(ctx context.Context, name string, timeout time.Duration) error {
	return c.WaitTarget(ctx, client.ObjectKey{Name: name}, timeout, func(s *v1alpha1.TargetStatus) bool {
		return meta.IsStatusConditionTrue(s.Conditions, v1alpha1.TargetReady)
	})
}

// WaitTarget waits until the status of a Target (key with a namespace) or
// ClusterTarget (key without) satisfies ok.
func (c *Cluster) WaitTarget(ctx context.Context, key client.ObjectKey, timeout time.Duration, ok func(*v1alpha1.TargetStatus) bool) error {
	cl := c.CRClient()
	var last v1alpha1.TargetStatus
	err := poll(ctx, timeout, func() (bool, error) {
		var status *v1alpha1.TargetStatus
		if key.Namespace == "" {
			ct := &v1alpha1.ClusterTarget{}
			if err := cl.Get(ctx, key, ct); err != nil {
				return false, nil
			}
			status = &ct.Status
		} else {
			t := &v1alpha1.Target{}
			if err := cl.Get(ctx, key, t); err != nil {
				return false, nil
			}
			status = &t.Status
		}
		last = *status
		return ok(status), nil
	})
	if err != nil {
		return fmt.Errorf("target %s in %s: condition not met (conditions %+v): %w", key, c.Name, last.Conditions, err)
	}
	return nil
}

// Invite makes target t invite c the way an operator would, through CRs
// only: a ClusterSource in t (a managed ServiceAccount, the given
// namespaces, created there if missing), whose kubeconfig Secret is copied
// into c and named by a ClusterTarget of c called t.Name. t's agent must be
// running; c's agent then reaches t with the invited identity alone.
func (c *Cluster) Invite(ctx context.Context, t *Cluster, namespaces ...string) error {
	tcl := t.CRClient()
	cs := &v1alpha1.ClusterSource{ObjectMeta: metav1.ObjectMeta{Name: c.Name}}
	cs.Spec.ClusterName = c.Name
	cs.Spec.Identity.ManagedServiceAccount = &v1alpha1.ManagedServiceAccount{}
	cs.Spec.Namespaces = namespaces
	cs.Spec.CreateNamespaces = true
	if err := tcl.Create(ctx, cs); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ClusterSource %s in %s: %w", c.Name, t.Name, err)
	}
	var secretName string
	err := poll(ctx, 60*time.Second, func() (bool, error) {
		got := &v1alpha1.ClusterSource{}
		if err := tcl.Get(ctx, client.ObjectKeyFromObject(cs), got); err != nil {
			return false, nil
		}
		secretName = got.Status.KubeconfigSecret
		return meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.SourceReady) && secretName != "", nil
	})
	if err != nil {
		return fmt.Errorf("ClusterSource %s in %s not Ready: %w", c.Name, t.Name, err)
	}
	secret := &corev1.Secret{}
	if err := tcl.Get(ctx, client.ObjectKey{Namespace: AgentNamespace, Name: secretName}, secret); err != nil {
		return err
	}
	return c.joinWithSecret(ctx, t.Name, secret.Data)
}

// SetLocalFirst turns on localFirst on c's self ClusterTarget name and
// waits until the webhook keeps an opted-in pod of namespace in c (a
// dry-run create of a pod that asks for nothing): the agent starts
// watching c's nodes and pods at the first pod it admits with localFirst
// on, and sends pods through the targets until it has listed them.
func (c *Cluster) SetLocalFirst(ctx context.Context, name, namespace string) error {
	cl := c.CRClient()
	// The agent writes the ClusterTarget's status meanwhile: a conflict
	// reads it again.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ct := &v1alpha1.ClusterTarget{}
		if err := cl.Get(ctx, client.ObjectKey{Name: name}, ct); err != nil {
			return fmt.Errorf("reading ClusterTarget %s of %s: %w", name, c.Name, err)
		}
		if ct.Spec.LocalFirst {
			return nil
		}
		ct.Spec.LocalFirst = true
		return cl.Update(ctx, ct)
	})
	if err != nil {
		return fmt.Errorf("setting localFirst on ClusterTarget %s of %s: %w", name, c.Name, err)
	}
	probe := optedInProbe("local-probe-")
	var last string
	err = poll(ctx, 60*time.Second, func() (bool, error) {
		got, err := c.Client().CoreV1().Pods(namespace).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = "schedulerName " + got.Spec.SchedulerName
		return got.Labels[protocol.LocalLabel] == "true", nil
	})
	if err != nil {
		return fmt.Errorf("no opted-in pod kept in %s with localFirst (%s): %w", c.Name, last, err)
	}
	return nil
}

// JoinThroughSource lets namespace of c reach t as that namespace's owners
// would, with no cluster-wide object in either cluster: a Source of the
// namespace in t invites c with a managed ServiceAccount, and a Target of
// the namespace in c, named t.Name, names a copy of the invitation's
// kubeconfig Secret (both its keys, the kubeconfig and the summary's
// name). Both agents must run, and the namespace must be in t. It returns
// the Target's virtual node once the Target is Ready with it.
func (c *Cluster) JoinThroughSource(ctx context.Context, t *Cluster, namespace string, timeout time.Duration) (string, error) {
	tcl := t.CRClient()
	inv := &v1alpha1.Source{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: c.Name}}
	inv.Spec.ClusterName = c.Name
	inv.Spec.Identity.ManagedServiceAccount = &v1alpha1.ManagedServiceAccount{}
	if err := tcl.Create(ctx, inv); err != nil {
		return "", fmt.Errorf("creating Source %s/%s in %s: %w", namespace, c.Name, t.Name, err)
	}
	var status v1alpha1.SourceStatus
	err := poll(ctx, timeout, func() (bool, error) {
		got := &v1alpha1.Source{}
		if err := tcl.Get(ctx, client.ObjectKeyFromObject(inv), got); err != nil {
			return false, nil
		}
		status = got.Status
		return meta.IsStatusConditionTrue(status.Conditions, v1alpha1.SourceReady) && status.KubeconfigSecret != "", nil
	})
	if err != nil {
		return "", fmt.Errorf("the Source of %s in %s never Ready with a kubeconfig Secret (status %+v): %w", c.Name, t.Name, status, err)
	}
	secret, err := t.Client().CoreV1().Secrets(namespace).Get(ctx, status.KubeconfigSecret, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	copied := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "flotilla-target-" + t.Name}, Data: secret.Data}
	if _, err := c.Client().CoreV1().Secrets(namespace).Create(ctx, copied, metav1.CreateOptions{}); err != nil {
		return "", err
	}
	target := &v1alpha1.Target{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: t.Name}}
	target.Spec.KubeconfigSecretRef = &v1alpha1.LocalSecretKeyRef{Name: copied.Name}
	if err := c.CRClient().Create(ctx, target); err != nil {
		return "", fmt.Errorf("creating Target %s/%s in %s: %w", namespace, t.Name, c.Name, err)
	}
	node := protocol.VirtualNodeName(namespace, t.Name)
	if err := c.WaitTarget(ctx, client.ObjectKeyFromObject(target), timeout, func(st *v1alpha1.TargetStatus) bool {
		return meta.IsStatusConditionTrue(st.Conditions, v1alpha1.TargetReady) && st.VirtualNode == node
	}); err != nil {
		return "", err
	}
	return node, nil
}
