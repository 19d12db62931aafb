package invitation

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/summary"
)

// The invitation controller driven one Reconcile at a time: the target
// cluster's API server is a controller-runtime fake client (which stamps a
// new object's creationTimestamp from the test's clock, as the API server
// does from its own) and a client-go fake clientset that issues tokens
// valid from the test's clock.

// tokenTTL is the controller's TokenTTL in these tests: shorter than an
// invitation's default longest token, so it is the kubeconfig's lifetime.
const tokenTTL = time.Hour

type invitationHarness struct {
	t        *testing.T
	ctx      context.Context
	c        *Controller
	client   client.Client
	kube     *kubefake.Clientset
	clock    *clocktesting.FakeClock
	recorder *events.FakeRecorder
	// issued counts the tokens the fake API server issued.
	issued int
}

func newInvitationHarness(t *testing.T, objs ...client.Object) *invitationHarness {
	t.Helper()
	h := &invitationHarness{t: t, ctx: t.Context(), clock: clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	h.client = crfake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithStatusSubresource(&v1alpha1.Source{}, &v1alpha1.ClusterSource{}).
		WithInterceptorFuncs(interceptor.Funcs{Create: h.stampCreation}).Build()
	h.kube = kubefake.NewClientset()
	h.kube.PrependReactor("create", "serviceaccounts", h.issueToken)
	h.recorder = events.NewFakeRecorder(100)
	h.c = &Controller{
		Client:         h.client,
		Reader:         h.client,
		Kube:           h.kube,
		AgentNamespace: "flotilla-system",
		Server:         "https://target.example:6443",
		CAData:         []byte("ca"),
		TokenTTL:       tokenTTL,
		Summaries:      summary.NewPublisher(h.kube, h.client, 0, nil),
		Recorder:       h.recorder,
		Clock:          h.clock,
	}
	return h
}

// stampCreation gives a new object the creationTimestamp the API server
// would: now, on the test's clock.
func (h *invitationHarness) stampCreation(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
	if created := obj.GetCreationTimestamp(); created.IsZero() {
		obj.SetCreationTimestamp(metav1.NewTime(h.clock.Now()))
	}
	return cl.Create(ctx, obj, opts...)
}

// issueToken answers a TokenRequest with a token of the lifetime asked,
// from now on the test's clock, for the API server's default audience.
func (h *invitationHarness) issueToken(action k8stesting.Action) (bool, runtime.Object, error) {
	create, ok := action.(k8stesting.CreateAction)
	if !ok || action.GetSubresource() != "token" {
		return false, nil, nil
	}
	tr := create.GetObject().(*authenticationv1.TokenRequest).DeepCopy()
	h.issued++
	tr.Spec.Audiences = []string{"https://kubernetes.default.svc"}
	tr.Status.Token = fmt.Sprintf("token-%d", h.issued)
	tr.Status.ExpirationTimestamp = metav1.NewTime(h.clock.Now().Add(time.Duration(*tr.Spec.ExpirationSeconds) * time.Second))
	return true, tr, nil
}

// reconcile runs one reconcile of an invitation: h.c.reconcileSource or
// h.c.reconcileClusterSource.
func (h *invitationHarness) reconcile(of reconcile.Func, key client.ObjectKey) reconcile.Result {
	h.t.Helper()
	res, err := of(h.ctx, reconcile.Request{NamespacedName: key})
	if err != nil {
		h.t.Fatalf("reconciling invitation %s: %v", key, err)
	}
	return res
}

func (h *invitationHarness) reconcileSource(namespace, name string) reconcile.Result {
	h.t.Helper()
	return h.reconcile(h.c.reconcileSource, client.ObjectKey{Namespace: namespace, Name: name})
}

// exists reports whether the object obj names exists.
func (h *invitationHarness) exists(obj client.Object) bool {
	h.t.Helper()
	err := h.client.Get(h.ctx, client.ObjectKeyFromObject(obj), obj)
	if err != nil && !apierrors.IsNotFound(err) {
		h.t.Fatal(err)
	}
	return err == nil
}

// kubeconfigToken is the token of the kubeconfig Secret of inv, and the
// expiry the Secret records.
func (h *invitationHarness) kubeconfigToken(inv Invitation) (token, expires string) {
	h.t.Helper()
	ns, _ := inv.ServiceAccount()
	secret := &corev1.Secret{}
	if err := h.client.Get(h.ctx, client.ObjectKey{Namespace: ns, Name: inv.KubeconfigSecretName()}, secret); err != nil {
		h.t.Fatalf("the kubeconfig Secret: %v", err)
	}
	cfg, err := clientcmd.Load(secret.Data[KubeconfigKey])
	if err != nil {
		h.t.Fatalf("the kubeconfig Secret holds no kubeconfig: %v", err)
	}
	user := cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo]
	if got := string(secret.Data[SummaryKey]); got != inv.SummaryName() {
		h.t.Errorf("the kubeconfig Secret names summary %q, want %q", got, inv.SummaryName())
	}
	return user.Token, secret.Annotations[ExpiresAnnotation]
}

