package invitation

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/summary"
)

// Finalizer holds an invitation until its access and waiting candidates
// are gone.
const Finalizer = protocol.Prefix + "revoke"

// resync is how often an invitation is applied again even when nothing
// changed: it repairs objects someone edited and refreshes the kubeconfig.
const resync = time.Minute

// RBAC the controller needs.
// +kubebuilder:rbac:groups=multicluster.flotilla.dev,resources=sources;clustersources,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=multicluster.flotilla.dev,resources=sources/status;clustersources/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=multicluster.flotilla.dev,resources=sources/finalizers;clustersources/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch;create
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=get;create;delete
// +kubebuilder:rbac:groups="",resources=serviceaccounts/token,verbs=create
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create;update;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=list;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings;clusterroles;clusterrolebindings,verbs=get;list;create;update;delete;bind;escalate
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingadmissionpolicies;validatingadmissionpolicybindings,verbs=get;create;update;delete

// Controller applies Sources and ClusterSources.
type Controller struct {
	// Client writes and reads the invitations (cached); Reader reads
	// everything else uncached, so the agent keeps no cache of Secrets or
	// RBAC.
	Client client.Client
	Reader client.Reader
	Kube   kubernetes.Interface
	// AgentNamespace holds a ClusterSource's managed ServiceAccount.
	AgentNamespace string
	// Server and CAData are how a source reaches this cluster, written into
	// the kubeconfig of a managed ServiceAccount.
	Server string
	CAData []byte
	// TokenTTL is the lifetime of the token in that kubeconfig.
	TokenTTL time.Duration
	// Summaries publishes each invitation's ClusterSummary.
	Summaries *summary.Publisher
	Recorder  events.EventRecorder
	// NoScheduler: this cluster's release runs no Flotilla scheduler, so an
	// invitation is granted but reported not Ready (SchedulerDisabled).
	NoScheduler bool

	// audiences are this API server's default token audiences, once
	// learnt (see apiAudiences).
	audiencesMu sync.Mutex
	audiences   []string

	// streams keeps each invitation's streams Roles (streams.go); nil
	// outside the manager (RevokeAll).
	streams *streamGrants
}

// SetupWithManager registers the controllers of both kinds; a namespace
// that appears or changes labels looks at every ClusterSource again.
func (c *Controller) SetupWithManager(mgr ctrl.Manager) error {
	allClusterSources := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		list := &v1alpha1.ClusterSourceList{}
		if err := c.Client.List(ctx, list); err != nil {
			return nil
		}
		out := make([]reconcile.Request, 0, len(list.Items))
		for _, cs := range list.Items {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKey{Name: cs.Name}})
		}
		return out
	})
	if err := mgr.Add(sweeper{c}); err != nil {
		return err
	}
	c.streams = newStreamGrants(c.Kube, c.Client, c.Reader)
	if err := mgr.Add(c.streams); err != nil {
		return err
	}
	if err := ctrl.NewControllerManagedBy(mgr).Named("clustersource").For(&v1alpha1.ClusterSource{}).
		Watches(&corev1.Namespace{}, allClusterSources).
		Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			obj := &v1alpha1.ClusterSource{}
			return c.reconcile(ctx, req, obj, func(ctx context.Context) (Invitation, *v1alpha1.SourceStatus, error) {
				inv := Invitation{Kind: "ClusterSource", Name: obj.Name, Spec: obj.Spec.SourceCommon, AgentNamespace: c.AgentNamespace}
				ns, err := c.namespacesOf(ctx, obj)
				inv.Namespaces = ns
				return inv, &obj.Status, err
			})
		})); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).Named("source").For(&v1alpha1.Source{}).
		Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			obj := &v1alpha1.Source{}
			return c.reconcile(ctx, req, obj, func(context.Context) (Invitation, *v1alpha1.SourceStatus, error) {
				return Invitation{Kind: "Source", Namespace: obj.Namespace, Name: obj.Name, Spec: obj.Spec.SourceCommon,
					Namespaces: []string{obj.Namespace}, AgentNamespace: c.AgentNamespace}, &obj.Status, nil
			})
		}))
}

