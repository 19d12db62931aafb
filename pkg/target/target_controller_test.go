package target

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	clientfeatures "k8s.io/client-go/features"
	clientfeaturestesting "k8s.io/client-go/features/testing"
	"k8s.io/client-go/kubernetes/fake"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/invitation"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/vnode"
)

// The targets controller driven one Reconcile at a time: the source
// cluster is a controller-runtime fake client (Targets, Secrets) and a
// client-go fake clientset (virtual nodes); the target cluster is another
// fake clientset, which the controller dials instead of a server; a
// virtual node is only recorded as started. Time is the test's clock.

const (
	remoteServer = "https://east.example:6443"
	// invitedSA is the source's ServiceAccount in the target, the subject
	// of the kubeconfig's token.
	invitedSA = "system:serviceaccount:tenants:flotilla-source-home"
	// tokenLife is the lifetime of the kubeconfig's tokens.
	tokenLife = time.Hour
)

type targetHarness struct {
	t      *testing.T
	ctx    context.Context
	c      *Controller
	client client.Client
	// source is the source cluster's API (virtual nodes); remote the
	// target's.
	source, remote *fake.Clientset
	clock          *clocktesting.FakeClock
	recorder       *events.FakeRecorder
	// nodes receives the name of each virtual node started.
	nodes chan string
	// issued counts the tokens the target issued.
	issued int
}

func newTargetHarness(t *testing.T, objs ...client.Object) *targetHarness {
	t.Helper()
	// The fake clientset does not stream a watch's initial list.
	clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.WatchListClient, false)
	h := &targetHarness{
		t: t, ctx: t.Context(),
		source: fake.NewClientset(), remote: fake.NewClientset(),
		clock:    clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		recorder: events.NewFakeRecorder(100),
		nodes:    make(chan string, 10),
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	h.client = crfake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithStatusSubresource(&v1alpha1.Target{}, &v1alpha1.ClusterTarget{}).Build()
	h.remote.PrependReactor("create", "serviceaccounts", h.issueToken)
	h.c = &Controller{
		Client:        h.client,
		Reader:        h.client,
		Kube:          h.source,
		Self:          &rest.Config{Host: "https://home.example:6443"},
		SourceCluster: "home",
		Namespace:     "flotilla-system",
		Targets:       NewSet(),
		// Never run: no source pod runs anywhere.
		SourcePods: toolscache.NewSharedIndexInformer(&toolscache.ListWatch{}, &corev1.Pod{}, 0, toolscache.Indexers{}),
		Recorder:   h.recorder,
		Clock:      h.clock,
		dial:       func(cfg Config) (*Target, error) { return NewWithClient(cfg, h.remote) },
		runVNode: func(ctx context.Context, cfg vnode.Config) error {
			h.nodes <- cfg.NodeName
			<-ctx.Done()
			return nil
		},
	}
	h.c.defaults()
	ctx, cancel := context.WithCancel(h.ctx)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = h.c.Start(ctx)
	}()
	t.Cleanup(func() { cancel(); <-stopped })
	return h
}

// token is a ServiceAccount token of the invited identity issued now on
// the test's clock.
func (h *targetHarness) token() string {
	now := h.clock.Now()
	return jwt(fmt.Sprintf(`{"sub":%q,"iat":%d,"exp":%d}`, invitedSA, now.Unix(), now.Add(tokenLife).Unix()))
}

// issueToken answers a TokenRequest as the target does: a new token of
// the lifetime asked, from now on the test's clock.
func (h *targetHarness) issueToken(action k8stesting.Action) (bool, runtime.Object, error) {
	create, ok := action.(k8stesting.CreateAction)
	if !ok || action.GetSubresource() != "token" {
		return false, nil, nil
	}
	tr := create.GetObject().(*authenticationv1.TokenRequest).DeepCopy()
	h.issued++
	now := h.clock.Now()
	life := time.Duration(*tr.Spec.ExpirationSeconds) * time.Second
	tr.Status.Token = jwt(fmt.Sprintf(`{"sub":%q,"iat":%d,"exp":%d,"n":%d}`, invitedSA, now.Unix(), now.Add(life).Unix(), h.issued))
	tr.Status.ExpirationTimestamp = metav1.NewTime(now.Add(life))
	return true, tr, nil
}