func invitedSource() *v1alpha1.Source {
	s := &v1alpha1.Source{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "east", Generation: 1}}
	s.Spec.ClusterName = "east"
	s.Spec.Identity.ManagedServiceAccount = &v1alpha1.ManagedServiceAccount{}
	return s
}

func invitationOf(s *v1alpha1.Source) Invitation {
	return Invitation{Kind: "Source", Namespace: s.Namespace, Name: s.Name, Spec: s.Spec.SourceCommon,
		Namespaces: []string{s.Namespace}, AgentNamespace: "flotilla-system"}
}

func namespace(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// wantCondition fails unless conditions hold typ with status and reason.
func wantCondition(t *testing.T, conditions []metav1.Condition, typ string, status metav1.ConditionStatus, reason string) *metav1.Condition {
	t.Helper()
	c := meta.FindStatusCondition(conditions, typ)
	if c == nil {
		t.Fatalf("no %s condition in %+v", typ, conditions)
	}
	if c.Status != status || c.Reason != reason {
		t.Errorf("%s is %s (%s: %s), want %s (%s)", typ, c.Status, c.Reason, c.Message, status, reason)
	}
	return c
}

// grant reconciles a new Source until it is granted: once, and again
// once its policy has settled.
func (h *invitationHarness) grant(s *v1alpha1.Source) {
	h.t.Helper()
	h.reconcileSource(s.Namespace, s.Name)
	h.clock.Step(policySettle)
	h.reconcileSource(s.Namespace, s.Name)
}

// TestInvitationGrantsAccessOnceItsPolicySettles: a new Source gets its
// ServiceAccount and admission policy at once, and nothing else until the
// policy has stood policySettle on the controller's clock (the
// reconcile asks to look again when it will have); then its RBAC, a
// kubeconfig whose token lasts TokenTTL, and a Ready status with an
// Event.
func TestInvitationGrantsAccessOnceItsPolicySettles(t *testing.T) {
	src := invitedSource()
	h := newInvitationHarness(t, namespace("shop"), src)
	inv := invitationOf(src)
	saNS, saName := inv.ServiceAccount()

	if res := h.reconcileSource("shop", "east"); res.RequeueAfter != policySettle {
		t.Errorf("a new policy: look again after %v, want %v", res.RequeueAfter, policySettle)
	}
	got := &v1alpha1.Source{}
	if err := h.client.Get(h.ctx, client.ObjectKeyFromObject(src), got); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(got.Finalizers, ","), Finalizer) {
		t.Errorf("finalizers %v, want %s", got.Finalizers, Finalizer)
	}
	wantCondition(t, got.Status.Conditions, v1alpha1.SourceAccepted, metav1.ConditionTrue, v1alpha1.ReasonAccepted)
	wantCondition(t, got.Status.Conditions, v1alpha1.SourceReady, metav1.ConditionFalse, v1alpha1.ReasonPolicyPending)
	if !h.exists(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: saNS, Name: saName}}) {
		t.Errorf("no ServiceAccount %s/%s", saNS, saName)
	}
	if !h.exists(inv.Policy()) || !h.exists(inv.PolicyBinding()) {
		t.Error("the admission policy or its binding was not made first")
	}
	if h.exists(inv.RoleBinding("shop")) || h.exists(inv.ClusterRoleBinding()) {
		t.Error("access was granted before the admission policy settled")
	}

	h.clock.Step(policySettle - time.Second)
	if res := h.reconcileSource("shop", "east"); res.RequeueAfter != time.Second {
		t.Errorf("a policy %v old: look again after %v, want 1s", policySettle-time.Second, res.RequeueAfter)
	}
	if h.exists(inv.RoleBinding("shop")) {
		t.Error("access was granted before the admission policy settled")
	}

	h.clock.Step(time.Second)
	if res := h.reconcileSource("shop", "east"); res.RequeueAfter != resync {
		t.Errorf("granted: look again after %v, want %v", res.RequeueAfter, resync)
	}
	for _, o := range []client.Object{inv.Role("shop"), inv.RoleBinding("shop"), inv.ClusterRole(), inv.ClusterRoleBinding(), inv.TokenRole(), inv.TokenRoleBinding()} {
		if !h.exists(o) {
			t.Errorf("%T %s was not made", o, client.ObjectKeyFromObject(o))
		}
	}
	rb := inv.RoleBinding("shop")
	h.exists(rb)
	if len(rb.Subjects) != 1 || rb.Subjects[0].Kind != rbacv1.ServiceAccountKind || rb.Subjects[0].Name != saName {
		t.Errorf("RoleBinding subjects %+v, want ServiceAccount %s", rb.Subjects, saName)
	}
	token, expires := h.kubeconfigToken(inv)
	if token == "" || !strings.HasPrefix(token, "token-") {
		t.Errorf("kubeconfig token %q, want one the API server issued", token)
	}
	if want := h.clock.Now().Add(tokenTTL).UTC().Format(time.RFC3339); expires != want {
		t.Errorf("the kubeconfig's token expires at %s, want %s (TokenTTL from now)", expires, want)
	}
	if err := h.client.Get(h.ctx, client.ObjectKeyFromObject(src), got); err != nil {
		t.Fatal(err)
	}
	wantCondition(t, got.Status.Conditions, v1alpha1.SourceReady, metav1.ConditionTrue, v1alpha1.ReasonAccessGranted)
	wantCondition(t, got.Status.Conditions, v1alpha1.SourceNamespaceMissing, metav1.ConditionFalse, v1alpha1.ReasonNamespacesPresent)
	if got.Status.ServiceAccount != saNS+"/"+saName || got.Status.KubeconfigSecret != inv.KubeconfigSecretName() ||
		got.Status.Summary != inv.SummaryName() || strings.Join(got.Status.Namespaces, ",") != "shop" || got.Status.ObservedGeneration != 1 {
		t.Errorf("status %+v", got.Status)
	}
	var granted bool
	for len(h.recorder.Events) > 0 {
		if e := <-h.recorder.Events; strings.HasPrefix(e, corev1.EventTypeNormal+" "+v1alpha1.ReasonAccessGranted) {
			granted = true
		}
	}
	if !granted {
		t.Error("no Event says that access was granted")
	}
}