// namespacesOf resolves the namespaces a ClusterSource covers: the listed
// ones (existing or not), or the existing ones its selector matches.
func (c *Controller) namespacesOf(ctx context.Context, cs *v1alpha1.ClusterSource) ([]string, error) {
	if cs.Spec.NamespaceSelector == nil {
		out := slices.Clone(cs.Spec.Namespaces)
		sort.Strings(out)
		return out, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(cs.Spec.NamespaceSelector)
	if err != nil {
		return nil, fmt.Errorf("spec.namespaceSelector: %w", err)
	}
	list := &corev1.NamespaceList{}
	if err := c.Client.List(ctx, list, client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, err
	}
	var out []string
	for _, ns := range list.Items {
		if ns.DeletionTimestamp == nil {
			out = append(out, ns.Name)
		}
	}
	sort.Strings(out)
	return out, nil
}

func (c *Controller) reconcile(ctx context.Context, req reconcile.Request, obj client.Object,
	resolve func(context.Context) (Invitation, *v1alpha1.SourceStatus, error)) (reconcile.Result, error) {
	if err := c.Client.Get(ctx, req.NamespacedName, obj); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	inv, status, resolveErr := resolve(ctx)
	if obj.GetDeletionTimestamp() != nil {
		if !controllerutil.ContainsFinalizer(obj, Finalizer) {
			return reconcile.Result{}, nil
		}
		if err := c.revoke(ctx, inv); err != nil {
			return reconcile.Result{}, err
		}
		patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
		controllerutil.RemoveFinalizer(obj, Finalizer)
		return reconcile.Result{}, client.IgnoreNotFound(c.Client.Patch(ctx, obj, patch))
	}
	if !controllerutil.ContainsFinalizer(obj, Finalizer) {
		patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
		controllerutil.AddFinalizer(obj, Finalizer)
		if err := c.Client.Patch(ctx, obj, patch); err != nil {
			return reconcile.Result{}, err
		}
	}
	before := status.DeepCopy()
	set := func(typ string, ok bool, reason, msg string) {
		s := metav1.ConditionFalse
		if ok {
			s = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: typ, Status: s, Reason: reason, Message: msg, ObservedGeneration: obj.GetGeneration()})
	}
	if resolveErr != nil {
		set(v1alpha1.SourceAccepted, false, v1alpha1.ReasonInvalidSpec, resolveErr.Error())
		set(v1alpha1.SourceReady, false, v1alpha1.ReasonInvalidSpec, resolveErr.Error())
		return c.report(ctx, obj, before, status)
	}
	set(v1alpha1.SourceAccepted, true, v1alpha1.ReasonAccepted, "The invitation was understood")
	status.Summary = inv.SummaryName()
	if ns, name := inv.ServiceAccount(); name != "" {
		status.ServiceAccount = ns + "/" + name
	}

	missing, err := c.ensureNamespaces(ctx, inv)
	if err != nil {
		set(v1alpha1.SourceReady, false, v1alpha1.ReasonApplyFailed, err.Error())
		return c.report(ctx, obj, before, status)
	}
	if len(missing) > 0 {
		set(v1alpha1.SourceNamespaceMissing, true, v1alpha1.ReasonNamespacesMissing,
			fmt.Sprintf("Namespaces %s do not exist and the invitation does not let the agent create them (spec.createNamespaces); the source is not told of them until they exist", strings.Join(missing, ", ")))
	} else {
		set(v1alpha1.SourceNamespaceMissing, false, v1alpha1.ReasonNamespacesPresent, "Every invited namespace exists")
	}
	// The source watches and uses only the namespaces that exist: one it
	// could not watch would keep the whole target from syncing.
	covered := present(inv.Namespaces, missing)
	status.Namespaces = covered
	if err := c.ensureServiceAccount(ctx, inv); err != nil {
		set(v1alpha1.SourceReady, false, v1alpha1.ReasonApplyFailed, err.Error())
		return c.report(ctx, obj, before, status)
	}
	inv.APIAudiences = c.apiAudiences(ctx, inv)
	wait, err := c.apply(ctx, inv, covered)
	if err != nil {
		set(v1alpha1.SourceReady, false, v1alpha1.ReasonApplyFailed, err.Error())
		return c.report(ctx, obj, before, status)
	}
	if wait > 0 {
		set(v1alpha1.SourceReady, false, v1alpha1.ReasonPolicyPending, "Waiting for the admission policy to take effect before granting access")
		res, err := c.report(ctx, obj, before, status)
		res.RequeueAfter = wait
		return res, err
	}
	if inv.Spec.Identity.ManagedServiceAccount != nil {
		if err := c.ensureKubeconfig(ctx, inv); err != nil {
			set(v1alpha1.SourceReady, false, v1alpha1.ReasonApplyFailed, err.Error())
			return c.report(ctx, obj, before, status)
		}
		status.KubeconfigSecret = inv.KubeconfigSecretName()
	}
	c.Summaries.Set(inv.SummaryName(), summary.Invitation{
		Name: inv.Ref(), Namespaces: covered, CreateNamespaces: inv.Spec.CreateNamespaces, KeepSourceLabels: inv.Spec.KeepSourceLabels,
		Quota:  quotaOf(inv.Spec.Quota),
		Labels: map[string]string{protocol.InvitationLabel: inv.ID()},
	})
	if c.NoScheduler {
		// Access stays granted, so that turning the scheduler on is all
		// it takes; the source's candidates meanwhile wait unscheduled.
		set(v1alpha1.SourceReady, false, v1alpha1.ReasonSchedulerDisabled,
			fmt.Sprintf("%s may send candidates to %d namespaces, but this cluster's Flotilla release runs no scheduler (scheduler.enabled=false): they would stay Pending; enable it to run them", inv.Username(), len(covered)))
		return c.report(ctx, obj, before, status)
	}
	set(v1alpha1.SourceReady, true, v1alpha1.ReasonAccessGranted,
		fmt.Sprintf("%s may send candidates to %d namespaces", inv.Username(), len(covered)))
	return c.report(ctx, obj, before, status)
}