// kubeconfigSecret is the Secret of a ClusterTarget, as the target's agent
// writes it for the invitation (without a summary: every namespace is
// watched).
func kubeconfigSecret(t *testing.T, token string) *corev1.Secret {
	t.Helper()
	data, err := invitation.Kubeconfig(remoteServer, nil, token, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "flotilla-system", Name: "east-kubeconfig"},
		Data: map[string][]byte{"kubeconfig": data}}
}

func eastTarget() *v1alpha1.ClusterTarget {
	ct := &v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: "east", Generation: 1}}
	ct.Spec.KubeconfigSecretRef = &v1alpha1.SecretKeyRef{LocalSecretKeyRef: v1alpha1.LocalSecretKeyRef{Name: "east-kubeconfig"}}
	ct.Spec.Labels = map[string]v1alpha1.LabelValue{"topology.kubernetes.io/region": "eu"}
	return ct
}

func (h *targetHarness) reconcile(name string) reconcile.Result {
	h.t.Helper()
	res, err := h.c.reconcileClusterTarget(h.ctx, reconcile.Request{NamespacedName: client.ObjectKey{Name: name}})
	if err != nil {
		h.t.Fatalf("reconciling ClusterTarget %s: %v", name, err)
	}
	return res
}

func (h *targetHarness) status(name string) v1alpha1.TargetStatus {
	h.t.Helper()
	ct := &v1alpha1.ClusterTarget{}
	if err := h.client.Get(h.ctx, client.ObjectKey{Name: name}, ct); err != nil {
		h.t.Fatal(err)
	}
	return ct.Status
}

// synced waits until the running target called name has listed its
// candidates.
func (h *targetHarness) synced(name string) {
	h.t.Helper()
	if err := wait.PollUntilContextTimeout(h.ctx, time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		r := h.c.get(name)
		return r != nil && r.t.HasSynced(), nil
	}); err != nil {
		h.t.Fatalf("target %s never listed its candidates: %v", name, err)
	}
}

// connected reconciles a new target until it is Ready.
func (h *targetHarness) connected(name string) {
	h.t.Helper()
	h.reconcile(name)
	h.synced(name)
	h.reconcile(name)
	expectCondition(h.t, h.status(name).Conditions, v1alpha1.TargetReady, metav1.ConditionTrue, v1alpha1.ReasonConnected)
}

// secretToken is the token of the kubeconfig in the Secret of east.
func (h *targetHarness) secretToken() string {
	h.t.Helper()
	secret := &corev1.Secret{}
	if err := h.client.Get(h.ctx, client.ObjectKey{Namespace: "flotilla-system", Name: "east-kubeconfig"}, secret); err != nil {
		h.t.Fatal(err)
	}
	cfg, err := clientcmd.Load(secret.Data["kubeconfig"])
	if err != nil {
		h.t.Fatal(err)
	}
	return cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo].Token
}

func expectCondition(t *testing.T, conditions []metav1.Condition, typ string, status metav1.ConditionStatus, reason string) {
	t.Helper()
	c := meta.FindStatusCondition(conditions, typ)
	switch {
	case c == nil:
		t.Errorf("no %s condition in %+v", typ, conditions)
	case c.Status != status || c.Reason != reason:
		t.Errorf("%s is %s (%s: %s), want %s (%s)", typ, c.Status, c.Reason, c.Message, status, reason)
	}
}