// TestInvitationRenewsItsKubeconfigOnceHalfSpent: the kubeconfig Secret's
// token is kept while more than half its lifetime is left on the
// controller's clock, and replaced by a new one of TokenTTL after; an
// expired one is replaced too.
func TestInvitationRenewsItsKubeconfigOnceHalfSpent(t *testing.T) {
	src := invitedSource()
	h := newInvitationHarness(t, namespace("shop"), src)
	inv := invitationOf(src)
	h.grant(src)
	first, _ := h.kubeconfigToken(inv)

	h.clock.Step(tokenTTL/2 - time.Minute)
	h.reconcileSource("shop", "east")
	if token, _ := h.kubeconfigToken(inv); token != first {
		t.Errorf("the token was renewed with more than half its life left (%q, was %q)", token, first)
	}

	h.clock.Step(2 * time.Minute)
	h.reconcileSource("shop", "east")
	second, expires := h.kubeconfigToken(inv)
	if second == first {
		t.Fatalf("the token %q was not renewed with less than half its life left", first)
	}
	if want := h.clock.Now().Add(tokenTTL).UTC().Format(time.RFC3339); expires != want {
		t.Errorf("the renewed token expires at %s, want %s", expires, want)
	}

	h.clock.Step(2 * tokenTTL)
	h.reconcileSource("shop", "east")
	if third, _ := h.kubeconfigToken(inv); third == second {
		t.Errorf("the expired token %q was not renewed", second)
	}
}

