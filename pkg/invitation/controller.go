package invitation

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
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
	// Clock tells the time of what the controller waits for (a new
	// admission policy to settle, the kubeconfig's token to be half spent);
	// nil is the real one.
	Clock clock.PassiveClock

	// audiences are this API server's default token audiences, once
	// learnt (see apiAudiences).
	audiencesMu sync.Mutex
	audiences   []string

	// streams keeps each invitation's streams Roles (streams.go); nil
	// outside the manager (RevokeAll).
	streams *streamGrants
}

// now is the controller's clock's time.
func (c *Controller) now() time.Time {
	if c.Clock == nil {
		return time.Now()
	}
	return c.Clock.Now()
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
		Complete(reconcile.Func(c.reconcileClusterSource)); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).Named("source").For(&v1alpha1.Source{}).
		Complete(reconcile.Func(c.reconcileSource))
}

// reconcileClusterSource applies a ClusterSource to the namespaces it
// covers.
func (c *Controller) reconcileClusterSource(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	obj := &v1alpha1.ClusterSource{}
	return c.reconcile(ctx, req, obj, func(ctx context.Context) (Invitation, *v1alpha1.SourceStatus, error) {
		inv := Invitation{Kind: "ClusterSource", Name: obj.Name, Spec: obj.Spec.SourceCommon, AgentNamespace: c.AgentNamespace}
		ns, err := c.namespacesOf(ctx, obj)
		inv.Namespaces = ns
		return inv, &obj.Status, err
	})
}

// reconcileSource applies a Source to its own namespace.
func (c *Controller) reconcileSource(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	obj := &v1alpha1.Source{}
	return c.reconcile(ctx, req, obj, func(context.Context) (Invitation, *v1alpha1.SourceStatus, error) {
		return Invitation{Kind: "Source", Namespace: obj.Namespace, Name: obj.Name, Spec: obj.Spec.SourceCommon,
			Namespaces: []string{obj.Namespace}, AgentNamespace: c.AgentNamespace}, &obj.Status, nil
	})
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