// quotaOf is an invitation's quota as a resource list; nil when it sets none.
func quotaOf(q *v1alpha1.SourceQuota) corev1.ResourceList {
	if q == nil {
		return nil
	}
	out := corev1.ResourceList{}
	if q.CPU != nil {
		out[corev1.ResourceCPU] = q.CPU.DeepCopy()
	}
	if q.Memory != nil {
		out[corev1.ResourceMemory] = q.Memory.DeepCopy()
	}
	if q.Pods != nil {
		out[corev1.ResourcePods] = *resource.NewQuantity(int64(*q.Pods), resource.DecimalSI)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func present(all, missing []string) []string {
	var out []string
	for _, ns := range all {
		if !slices.Contains(missing, ns) {
			out = append(out, ns)
		}
	}
	return out
}

// statusConflictRetry is how soon an invitation whose status write lost a
// race with a newer version is looked at again.
const statusConflictRetry = time.Second

func (c *Controller) report(ctx context.Context, obj client.Object, before, status *v1alpha1.SourceStatus) (reconcile.Result, error) {
	status.ObservedGeneration = obj.GetGeneration()
	if !equality.Semantic.DeepEqual(before, status) {
		if err := c.Client.Status().Update(ctx, obj); err != nil {
			if apierrors.IsConflict(err) {
				// The newer version brings it back; this look is in case
				// that was missed.
				return reconcile.Result{RequeueAfter: statusConflictRetry}, nil
			}
			return reconcile.Result{}, err
		}
		was := meta.FindStatusCondition(before.Conditions, v1alpha1.SourceReady)
		now := meta.FindStatusCondition(status.Conditions, v1alpha1.SourceReady)
		if c.Recorder != nil && now != nil && (was == nil || was.Status != now.Status || was.Reason != now.Reason) {
			kind := corev1.EventTypeNormal
			if now.Status != metav1.ConditionTrue {
				kind = corev1.EventTypeWarning
			}
			c.Recorder.Eventf(obj, nil, kind, now.Reason, "Invite", "%s", now.Message)
		}
	}
	return reconcile.Result{RequeueAfter: resync}, nil
}

// ensureNamespaces creates the missing invited namespaces when allowed, and
// returns those still missing.
func (c *Controller) ensureNamespaces(ctx context.Context, inv Invitation) ([]string, error) {
	var missing []string
	for _, name := range inv.Namespaces {
		ns := &corev1.Namespace{}
		err := c.Client.Get(ctx, client.ObjectKey{Name: name}, ns)
		if err == nil {
			continue
		}
		if !apierrors.IsNotFound(err) {
			return nil, err
		}
		if !inv.Spec.CreateNamespaces {
			missing = append(missing, name)
			continue
		}
		ns = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: podSecurityLabels(inv, map[string]string{
			protocol.ManagedNamespaceLabel: inv.ID(), "app.kubernetes.io/managed-by": "flotilla",
		})}}
		if err := c.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating invited namespace %s: %w", name, err)
		}
	}
	return missing, nil
}