// TestTargetConnectsAndReportsReady: a ClusterTarget with a good
// kubeconfig gets its finalizer and its virtual node, which starts; its
// target joins the set placement reads; it is Ready, with an Event, once
// its candidates are listed, and looked at again every ResyncPeriod.
func TestTargetConnectsAndReportsReady(t *testing.T) {
	h := newTargetHarness(t, eastTarget())
	if err := h.client.Create(h.ctx, kubeconfigSecret(t, h.token())); err != nil {
		t.Fatal(err)
	}

	// Ready or not yet: that depends on how soon its candidates are listed.
	h.reconcile("east")
	ct := &v1alpha1.ClusterTarget{}
	if err := h.client.Get(h.ctx, client.ObjectKey{Name: "east"}, ct); err != nil {
		t.Fatal(err)
	}
	if len(ct.Finalizers) != 1 || ct.Finalizers[0] != Finalizer {
		t.Errorf("finalizers %v, want %s", ct.Finalizers, Finalizer)
	}
	expectCondition(t, ct.Status.Conditions, v1alpha1.TargetCredentialsValid, metav1.ConditionTrue, v1alpha1.ReasonConnected)
	if ct.Status.VirtualNode != "flotilla-east" {
		t.Errorf("status.virtualNode %q, want flotilla-east", ct.Status.VirtualNode)
	}
	if want := metav1.NewTime(h.clock.Now().Add(tokenLife)); ct.Status.TokenExpirationTime == nil || !ct.Status.TokenExpirationTime.Equal(&want) {
		t.Errorf("status.tokenExpirationTime %v, want %v", ct.Status.TokenExpirationTime, want)
	}
	node, err := h.source.CoreV1().Nodes().Get(h.ctx, "flotilla-east", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the virtual node was not claimed: %v", err)
	}
	if owner := node.Annotations[protocol.VirtualNodeOwnerAnnotation]; owner != protocol.OwnerOfTargetName("east").String() {
		t.Errorf("the virtual node's owner is %q", owner)
	}
	if node.Labels["topology.kubernetes.io/region"] != "eu" {
		t.Errorf("the virtual node's labels %v miss the target's", node.Labels)
	}
	select {
	case name := <-h.nodes:
		if name != "flotilla-east" {
			t.Errorf("virtual node %s started, want flotilla-east", name)
		}
	case <-time.After(5 * time.Second):
		t.Error("the virtual node was not started")
	}
	if tg, ok := h.c.Targets.Get("east"); !ok || tg.Cluster() != remoteServer {
		t.Errorf("the set holds %v (%t), want target east of %s", tg, ok, remoteServer)
	}

	h.synced("east")
	if res := h.reconcile("east"); res.RequeueAfter != DefaultResyncPeriod {
		t.Errorf("Ready: look again after %v, want %v", res.RequeueAfter, DefaultResyncPeriod)
	}
	st := h.status("east")
	for _, typ := range []string{v1alpha1.TargetReady, v1alpha1.TargetReachable, v1alpha1.TargetAuthorized} {
		expectCondition(t, st.Conditions, typ, metav1.ConditionTrue, v1alpha1.ReasonConnected)
	}
	expectCondition(t, st.Conditions, v1alpha1.TargetOverlapping, metav1.ConditionFalse, v1alpha1.ReasonNoOverlap)
	if st.ObservedGeneration != 1 {
		t.Errorf("status.observedGeneration %d, want 1", st.ObservedGeneration)
	}
	var ready bool
	for len(h.recorder.Events) > 0 {
		if e := <-h.recorder.Events; e == corev1.EventTypeNormal+" "+v1alpha1.ReasonConnected+" Pods are sent to this target" {
			ready = true
		}
	}
	if !ready {
		t.Error("no Event says that the target is Ready")
	}
}