// TestInvitationReportsWhatItCannotGrant: what is wrong with an
// invitation, or missing for it, is in its status with the reason an
// operator acts on, and nothing is granted for what is wrong.
func TestInvitationReportsWhatItCannotGrant(t *testing.T) {
	clusterSource := func(mutate func(*v1alpha1.ClusterSource)) *v1alpha1.ClusterSource {
		cs := &v1alpha1.ClusterSource{ObjectMeta: metav1.ObjectMeta{Name: "east", Generation: 1}}
		cs.Spec.ClusterName = "east"
		cs.Spec.Identity.ManagedServiceAccount = &v1alpha1.ManagedServiceAccount{}
		cs.Spec.Namespaces = []string{"shop"}
		mutate(cs)
		return cs
	}
	for _, tc := range []struct {
		name        string
		source      *v1alpha1.ClusterSource
		noScheduler bool
		// want: condition type -> status and reason.
		want map[string][2]string
		// covered: status.namespaces; granted: namespaces with a
		// RoleBinding; absent: without one.
		covered        []string
		granted        []string
		absent         []string
		clusterGranted bool
	}{{
		name: "invalid namespace selector",
		source: clusterSource(func(cs *v1alpha1.ClusterSource) {
			cs.Spec.Namespaces = nil
			cs.Spec.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: "Near"}}}
		}),
		want: map[string][2]string{
			v1alpha1.SourceAccepted: {"False", v1alpha1.ReasonInvalidSpec},
			v1alpha1.SourceReady:    {"False", v1alpha1.ReasonInvalidSpec},
		},
		absent: []string{"shop"},
	}, {
		name:   "a namespace that does not exist",
		source: clusterSource(func(cs *v1alpha1.ClusterSource) { cs.Spec.Namespaces = []string{"shop", "gone"} }),
		want: map[string][2]string{
			v1alpha1.SourceAccepted:         {"True", v1alpha1.ReasonAccepted},
			v1alpha1.SourceNamespaceMissing: {"True", v1alpha1.ReasonNamespacesMissing},
			v1alpha1.SourceReady:            {"True", v1alpha1.ReasonAccessGranted},
		},
		covered: []string{"shop"}, granted: []string{"shop"}, absent: []string{"gone"}, clusterGranted: true,
	}, {
		name:        "no scheduler in this cluster",
		source:      clusterSource(func(*v1alpha1.ClusterSource) {}),
		noScheduler: true,
		want: map[string][2]string{
			v1alpha1.SourceAccepted: {"True", v1alpha1.ReasonAccepted},
			v1alpha1.SourceReady:    {"False", v1alpha1.ReasonSchedulerDisabled},
		},
		covered: []string{"shop"}, granted: []string{"shop"}, clusterGranted: true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			h := newInvitationHarness(t, namespace("shop"), tc.source)
			h.c.NoScheduler = tc.noScheduler
			h.reconcile(h.c.reconcileClusterSource, client.ObjectKey{Name: "east"})
			h.clock.Step(policySettle)
			h.reconcile(h.c.reconcileClusterSource, client.ObjectKey{Name: "east"})

			got := &v1alpha1.ClusterSource{}
			if err := h.client.Get(h.ctx, client.ObjectKey{Name: "east"}, got); err != nil {
				t.Fatal(err)
			}
			for typ, want := range tc.want {
				wantCondition(t, got.Status.Conditions, typ, metav1.ConditionStatus(want[0]), want[1])
			}
			if strings.Join(got.Status.Namespaces, ",") != strings.Join(tc.covered, ",") {
				t.Errorf("status.namespaces %v, want %v", got.Status.Namespaces, tc.covered)
			}
			inv := Invitation{Kind: "ClusterSource", Name: "east", Spec: got.Spec.SourceCommon, AgentNamespace: "flotilla-system"}
			for _, ns := range tc.granted {
				if !h.exists(inv.RoleBinding(ns)) {
					t.Errorf("no RoleBinding in %s", ns)
				}
			}
			for _, ns := range tc.absent {
				if h.exists(inv.RoleBinding(ns)) {
					t.Errorf("a RoleBinding in %s", ns)
				}
			}
			if got := h.exists(inv.ClusterRoleBinding()); got != tc.clusterGranted {
				t.Errorf("ClusterRoleBinding made: %t, want %t", got, tc.clusterGranted)
			}
		})
	}
}

// TestRevokingAnInvitationRemovesWhatItGranted: a deleted Source loses its
// identity, its RBAC, its policy and its waiting candidates (another
// source's stay), and then its finalizer.
func TestRevokingAnInvitationRemovesWhatItGranted(t *testing.T) {
	src := invitedSource()
	h := newInvitationHarness(t, namespace("shop"), src)
	inv := invitationOf(src)
	h.grant(src)
	waiting := func(name, cluster string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, UID: types.UID("uid-" + name),
			Labels: map[string]string{protocol.CandidateLabel: "true", protocol.SourceClusterLabel: cluster}}}
	}
	for _, p := range []*corev1.Pod{waiting("mine", "east"), waiting("theirs", "west")} {
		if _, err := h.kube.CoreV1().Pods("shop").Create(h.ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	if err := h.client.Delete(h.ctx, src.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	h.reconcileSource("shop", "east")

	saNS, saName := inv.ServiceAccount()
	for _, o := range []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: saNS, Name: saName}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: saNS, Name: inv.KubeconfigSecretName()}},
		inv.Role("shop"), inv.RoleBinding("shop"), inv.TokenRole(), inv.TokenRoleBinding(),
		inv.ClusterRole(), inv.ClusterRoleBinding(),
		&admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: inv.Policy().ObjectMeta},
		&admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: inv.PolicyBinding().ObjectMeta},
	} {
		if h.exists(o) {
			t.Errorf("%T %s is left after the revocation", o, client.ObjectKeyFromObject(o))
		}
	}
	if _, err := h.kube.CoreV1().Pods("shop").Get(h.ctx, "mine", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the source's waiting candidate is left: %v", err)
	}
	if _, err := h.kube.CoreV1().Pods("shop").Get(h.ctx, "theirs", metav1.GetOptions{}); err != nil {
		t.Errorf("another source's candidate was deleted: %v", err)
	}
	if h.exists(&v1alpha1.Source{ObjectMeta: src.ObjectMeta}) {
		t.Error("the Source is kept: its finalizer was not released")
	}
}