// podSecurityLabels adds to labels those that make Pod Security Admission
// enforce, in a namespace created for an invitation, what the invitation's
// policy enforces on the source (baseline, or privileged when the
// invitation allows it) on every pod there, whoever creates it, and audit
// at restricted: what a pod there would need to change to meet it, in the
// audit log. Not warn: the warning would come back to the source's agent
// with every candidate it creates. The version is latest: the standards
// of the API server that runs.
func podSecurityLabels(inv Invitation, labels map[string]string) map[string]string {
	enforce := "baseline"
	if inv.Spec.AllowPrivileged {
		enforce = "privileged"
	}
	const psa = "pod-security.kubernetes.io/"
	labels[psa+"enforce"] = enforce
	labels[psa+"enforce-version"] = "latest"
	labels[psa+"audit"] = "restricted"
	labels[psa+"audit-version"] = "latest"
	return labels
}

// policySettle is how long a new admission policy is given to take effect
// in the API server (it compiles and loads policies in the background)
// before the identity it restrains is granted anything.
const policySettle = 3 * time.Second

// ensureServiceAccount makes a managed ServiceAccount. It has no rights
// until apply grants them.
func (c *Controller) ensureServiceAccount(ctx context.Context, inv Invitation) error {
	if inv.Spec.Identity.ManagedServiceAccount == nil {
		return nil
	}
	ns, name := inv.ServiceAccount()
	sa := &corev1.ServiceAccount{ObjectMeta: inv.meta(ns)}
	sa.Name = name
	if err := c.Client.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ServiceAccount %s/%s: %w", ns, name, err)
	}
	return nil
}

// apiAudiences are the audiences this API server gives a token whose
// request names none: the admission policy lets the identity ask for
// those only. The API server fills them into a TokenRequest before
// admission sees it, and tells them in its answer, so the agent learns
// them from a token it requests, once: they change only with the API
// server's flags, and each kubeconfig token refreshes them (learn). The
// first is a short token of the invited ServiceAccount, which has no
// rights yet and is thrown away. Nil when there is no ServiceAccount to
// ask with yet: the policy then refuses every token request.
func (c *Controller) apiAudiences(ctx context.Context, inv Invitation) []string {
	c.audiencesMu.Lock()
	known := c.audiences
	c.audiencesMu.Unlock()
	if known != nil {
		return known
	}
	ns, name := inv.ServiceAccount()
	if name == "" {
		return nil
	}
	tr, err := c.Kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(v1alpha1.MinTokenLifetime.Seconds()))},
	}, metav1.CreateOptions{})
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Could not learn the API server's token audiences yet", "serviceAccount", klog.KRef(ns, name), "err", err)
		return nil
	}
	c.learn(tr.Spec.Audiences)
	return tr.Spec.Audiences
}

// learn keeps the audiences the API server gave a token that asked for
// none.
func (c *Controller) learn(audiences []string) {
	if len(audiences) == 0 {
		return
	}
	c.audiencesMu.Lock()
	c.audiences = slices.Clone(audiences)
	c.audiencesMu.Unlock()
}

// apply makes the identity's admission policy and then its RBAC in the
// given namespaces, and removes RBAC left in namespaces no longer covered.
// While a new policy may not be in force yet, it grants nothing and
// returns how long to wait.
func (c *Controller) apply(ctx context.Context, inv Invitation, namespaces []string) (time.Duration, error) {
	policy := inv.Policy()
	for _, o := range []client.Object{policy, inv.PolicyBinding()} {
		if err := c.upsert(ctx, o); err != nil {
			return 0, err
		}
	}
	created := policy.GetCreationTimestamp()
	if created.IsZero() {
		return policySettle, nil
	}
	if age := time.Since(created.Time); age < policySettle {
		return policySettle - max(age, 0), nil
	}
	objs := []client.Object{inv.ClusterRole(), inv.ClusterRoleBinding()}
	if _, name := inv.ServiceAccount(); name != "" {
		// Any invited ServiceAccount renews its own tokens.
		objs = append(objs, inv.TokenRole(), inv.TokenRoleBinding())
	}
	for _, ns := range namespaces {
		objs = append(objs, inv.Role(ns), inv.RoleBinding(ns), inv.StreamsRoleBinding(ns))
	}
	var errs []error
	for _, o := range objs {
		if err := c.upsert(ctx, o); err != nil {
			errs = append(errs, err)
		}
	}
	if c.streams != nil {
		c.streams.set(inv, namespaces)
	}
	// RBAC in namespaces the invitation no longer covers.
	sel := client.MatchingLabels{protocol.InvitationLabel: inv.ID()}
	roles := &metav1.PartialObjectMetadataList{}
	roles.SetGroupVersionKind(rbacList("RoleBindingList"))
	if err := c.Reader.List(ctx, roles, sel); err != nil {
		errs = append(errs, err)
	}
	saNS, _ := inv.ServiceAccount()
	for _, rb := range roles.Items {
		token := rb.Namespace == saNS && rb.Name == inv.TokenRoleBinding().Name
		if !slices.Contains(namespaces, rb.Namespace) && !token {
			errs = append(errs, c.deleteRBAC(ctx, rb.Namespace, rb.Name))
		}
	}
	return 0, errors.Join(errs...)
}