// TestTargetRefusesWhatItCannotUse: a target whose Secret, kubeconfig or
// spec cannot be used says why in its conditions, with the reason an
// operator acts on, and nothing runs for it: no virtual node, no place in
// the set.
func TestTargetRefusesWhatItCannotUse(t *testing.T) {
	kubeconfig := func(mutate func(*clientcmdapi.Config)) []byte {
		cfg := clientcmdapi.NewConfig()
		cfg.Clusters["east"] = &clientcmdapi.Cluster{Server: remoteServer}
		cfg.AuthInfos["home"] = &clientcmdapi.AuthInfo{Token: "t"}
		cfg.Contexts["east"] = &clientcmdapi.Context{Cluster: "east", AuthInfo: "home"}
		cfg.CurrentContext = "east"
		mutate(cfg)
		data, err := clientcmd.Write(*cfg)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	secretWith := func(data map[string][]byte) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "flotilla-system", Name: "east-kubeconfig"}, Data: data}
	}
	for _, tc := range []struct {
		name   string
		target *v1alpha1.ClusterTarget
		secret *corev1.Secret // nil: none
		// reason of Ready, and of CredentialsValid unless the spec is
		// refused before the Secret is read.
		reason      string
		credentials bool
		requeue     time.Duration
	}{{
		name: "no Secret", target: eastTarget(),
		reason: v1alpha1.ReasonSecretNotFound, credentials: true, requeue: notReadyResync,
	}, {
		name: "no kubeconfig in the Secret", target: eastTarget(), secret: secretWith(map[string][]byte{"config": []byte("x")}),
		reason: v1alpha1.ReasonKubeconfigInvalid, credentials: true, requeue: notReadyResync,
	}, {
		name: "a kubeconfig that trusts any server", target: eastTarget(),
		secret: secretWith(map[string][]byte{"kubeconfig": kubeconfig(func(c *clientcmdapi.Config) { c.Clusters["east"].InsecureSkipTLSVerify = true })}),
		reason: v1alpha1.ReasonKubeconfigRefused, credentials: true, requeue: notReadyResync,
	}, {
		name: "a kubeconfig that runs a command", target: eastTarget(),
		secret: secretWith(map[string][]byte{"kubeconfig": kubeconfig(func(c *clientcmdapi.Config) {
			c.AuthInfos["home"] = &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{Command: "steal", APIVersion: "client.authentication.k8s.io/v1"}}
		})}),
		reason: v1alpha1.ReasonKubeconfigRefused, credentials: true, requeue: notReadyResync,
	}, {
		name: "pod networks that do not parse",
		target: func() *v1alpha1.ClusterTarget {
			ct := eastTarget()
			ct.Spec.PodCIDRs = []string{"10.0.0.0/33"}
			return ct
		}(),
		secret: kubeconfigSecret(t, "t"),
		reason: v1alpha1.ReasonInvalidSpec,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			objs := []client.Object{tc.target}
			if tc.secret != nil {
				objs = append(objs, tc.secret)
			}
			h := newTargetHarness(t, objs...)
			if res := h.reconcile("east"); res.RequeueAfter != tc.requeue {
				t.Errorf("look again after %v, want %v", res.RequeueAfter, tc.requeue)
			}
			st := h.status("east")
			expectCondition(t, st.Conditions, v1alpha1.TargetReady, metav1.ConditionFalse, tc.reason)
			if tc.credentials {
				expectCondition(t, st.Conditions, v1alpha1.TargetCredentialsValid, metav1.ConditionFalse, tc.reason)
			}
			if _, err := h.source.CoreV1().Nodes().Get(h.ctx, "flotilla-east", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("a virtual node was claimed for it: %v", err)
			}
			if _, ok := h.c.Targets.Get("east"); ok || h.c.get("east") != nil {
				t.Error("the target runs")
			}
		})
	}
}

// TestTargetRenewsItsTokenOnceHalfSpent: the kubeconfig's token is kept
// while less than TokenRenewAfter of its life has passed on the
// controller's clock; then a new one is asked of the target, written back
// into the Secret, sent by the running client and reported. A renewal the
// target refuses is reported as such.
func TestTargetRenewsItsTokenOnceHalfSpent(t *testing.T) {
	h := newTargetHarness(t, eastTarget())
	first := h.token()
	if err := h.client.Create(h.ctx, kubeconfigSecret(t, first)); err != nil {
		t.Fatal(err)
	}
	h.connected("east")

	h.clock.Step(tokenLife/2 - time.Minute)
	h.reconcile("east")
	if h.issued != 0 || h.secretToken() != first {
		t.Fatalf("the token was renewed with more than half its life left (%d issued)", h.issued)
	}

	h.clock.Step(2 * time.Minute)
	h.reconcile("east")
	if h.issued != 1 {
		t.Fatalf("%d tokens issued with less than half the token's life left, want 1", h.issued)
	}
	renewed := h.secretToken()
	if renewed == first {
		t.Error("the renewed token was not written into the Secret")
	}
	if got := h.c.get("east").t.Token(); got != renewed {
		t.Error("the running client does not send the renewed token")
	}
	st := h.status("east")
	if want := metav1.NewTime(h.clock.Now().Add(tokenLife)); st.TokenExpirationTime == nil || !st.TokenExpirationTime.Equal(&want) {
		t.Errorf("status.tokenExpirationTime %v, want %v", st.TokenExpirationTime, want)
	}
	expectCondition(t, st.Conditions, v1alpha1.TargetCredentialsValid, metav1.ConditionTrue, v1alpha1.ReasonConnected)

	h.remote.PrependReactor("create", "serviceaccounts", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "serviceaccounts/token"}, "flotilla-source-home", errors.New("invitation revoked"))
	})
	h.clock.Step(tokenLife/2 + time.Minute)
	h.reconcile("east")
	expectCondition(t, h.status("east").Conditions, v1alpha1.TargetCredentialsValid, metav1.ConditionFalse, v1alpha1.ReasonTokenRenewalFailed)
}