func rbacList(kind string) schema.GroupVersionKind {
	return rbacv1.SchemeGroupVersion.WithKind(kind)
}

func (c *Controller) deleteRBAC(ctx context.Context, namespace, name string) error {
	var errs []error
	for _, o := range []client.Object{
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}},
	} {
		if err := c.Client.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// upsert creates obj or replaces the fields we own of an existing one.
func (c *Controller) upsert(ctx context.Context, obj client.Object) error {
	existing := obj.DeepCopyObject().(client.Object)
	err := c.Reader.Get(ctx, client.ObjectKeyFromObject(obj), existing)
	if apierrors.IsNotFound(err) {
		if err := c.Client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %T %s: %w", obj, client.ObjectKeyFromObject(obj), err)
		}
		return nil
	}
	if err != nil {
		return err
	}
	obj.SetResourceVersion(existing.GetResourceVersion())
	obj.SetCreationTimestamp(existing.GetCreationTimestamp())
	if equalOwned(existing, obj) {
		return nil
	}
	if err := c.Client.Update(ctx, obj); err != nil {
		return fmt.Errorf("updating %T %s: %w", obj, client.ObjectKeyFromObject(obj), err)
	}
	return nil
}

// ensureKubeconfig writes, beside a managed ServiceAccount, a kubeconfig for
// it with a token of TokenTTL, or of the invitation's longest token when
// that is shorter, renewed here once half of it has passed, so that a
// source joining late still gets a valid one. The source renews its own
// copy itself, for the lifetime of the token it holds: one the policy
// accepts.
func (c *Controller) ensureKubeconfig(ctx context.Context, inv Invitation) error {
	ns, name := inv.ServiceAccount()
	life := min(c.TokenTTL, inv.Spec.TokenLifetime())
	secret := &corev1.Secret{}
	err := c.Reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: inv.KubeconfigSecretName()}, secret)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if err == nil {
		if exp, ok := secret.Annotations[protocol.InvitationExpiresAnnotation]; ok {
			if t, perr := time.Parse(time.RFC3339, exp); perr == nil && time.Until(t) > life/2 {
				return nil
			}
		}
	}
	ttl := int64(life.Seconds())
	tr, terr := c.Kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &ttl},
	}, metav1.CreateOptions{})
	if terr != nil {
		return fmt.Errorf("requesting a token for ServiceAccount %s/%s: %w", ns, name, terr)
	}
	c.learn(tr.Spec.Audiences)
	data, kerr := Kubeconfig(c.Server, c.CAData, tr.Status.Token, inv.Namespaces)
	if kerr != nil {
		return kerr
	}
	want := &corev1.Secret{ObjectMeta: inv.meta(ns)}
	want.Name = inv.KubeconfigSecretName()
	want.Annotations = map[string]string{protocol.InvitationExpiresAnnotation: tr.Status.ExpirationTimestamp.UTC().Format(time.RFC3339)}
	want.Data = map[string][]byte{protocol.InvitationKubeconfigKey: data, protocol.InvitationSummaryKey: []byte(inv.SummaryName())}
	if apierrors.IsNotFound(err) {
		return c.Client.Create(ctx, want)
	}
	want.ResourceVersion = secret.ResourceVersion
	return c.Client.Update(ctx, want)
}

// Keys of the kubeconfig Secret a source receives, spelled in pkg/protocol
// (the invitation handshake) and named here too for the agent's tests.
const (
	// KubeconfigKey is protocol.InvitationKubeconfigKey.
	KubeconfigKey = protocol.InvitationKubeconfigKey
	// SummaryKey is protocol.InvitationSummaryKey.
	SummaryKey = protocol.InvitationSummaryKey
	// ExpiresAnnotation is protocol.InvitationExpiresAnnotation.
	ExpiresAnnotation = protocol.InvitationExpiresAnnotation
)

// Kubeconfig renders a kubeconfig for a source. Its context's namespace is
// the first invited one.
func Kubeconfig(server string, caData []byte, token string, namespaces []string) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["target"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caData}
	cfg.AuthInfos["source"] = &clientcmdapi.AuthInfo{Token: token}
	ctx := &clientcmdapi.Context{Cluster: "target", AuthInfo: "source"}
	if len(namespaces) > 0 {
		ctx.Namespace = namespaces[0]
	}
	cfg.Contexts["target"] = ctx
	cfg.CurrentContext = "target"
	return clientcmd.Write(*cfg)
}

// ServerOf is what a kubeconfig for sources says about this cluster when
// no address is configured: the agent's own connection.
func ServerOf(cfg *rest.Config) (string, []byte, error) {
	ca := cfg.CAData
	if len(ca) == 0 && cfg.CAFile != "" {
		var err error
		if ca, err = os.ReadFile(cfg.CAFile); err != nil {
			return "", nil, fmt.Errorf("reading the API server's CA %s: %w", cfg.CAFile, err)
		}
	}
	return cfg.Host, ca, nil
}

// revoke removes everything the invitation granted and the source's
// candidates that wait; bound ones run on.
func (c *Controller) revoke(ctx context.Context, inv Invitation) error {
	log := klog.FromContext(ctx)
	var errs []error
	if c.streams != nil {
		// No streams Role is written again once deleted below.
		c.streams.forget(inv.ID())
	}
	if c.Summaries != nil {
		c.Summaries.Remove(inv.SummaryName())
	} else if err := c.Client.Delete(ctx, &v1alpha1.ClusterSummary{ObjectMeta: metav1.ObjectMeta{Name: inv.SummaryName()}}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, err)
	}
	del := func(o client.Object) {
		if err := c.Client.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	// The identity first: deleting the ServiceAccount invalidates its tokens.
	if inv.Spec.Identity.ManagedServiceAccount != nil {
		ns, name := inv.ServiceAccount()
		del(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
		del(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: inv.KubeconfigSecretName()}})
	}
	if _, name := inv.ServiceAccount(); name != "" {
		del(inv.TokenRoleBinding())
		del(inv.TokenRole())
	}
	del(inv.ClusterRoleBinding())
	del(inv.ClusterRole())
	del(inv.PolicyBinding())
	del(inv.Policy())
	rbs := &metav1.PartialObjectMetadataList{}
	rbs.SetGroupVersionKind(rbacList("RoleBindingList"))
	if err := c.Reader.List(ctx, rbs, client.MatchingLabels{protocol.InvitationLabel: inv.ID()}); err != nil {
		errs = append(errs, err)
	}
	for _, rb := range rbs.Items {
		errs = append(errs, c.deleteRBAC(ctx, rb.Namespace, rb.Name))
	}
	sel := labels.SelectorFromSet(labels.Set{protocol.CandidateLabel: "true", protocol.SourceClusterLabel: inv.Spec.ClusterName}).String()
	for _, ns := range inv.Namespaces {
		pods, err := c.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel, FieldSelector: "spec.nodeName="})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, p := range pods.Items {
			uid := p.UID
			err := c.Kube.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("revoking invitation %s: %w", inv.Ref(), err)
	}
	log.Info("Invitation revoked", "invitation", inv.Ref(), "identity", inv.Username())
	return nil
}