// TestSilentTargetsNodeTurnsNotReadyAfterNotReadyAfter: a target whose API
// server does not answer is reported Unreachable at once, but its virtual
// node stays Ready (its pods untouched) until it has been silent for
// NotReadyAfter on the controller's clock.
func TestSilentTargetsNodeTurnsNotReadyAfterNotReadyAfter(t *testing.T) {
	h := newTargetHarness(t, eastTarget())
	if err := h.client.Create(h.ctx, kubeconfigSecret(t, h.token())); err != nil {
		t.Fatal(err)
	}
	h.remote.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("dial tcp: connection refused")
	})
	nodeReady := func() bool { return h.c.get("east").status.Get().Ready }

	if res := h.reconcile("east"); res.RequeueAfter != notReadyResync {
		t.Errorf("unreachable: look again after %v, want %v", res.RequeueAfter, notReadyResync)
	}
	expectCondition(t, h.status("east").Conditions, v1alpha1.TargetReady, metav1.ConditionFalse, v1alpha1.ReasonUnreachable)
	if !nodeReady() {
		t.Error("the virtual node turned NotReady at the first silence")
	}

	h.clock.Step(DefaultNotReadyAfter - time.Second)
	h.reconcile("east")
	if !nodeReady() {
		t.Errorf("the virtual node turned NotReady after %v of silence, before NotReadyAfter", DefaultNotReadyAfter-time.Second)
	}

	h.clock.Step(time.Second)
	h.reconcile("east")
	if s := h.c.get("east").status.Get(); s.Ready || s.Reason != v1alpha1.ReasonUnreachable {
		t.Errorf("after NotReadyAfter of silence the virtual node is %+v, want NotReady (Unreachable)", s)
	}
}

// TestDeletedTargetIsDrainedAndReleased: a deleted target that runs no pod
// leaves the set, its waiting candidates are deleted in the target, its
// virtual node is deleted and its finalizer released.
func TestDeletedTargetIsDrainedAndReleased(t *testing.T) {
	h := newTargetHarness(t, eastTarget())
	if err := h.client.Create(h.ctx, kubeconfigSecret(t, h.token())); err != nil {
		t.Fatal(err)
	}
	waiting := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Namespace: "shop", Name: "web-0-east", UID: "candidate-uid",
		Labels: map[string]string{
			protocol.CandidateLabel: "true", protocol.SourceClusterLabel: "home",
			protocol.TargetLabel: protocol.TargetLabelValue("east"), protocol.SourceUIDLabel: "gone-uid",
		},
		Annotations: map[string]string{protocol.SourceNamespaceAnnotation: "shop", protocol.SourceNameAnnotation: "web-0"},
	}}
	if _, err := h.remote.CoreV1().Pods("shop").Create(h.ctx, waiting, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.connected("east")
	if len(h.c.get("east").t.Candidates()) != 1 {
		t.Fatal("the target's cache does not hold its candidate")
	}

	if err := h.client.Delete(h.ctx, eastTarget()); err != nil {
		t.Fatal(err)
	}
	h.reconcile("east")

	if _, err := h.remote.CoreV1().Pods("shop").Get(h.ctx, waiting.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the waiting candidate is left in the target: %v", err)
	}
	if _, err := h.source.CoreV1().Nodes().Get(h.ctx, "flotilla-east", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the virtual node is left: %v", err)
	}
	if _, ok := h.c.Targets.Get("east"); ok || h.c.get("east") != nil {
		t.Error("the deleted target still runs")
	}
	if err := h.client.Get(h.ctx, client.ObjectKey{Name: "east"}, &v1alpha1.ClusterTarget{}); !apierrors.IsNotFound(err) {
		t.Errorf("the ClusterTarget is kept (its finalizer not released): %v", err)
	}
}