// equalOwned reports whether existing already has what want sets.
func equalOwned(existing, want client.Object) bool {
	if !equality.Semantic.DeepEqual(existing.GetLabels(), want.GetLabels()) {
		return false
	}
	switch w := want.(type) {
	case *rbacv1.Role:
		return equality.Semantic.DeepEqual(existing.(*rbacv1.Role).Rules, w.Rules)
	case *rbacv1.ClusterRole:
		return equality.Semantic.DeepEqual(existing.(*rbacv1.ClusterRole).Rules, w.Rules)
	case *rbacv1.RoleBinding:
		e := existing.(*rbacv1.RoleBinding)
		return e.RoleRef == w.RoleRef && equality.Semantic.DeepEqual(e.Subjects, w.Subjects)
	case *rbacv1.ClusterRoleBinding:
		e := existing.(*rbacv1.ClusterRoleBinding)
		return e.RoleRef == w.RoleRef && equality.Semantic.DeepEqual(e.Subjects, w.Subjects)
	case *admissionregistrationv1.ValidatingAdmissionPolicy:
		e := existing.(*admissionregistrationv1.ValidatingAdmissionPolicy)
		return equality.Semantic.DeepDerivative(w.Spec, e.Spec)
	case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
		e := existing.(*admissionregistrationv1.ValidatingAdmissionPolicyBinding)
		return equality.Semantic.DeepDerivative(w.Spec, e.Spec)
	}
	return false
}

// sweeper deletes, once the agent leads, the ClusterSummaries of
// invitations that are gone: an agent stopped between revoking an
// invitation and deleting its summary would leave one behind.
type sweeper struct{ c *Controller }

func (s sweeper) NeedLeaderElection() bool { return true }

func (s sweeper) Start(ctx context.Context) error {
	if err := s.sweep(ctx); err != nil {
		klog.FromContext(ctx).Error(err, "Deleting the summaries of deleted invitations")
	}
	return nil
}

func (s sweeper) sweep(ctx context.Context) error {
	live := map[string]bool{}
	sources := &v1alpha1.SourceList{}
	if err := s.c.Client.List(ctx, sources); err != nil {
		return err
	}
	for _, src := range sources.Items {
		live[Invitation{Kind: "Source", Namespace: src.Namespace, Name: src.Name}.ID()] = true
	}
	clusterSources := &v1alpha1.ClusterSourceList{}
	if err := s.c.Client.List(ctx, clusterSources); err != nil {
		return err
	}
	for _, cs := range clusterSources.Items {
		live[Invitation{Kind: "ClusterSource", Name: cs.Name}.ID()] = true
	}
	summaries := &v1alpha1.ClusterSummaryList{}
	if err := s.c.Client.List(ctx, summaries, client.HasLabels{protocol.InvitationLabel}); err != nil {
		return err
	}
	var errs []error
	for i := range summaries.Items {
		sum := &summaries.Items[i]
		if !live[sum.Labels[protocol.InvitationLabel]] {
			if err := s.c.Client.Delete(ctx, sum); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// RevokeAll revokes every invitation and releases its finalizer, for an
// uninstall: afterwards nothing the agent made for a source is left and the
// Sources and ClusterSources can be deleted without the agent.
func (c *Controller) RevokeAll(ctx context.Context) error {
	var errs []error
	sources := &v1alpha1.SourceList{}
	if err := c.Client.List(ctx, sources); err != nil {
		return err
	}
	for i := range sources.Items {
		src := &sources.Items[i]
		inv := Invitation{Kind: "Source", Namespace: src.Namespace, Name: src.Name, Spec: src.Spec.SourceCommon,
			Namespaces: []string{src.Namespace}, AgentNamespace: c.AgentNamespace}
		errs = append(errs, c.revokeAndRelease(ctx, src, inv))
	}
	clusterSources := &v1alpha1.ClusterSourceList{}
	if err := c.Client.List(ctx, clusterSources); err != nil {
		return err
	}
	for i := range clusterSources.Items {
		cs := &clusterSources.Items[i]
		inv := Invitation{Kind: "ClusterSource", Name: cs.Name, Spec: cs.Spec.SourceCommon, AgentNamespace: c.AgentNamespace}
		ns, err := c.namespacesOf(ctx, cs)
		if err != nil {
			errs = append(errs, err)
		}
		inv.Namespaces = ns
		errs = append(errs, c.revokeAndRelease(ctx, cs, inv))
	}
	errs = append(errs, sweeper{c}.sweep(ctx))
	return errors.Join(errs...)
}

func (c *Controller) revokeAndRelease(ctx context.Context, obj client.Object, inv Invitation) error {
	if err := c.revoke(ctx, inv); err != nil {
		return err
	}
	patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
	if controllerutil.RemoveFinalizer(obj, Finalizer) {
		return client.IgnoreNotFound(c.Client.Patch(ctx, obj, patch))
	}
	return nil
}
