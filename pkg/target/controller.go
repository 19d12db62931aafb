package target

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/clusterprofile"
	"github.com/flotilla-dev/flotilla/pkg/kubeconfig"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/summary"
	"github.com/flotilla-dev/flotilla/pkg/vnode"
)

// Finalizer keeps a deleted Target until the pods running there have ended,
// so that they stay mirrored; then its virtual node is removed.
const Finalizer = protocol.Prefix + "drain"

// TargetNamespaceLabel is on the virtual node of a namespaced Target.
const TargetNamespaceLabel = protocol.TargetNamespaceLabel

// Defaults of Controller.
const (
	DefaultResyncPeriod = 10 * time.Second
	// DefaultNotReadyAfter is how long a target may fail to answer before
	// its virtual node turns NotReady: long enough to ride out a restart of
	// its API server, short enough that pods move within a minute or two.
	DefaultNotReadyAfter = 20 * time.Second
	// notReadyResync is how often a target that is not Ready is looked at
	// again, so a fixed Secret or a target back up shows within seconds.
	notReadyResync = 3 * time.Second
	probeTimeout   = 5 * time.Second
)

// RBAC the controller needs.
// +kubebuilder:rbac:groups=multicluster.flotilla.dev,resources=targets;clustertargets,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=multicluster.flotilla.dev,resources=targets/status;clustertargets/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=multicluster.flotilla.dev,resources=targets/finalizers;clustertargets/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;update;patch
// +kubebuilder:rbac:groups=multicluster.x-k8s.io,resources=clusterprofiles,verbs=get
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=nodes/status,verbs=get;update;patch

// Controller turns Targets and ClusterTargets into running targets: for each
// it connects a Target (client, candidate informer), puts it in the Set that
// placement reads, and runs its virtual node. A target is started, replaced
// and stopped while the agent runs, each with its own context, so a broken
// one is reported in its status and never holds up the others.
type Controller struct {
	// Client reads Targets and ClusterTargets from the manager's cache and
	// writes their status; Reader reads Secrets, uncached.
	Client client.Client
	Reader client.Reader
	// Kube is the source cluster's clientset, for the virtual nodes.
	Kube kubernetes.Interface
	// Self is the source cluster's own config, for self targets.
	Self *rest.Config
	// SourceCluster is this cluster's name as its targets know it.
	SourceCluster string
	// Namespace is the agent's namespace, where a ClusterTarget's Secret is
	// looked for when its reference names no namespace.
	Namespace string
	// Targets is where running targets are put for placement.
	Targets *Set
	// SourcePods is the shared informer over source pods.
	SourcePods toolscache.SharedIndexInformer
	Recorder   events.EventRecorder
	// VNodeWorkers is each virtual node's number of workers.
	VNodeWorkers int
	// KubeletAddress and KubeletPort are where the agent serves the kubelet
	// API of its virtual nodes (their InternalIP and daemonEndpoints); an
	// empty address leaves the nodes without one.
	KubeletAddress string
	KubeletPort    int32
	// ResyncPeriod is how often a Ready target is probed; default 10s.
	ResyncPeriod time.Duration
	// NotReadyAfter is how long a target's API must fail to answer before
	// its virtual node turns NotReady; default 20s.
	NotReadyAfter time.Duration
	// NoScheduler: this cluster's release runs no Flotilla scheduler, so a
	// self target is reported not Ready (SchedulerDisabled).
	NoScheduler bool
	// TokenRenewAfter is the share of a token's lifetime after which it is
	// renewed; default 0.5.
	TokenRenewAfter float64
	// TenantPodCIDRs are the networks inside which a namespaced Target's
	// spec.podCIDRs must lie; none: a namespaced Target may name none, so
	// its pods never show a pod IP here.
	TenantPodCIDRs []netip.Prefix

	mu      sync.Mutex
	running map[string]*running
	base    context.Context
	started chan struct{}
}

// running is one connected target and what runs for it.
type running struct {
	t    *Target
	hash string
	// place is where its pods run (placeOf): a change of it drains the
	// old place before the new one takes pods.
	place  string
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	// status is what its virtual node says of the target.
	status *vnode.Status

	mu sync.Mutex
	// answered is when the target last answered a probe (or started).
	answered time.Time
	// retiring runs the target's node of the old namespaced form while
	// pods are bound to it; nil when none runs.
	retiring *retiring
	// retired: that node is gone (or another's) and no pod is bound to
	// it, so it is not looked for again.
	retired atomic.Bool
}

// observeHealth turns the probes' outcomes into the virtual node's Ready:
// false once the target has not answered for notReadyAfter.
func (r *running) observeHealth(h Health, now time.Time, notReadyAfter time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	statuses := []*vnode.Status{r.status}
	if r.retiring != nil {
		statuses = append(statuses, r.retiring.status)
	}
	if h.Reachable && h.Authorized {
		r.answered = now
		for _, s := range statuses {
			s.SetReady(true, "", "")
		}
		return
	}
	if now.Sub(r.answered) >= notReadyAfter {
		for _, s := range statuses {
			s.SetReady(false, h.Reason, h.Message)
		}
	}
}

// SetupWithManager registers the controllers of both kinds.
func (c *Controller) SetupWithManager(mgr ctrl.Manager) error {
	c.running = map[string]*running{}
	c.started = make(chan struct{})
	if c.ResyncPeriod <= 0 {
		c.ResyncPeriod = DefaultResyncPeriod
	}
	if c.NotReadyAfter <= 0 {
		c.NotReadyAfter = DefaultNotReadyAfter
	}
	if c.TokenRenewAfter <= 0 || c.TokenRenewAfter >= 1 {
		c.TokenRenewAfter = 0.5
	}
	if err := mgr.Add(c); err != nil {
		return err
	}
	if err := ctrl.NewControllerManagedBy(mgr).Named("clustertarget").For(&v1alpha1.ClusterTarget{}).
		Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			obj := &v1alpha1.ClusterTarget{}
			return c.reconcileObject(ctx, req, obj, func() view { return c.clusterTargetView(obj) })
		})); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).Named("target").For(&v1alpha1.Target{}).
		Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			obj := &v1alpha1.Target{}
			return c.reconcileObject(ctx, req, obj, func() view { return targetView(obj) })
		}))
}

// Start keeps the context the targets run in: the leader's. When it ends,
// every target stops.
func (c *Controller) Start(ctx context.Context) error {
	c.mu.Lock()
	c.base = ctx
	close(c.started)
	c.mu.Unlock()
	<-ctx.Done()
	c.mu.Lock()
	all := slices.Collect(maps.Values(c.running))
	c.running = map[string]*running{}
	c.mu.Unlock()
	for _, r := range all {
		c.Targets.Remove(r.t)
		r.stop()
	}
	return nil
}

// NeedLeaderElection: targets run on the leader only.
func (c *Controller) NeedLeaderElection() bool { return true }

// view is what reconciling needs of a Target or a ClusterTarget.
type view struct {
	obj       client.Object
	name      string // the target's name in the Set
	namespace string // a Target's namespace
	self      bool
	labels    map[string]string
	secret    types.NamespacedName
	secretKey string
	mapping   map[string]string
	podCIDRs  []string
	status    *v1alpha1.TargetStatus
	// secretObj is the kubeconfig Secret as resolve read it.
	secretObj *corev1.Secret
	// summary is the ClusterSummary named by the Secret, if any.
	summary string
	// profile is the ClusterProfile a ClusterTarget names; the Secret
	// then holds only its token (tokenOnly).
	profile   *v1alpha1.ClusterProfileRef
	tokenOnly bool
	// read says where the connection came from, for CredentialsValid.
	read string
}

func targetView(t *v1alpha1.Target) view {
	v := view{
		obj: t, name: t.Namespace + "/" + t.Name, namespace: t.Namespace,
		self: t.Spec.Self, labels: t.Spec.StringMap(), podCIDRs: t.Spec.PodCIDRs, status: &t.Status,
	}
	if ref := t.Spec.KubeconfigSecretRef; ref != nil {
		v.secret, v.secretKey = types.NamespacedName{Namespace: t.Namespace, Name: ref.Name}, ref.Key
	}
	if t.Spec.TargetNamespace != "" {
		v.mapping = map[string]string{t.Namespace: t.Spec.TargetNamespace}
	}
	return v
}

func (c *Controller) clusterTargetView(t *v1alpha1.ClusterTarget) view {
	v := view{obj: t, name: t.Name, self: t.Spec.Self, labels: t.Spec.StringMap(), podCIDRs: t.Spec.PodCIDRs, status: &t.Status}
	if ref := t.Spec.KubeconfigSecretRef; ref != nil {
		ns := ref.Namespace
		if ns == "" {
			ns = c.Namespace
		}
		v.secret, v.secretKey = types.NamespacedName{Namespace: ns, Name: ref.Name}, ref.Key
	}
	if ref := t.Spec.ClusterProfileRef; ref != nil {
		v.profile = ref
		v.tokenOnly = true
		ns, name, key := c.Namespace, ref.Name, "token"
		if tr := ref.TokenSecretRef; tr != nil {
			name = tr.Name
			if tr.Namespace != "" {
				ns = tr.Namespace
			}
			if tr.Key != "" {
				key = tr.Key
			}
		}
		v.secret, v.secretKey = types.NamespacedName{Namespace: ns, Name: name}, key
	}
	if len(t.Spec.NamespaceMapping) > 0 {
		v.mapping = map[string]string{}
		for _, m := range t.Spec.NamespaceMapping {
			v.mapping[m.Source] = m.Target
		}
	}
	return v
}

func (c *Controller) reconcileObject(ctx context.Context, req reconcile.Request, obj client.Object, viewOf func() view) (reconcile.Result, error) {
	select {
	case <-c.started:
	case <-ctx.Done():
		return reconcile.Result{}, ctx.Err()
	}
	key := req.Name
	if req.Namespace != "" {
		key = req.Namespace + "/" + req.Name
	}
	if err := c.Client.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			// Gone without our finalizer (removed by hand): stop it.
			c.stop(key)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}
	v := viewOf()
	if v.obj.GetDeletionTimestamp() != nil {
		return c.drain(ctx, v)
	}
	if !controllerutil.ContainsFinalizer(obj, Finalizer) {
		patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
		controllerutil.AddFinalizer(obj, Finalizer)
		if err := c.Client.Patch(ctx, obj, patch); err != nil {
			return reconcile.Result{}, fmt.Errorf("adding finalizer to target %s: %w", v.name, err)
		}
	}
	return c.connect(ctx, v)
}

// refusedSpec says why the agent will not act on a target's spec: a
// namespaced self Target that would send its pods to another namespace
// (with the agent's own identity, which may create pods in every
// namespace: a tenant of one namespace would borrow it to create pods and
// copies of its Secrets in kube-system or a neighbour's namespace), or pod
// networks that do not parse, or, on a namespaced Target (a tenant's),
// networks outside tenantPodCIDRs, the ones the cluster admin lets tenants
// name. The CRD's validation cannot see a Target's namespace, so this is
// checked here. nil: the spec may be acted on.
func refusedSpec(v view, tenantPodCIDRs []netip.Prefix) error {
	if v.self && v.namespace != "" {
		if to := v.mapping[v.namespace]; to != "" && to != v.namespace {
			return fmt.Errorf("a namespaced self Target sends its namespace's pods into this cluster with the agent's own identity, so only into its own namespace: spec.targetNamespace %q must be empty or %q; use a ClusterTarget, which only a cluster admin makes, to map namespaces", to, v.namespace)
		}
	}
	cidrs, err := vnode.ParsePodCIDRs(v.podCIDRs)
	if err != nil {
		return fmt.Errorf("spec.podCIDRs: %w", err)
	}
	if v.namespace != "" {
		for i, p := range cidrs {
			if !within(p, tenantPodCIDRs) {
				return fmt.Errorf("spec.podCIDRs[%d] %s: a namespaced Target's pod networks must lie inside the networks the cluster admin lets tenants name (the agent's targets.tenantPodCIDRs, %s): this cluster's Services would send traffic to any address a tenant's target reported", i, v.podCIDRs[i], describeCIDRs(tenantPodCIDRs))
			}
		}
	}
	return nil
}

// within reports whether network p lies inside one of nets.
func within(p netip.Prefix, nets []netip.Prefix) bool {
	for _, n := range nets {
		if n.Bits() <= p.Bits() && n.Contains(p.Addr()) {
			return true
		}
	}
	return false
}

func describeCIDRs(nets []netip.Prefix) string {
	if len(nets) == 0 {
		return "none"
	}
	out := make([]string, len(nets))
	for i, n := range nets {
		out[i] = n.String()
	}
	return strings.Join(out, ", ")
}

// connect makes the running target match the spec, probes it and reports.
func (c *Controller) connect(ctx context.Context, v view) (reconcile.Result, error) {
	before := v.status.DeepCopy()
	if err := refusedSpec(v, c.TenantPodCIDRs); err != nil {
		// Nothing is started for it; what runs of an earlier spec keeps
		// running, as with a broken Secret. The spec's next change brings
		// the target back here.
		setCondition(v, v1alpha1.TargetReady, metav1.ConditionFalse, v1alpha1.ReasonInvalidSpec, err.Error())
		return c.report(ctx, v, before, 0)
	}
	cfg, hash, reason, err := c.resolve(ctx, &v)
	r := c.get(v.name)
	if err != nil {
		// Keep what runs (its credentials may still work), but say what
		// is wrong with the new spec.
		setCondition(v, v1alpha1.TargetCredentialsValid, metav1.ConditionFalse, reason, err.Error())
		setCondition(v, v1alpha1.TargetReady, metav1.ConditionFalse, reason, err.Error())
		return c.report(ctx, v, before, notReadyResync)
	}
	// The node is registered only for a target whose connection is good:
	// a refused kubeconfig or profile gets none.
	if err := c.claim(ctx, v); err != nil {
		taken, ok := vnode.IsTaken(err)
		if !ok {
			// The source's API server did not answer: the node is
			// claimed again when the virtual node (re)starts.
			return reconcile.Result{}, fmt.Errorf("claiming the virtual node of target %s: %w", v.name, err)
		}
		// Another target owns the node (or it is no virtual node):
		// nothing runs for this one, and the owner is not disturbed.
		c.stop(v.name)
		v.status.VirtualNode = ""
		setCondition(v, v1alpha1.TargetReady, metav1.ConditionFalse, v1alpha1.ReasonVirtualNodeTaken, takenMessage(taken))
		return c.report(ctx, v, before, notReadyResync)
	}
	place := placeOf(v, cfg)
	// A target whose old place was draining and that points there again is
	// started afresh, back in the set.
	pointedBack := false
	if r != nil {
		if t, ok := c.Targets.Draining(v.name); ok && t == r.t {
			pointedBack = true
		}
	}
	if r == nil || r.hash != hash || pointedBack {
		if r != nil && r.place != place {
			if draining, res, err := c.drainOldPlace(ctx, v, r, before); draining {
				return res, err
			}
		}
		if r != nil {
			c.stop(v.name)
		}
		t, err := c.newTarget(v, cfg)
		if err != nil {
			setCondition(v, v1alpha1.TargetCredentialsValid, metav1.ConditionFalse, v1alpha1.ReasonKubeconfigInvalid, err.Error())
			setCondition(v, v1alpha1.TargetReady, metav1.ConditionFalse, v1alpha1.ReasonKubeconfigInvalid, err.Error())
			return c.report(ctx, v, before, notReadyResync)
		}
		r = c.start(t, hash, place)
	} else if cfg.BearerToken != "" && cfg.BearerToken != r.t.Token() {
		r.t.SetToken(cfg.BearerToken)
	}
	read := v.read
	if read == "" {
		read = "The kubeconfig was read"
	}
	setCondition(v, v1alpha1.TargetCredentialsValid, metav1.ConditionTrue, v1alpha1.ReasonConnected, read)
	v.status.VirtualNode = r.t.NodeName
	if err := c.retire(ctx, r); err != nil {
		klog.FromContext(ctx).Error(err, "Serving the pods of the target's node of the old form", "target", v.name, "node", r.t.LegacyNodeName)
	}
	c.reportOverlaps(v, r.t)
	c.renew(ctx, v, r.t)

	var h Health
	if r.t.SummaryName() != "" {
		h = c.readSummary(ctx, v, r.t)
	}
	if h.Reason == "" {
		h = r.t.Probe(ctx)
	}
	h = slowNotGone(h, r.t.HeardWithin(c.NotReadyAfter))
	if v.self && c.NoScheduler && h.Reachable && h.Authorized {
		// The cluster answers, so its virtual node stays Ready; but no
		// scheduler here would take the candidates.
		h.Reason, h.Message = v1alpha1.ReasonSchedulerDisabled,
			"This cluster's Flotilla release runs no scheduler (scheduler.enabled=false): candidates sent to it would stay Pending; enable it, or remove this self target"
	}
	if why := r.t.HeldBack(time.Now()); why != "" && h.Reachable && h.Authorized && h.Reason == v1alpha1.ReasonConnected {
		// Its virtual node stays Ready: the pods that run there are not
		// touched; only new ones are not sent.
		h.Reason, h.Message = v1alpha1.ReasonDelegatesLost, why
	}
	h.apply(v, r.t.HasSynced())
	r.t.setHealth(h, time.Now())
	r.observeHealth(h, time.Now(), c.NotReadyAfter)
	resync := c.ResyncPeriod
	if !meta.IsStatusConditionTrue(v.status.Conditions, v1alpha1.TargetReady) {
		resync = notReadyResync
	}
	return c.report(ctx, v, before, resync)
}

// resolve reads the connection of a target; hash covers everything but the
// token, which is renewed in place.
func (c *Controller) resolve(ctx context.Context, v *view) (cfg *rest.Config, hash, reason string, err error) {
	var profile *clusterprofile.ClusterProfile
	if v.profile != nil {
		// Its labels are the node's: read it first, so that a change
		// of them changes the hash.
		if profile, reason, err = c.readProfile(ctx, v); err != nil {
			return nil, "", reason, err
		}
	}
	h := sha256.New()
	fmt.Fprintf(h, "%t\x00%s\x00", v.self, v.namespace)
	for _, k := range slices.Sorted(maps.Keys(v.labels)) {
		fmt.Fprintf(h, "l\x00%s\x00%s\x00", k, v.labels[k])
	}
	for _, k := range slices.Sorted(maps.Keys(v.mapping)) {
		fmt.Fprintf(h, "m\x00%s\x00%s\x00", k, v.mapping[k])
	}
	// A change of the pod networks starts the virtual node again, which
	// looks at every pod of it: IPs appear or go at once.
	for _, cidr := range slices.Sorted(slices.Values(v.podCIDRs)) {
		fmt.Fprintf(h, "c\x00%s\x00", cidr)
	}
	if v.self {
		return c.Self, hex.EncodeToString(h.Sum(nil)), "", nil
	}
	secret := &corev1.Secret{}
	if err := c.Reader.Get(ctx, v.secret, secret); err != nil {
		switch {
		case apierrors.IsNotFound(err):
			return nil, "", v1alpha1.ReasonSecretNotFound, fmt.Errorf("Secret %s not found", v.secret)
		case apierrors.IsForbidden(err):
			return nil, "", v1alpha1.ReasonSecretForbidden, fmt.Errorf("the agent may not read Secret %s: %w", v.secret, err)
		}
		return nil, "", v1alpha1.ReasonSecretNotFound, fmt.Errorf("reading Secret %s: %w", v.secret, err)
	}
	key := v.secretKey
	if key == "" {
		key = "kubeconfig"
	}
	data, ok := secret.Data[key]
	switch {
	case !ok && profile != nil:
		return nil, "", v1alpha1.ReasonClusterProfileInvalid, fmt.Errorf("the token Secret %s of ClusterProfile %s/%s has no key %q", v.secret, profile.Namespace, profile.Name, key)
	case !ok:
		return nil, "", v1alpha1.ReasonKubeconfigInvalid, fmt.Errorf("Secret %s has no key %q", v.secret, key)
	case profile != nil:
		cfg, err = profile.RESTConfig(clusterprofile.Access{
			Provider: v.profile.AccessProvider, Token: strings.TrimSpace(string(data)), AllowedServers: v.profile.AllowedServers,
		})
		if err != nil {
			reason = v1alpha1.ReasonClusterProfileInvalid
			if errors.Is(err, kubeconfig.ErrRefused) {
				reason = v1alpha1.ReasonClusterProfileRefused
			}
			return nil, "", reason, fmt.Errorf("%w (token from Secret %s)", err, v.secret)
		}
	default:
		cfg, err = kubeconfig.RESTConfig(data)
	}
	if err != nil {
		reason = v1alpha1.ReasonKubeconfigInvalid
		if errors.Is(err, kubeconfig.ErrRefused) {
			reason = v1alpha1.ReasonKubeconfigRefused
		}
		return nil, "", reason, fmt.Errorf("Secret %s: %w", v.secret, err)
	}
	v.secretObj, v.secretKey = secret, key
	if name, ok := secret.Data[SummaryKey]; ok {
		v.summary = string(name)
		fmt.Fprintf(h, "s\x00%s\x00", v.summary)
	}
	cfg.QPS, cfg.Burst = c.Self.QPS, c.Self.Burst
	cfg.ContentType, cfg.AcceptContentTypes = c.Self.ContentType, c.Self.AcceptContentTypes
	fmt.Fprintf(h, "%s\x00%s\x00%x\x00%x\x00%x\x00", cfg.Host, cfg.ServerName, cfg.CAData, cfg.CertData, cfg.KeyData)
	return cfg, hex.EncodeToString(h.Sum(nil)), "", nil
}

// readProfile reads the ClusterProfile v names and makes its labels the
// node's, under the ClusterTarget's own.
func (c *Controller) readProfile(ctx context.Context, v *view) (*clusterprofile.ClusterProfile, string, error) {
	key := client.ObjectKey{Namespace: v.profile.Namespace, Name: v.profile.Name}
	p, err := clusterprofile.Read(ctx, c.Reader, key)
	if err != nil {
		switch {
		case meta.IsNoMatchError(err):
			return nil, v1alpha1.ReasonClusterProfileAPIMissing, fmt.Errorf("this cluster serves no ClusterProfile API (%s): install the Cluster Inventory API's CRD, or name a kubeconfig Secret instead", clusterprofile.GroupVersionKind.GroupVersion())
		case apierrors.IsNotFound(err):
			return nil, v1alpha1.ReasonClusterProfileNotFound, fmt.Errorf("ClusterProfile %s not found", key)
		case apierrors.IsForbidden(err):
			return nil, v1alpha1.ReasonForbidden, fmt.Errorf("the agent may not read ClusterProfile %s: %w", key, err)
		}
		return nil, v1alpha1.ReasonClusterProfileInvalid, fmt.Errorf("reading ClusterProfile %s: %w", key, err)
	}
	labels, skipped := p.NodeLabels()
	v.labels = clusterprofile.Merge(labels, v.labels)
	provider, err := p.Provider(v.profile.AccessProvider)
	if err != nil {
		return nil, v1alpha1.ReasonClusterProfileInvalid, err
	}
	v.read = fmt.Sprintf("Reached through ClusterProfile %s (access provider %q), with the token of Secret %s", key, provider.Name, v.secret)
	if len(skipped) > 0 {
		v.read += "; not made node labels: " + strings.Join(skipped, ", ")
	}
	return p, "", nil
}

func (c *Controller) get(name string) *running {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.running[name]
}

// start runs a target: it joins the Set (which gives it the candidate
// handlers), its informer starts, and its virtual node runs until stopped.
func (c *Controller) start(t *Target, hash, place string) *running {
	ctx, cancel := context.WithCancel(c.base)
	r := &running{t: t, hash: hash, place: place, ctx: ctx, cancel: cancel, done: make(chan struct{}), status: vnode.NewStatus(), answered: time.Now()}
	c.mu.Lock()
	c.running[t.Name] = r
	c.mu.Unlock()
	c.Targets.Add(t)
	t.Start(ctx)
	var wg sync.WaitGroup
	if t.SummaryName() != "" {
		wg.Go(func() {
			t.watchSummary(ctx, func(s *v1alpha1.ClusterSummaryStatus) {
				t.SetNamespaces(s.Namespaces)
				t.setSummary(s)
				allocatable, free := Capacity(s)
				r.status.SetResources(allocatable, free, NodeLabels(s))
			})
		})
	}
	wg.Go(func() { runNode(ctx, c.nodeConfig(t, r.status)) })
	go func() {
		defer close(r.done)
		wg.Wait()
	}()
	klog.FromContext(ctx).Info("Target started", "target", t.Name, "node", t.NodeName)
	return r
}

// nodeConfig is the virtual node of a running target.
func (c *Controller) nodeConfig(t *Target, status *vnode.Status) vnode.Config {
	return vnode.Config{
		NodeName:  t.NodeName,
		Target:    nameOnly(t.Name),
		Namespace: t.Namespace,
		// A pod elected for another target is not this node's, even if
		// bound to it (the old namespaced form of that target's node was
		// this node's name).
		Accept:    func(pod *corev1.Pod) bool { return runsOn(pod, t.Name, t.NodeName, "") },
		PodCIDRs:  t.PodCIDRs,
		Labels:    maps.Clone(t.Labels),
		Client:    c.Kube,
		Delegates: Delegates{Target: t, SourceCluster: c.SourceCluster},
		// Losses hold the target back (HeldBack), as its status says
		// from its next look.
		LostDelegate: t.LostDelegate,
		Pods:         c.SourcePods,
		Workers:      c.VNodeWorkers,

		Address:     c.KubeletAddress,
		KubeletPort: c.KubeletPort,
		Status:      status,
	}
}

func (c *Controller) stop(name string) {
	c.mu.Lock()
	r := c.running[name]
	delete(c.running, name)
	c.mu.Unlock()
	if r != nil {
		c.Targets.Remove(r.t)
		r.stop()
	}
}

func (r *running) stop() {
	r.cancel()
	r.stopRetiring()
	<-r.done
	r.t.Shutdown()
}

// newTarget prepares the target v describes, connected with cfg.
func (c *Controller) newTarget(v view, cfg *rest.Config) (*Target, error) {
	podCIDRs, _ := vnode.ParsePodCIDRs(v.podCIDRs) // refusedSpec checked them
	return New(Config{
		Name: v.name, Namespace: v.namespace, Self: v.self, Labels: v.labels,
		NamespaceMapping: v.mapping, PodCIDRs: podCIDRs, REST: cfg, SourceCluster: c.SourceCluster,
		SummaryName: v.summary,
	})
}

// drain handles a deleted target: no new candidates go there, its waiting
// candidates are deleted, and the pods running there stay mirrored until
// they end; then its virtual node is removed and the finalizer released.
func (c *Controller) drain(ctx context.Context, v view) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(v.obj, Finalizer) {
		c.stop(v.name)
		return reconcile.Result{}, nil
	}
	before := v.status.DeepCopy()
	node := protocol.VirtualNodeName(v.namespace, nameOnly(v.name))
	legacy := protocol.LegacyVirtualNodeName(v.namespace, nameOnly(v.name))
	r := c.get(v.name)
	if r == nil && c.podsOf(v.name, node, legacy) > 0 {
		// The agent started while the target drained: connect to it
		// again, so that the pods that still run there stay mirrored and
		// their delegates go with them.
		cfg, hash, _, err := c.resolve(ctx, &v)
		var t *Target
		if err == nil {
			t, err = c.newTarget(v, cfg)
		}
		if err != nil {
			setCondition(v, v1alpha1.TargetReady, metav1.ConditionFalse, "Draining", "Connecting again to drain it: "+err.Error())
			return c.report(ctx, v, before, notReadyResync)
		}
		r = c.start(t, hash, placeOf(v, cfg))
	}
	binding := 0
	if r != nil {
		node = r.t.NodeName
		var err error
		if binding, err = c.drainCandidates(ctx, v.name, r); err != nil {
			setCondition(v, v1alpha1.TargetReady, metav1.ConditionFalse, "Draining", "Deleting the waiting candidates: "+err.Error())
			return c.report(ctx, v, before, notReadyResync)
		}
	}
	if r != nil {
		if err := c.retire(ctx, r); err != nil {
			setCondition(v, v1alpha1.TargetReady, metav1.ConditionFalse, "Draining", "Serving the pods of the node of the old form: "+err.Error())
			return c.report(ctx, v, before, notReadyResync)
		}
	}
	if n := c.podsOf(v.name, node, legacy) + binding; n > 0 && r != nil {
		setCondition(v, v1alpha1.TargetReady, metav1.ConditionFalse, "Draining",
			fmt.Sprintf("Deleted: no new pods go there; %d pods still run there and stay mirrored until they end", n))
		return c.report(ctx, v, before, notReadyResync)
	}
	c.stop(v.name)
	if err := deleteOwnNode(ctx, c.Kube, node, protocol.OwnerOfTargetName(v.name)); err != nil {
		return reconcile.Result{}, fmt.Errorf("deleting virtual node %s of target %s: %w", node, v.name, err)
	}
	patch := client.MergeFrom(v.obj.DeepCopyObject().(client.Object))
	controllerutil.RemoveFinalizer(v.obj, Finalizer)
	if err := c.Client.Patch(ctx, v.obj, patch); err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, fmt.Errorf("removing the finalizer of target %s: %w", v.name, err)
	}
	klog.FromContext(ctx).Info("Target removed", "target", v.name, "node", node)
	return reconcile.Result{}, nil
}

// placeOf is where a target's pods run: its cluster (this one, or the
// API server its kubeconfig names) and the namespaces it maps the source's
// to. A new token, CA or label leaves the place as it is.
func placeOf(v view, cfg *rest.Config) string {
	host := ""
	if cfg != nil {
		host = cfg.Host
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s\x00", ClusterOf(v.self, host))
	for _, k := range slices.Sorted(maps.Keys(v.mapping)) {
		fmt.Fprintf(&b, "%s\x00%s\x00", k, v.mapping[k])
	}
	return b.String()
}

// drainOldPlace drains the place a running target pointed to before its
// spec or kubeconfig moved it (another API server, another namespace
// mapping): as for a deleted target, no new pod goes there, its waiting
// candidates are deleted, and the pods that run there stay mirrored by the
// old connection until they end; only then does the target connect to its
// new place. Connecting at once would look for those pods' delegates where
// they are not, report them lost and leave them running in the old place
// (a StatefulSet's pod would then run twice). draining is false once the
// old place holds nothing of this source's.
func (c *Controller) drainOldPlace(ctx context.Context, v view, r *running, before *v1alpha1.TargetStatus) (draining bool, res reconcile.Result, err error) {
	binding, err := c.drainCandidates(ctx, v.name, r)
	if err != nil {
		setCondition(v, v1alpha1.TargetReady, metav1.ConditionFalse, v1alpha1.ReasonRepointing,
			"The target now points to another place; deleting the waiting candidates of the old one: "+err.Error())
		res, err = c.report(ctx, v, before, notReadyResync)
		return true, res, err
	}
	if n := c.podsOf(v.name, r.t.NodeName, protocol.LegacyVirtualNodeName(v.namespace, nameOnly(v.name))) + binding; n > 0 {
		setCondition(v, v1alpha1.TargetReady, metav1.ConditionFalse, v1alpha1.ReasonRepointing,
			fmt.Sprintf("The target now points to another place (API server or namespaces): the old one is drained first; no new pods go to either while %d pods still run in the old one, mirrored until they end", n))
		res, err = c.report(ctx, v, before, notReadyResync)
		return true, res, err
	}
	klog.FromContext(ctx).Info("Target drained of its old place; connecting to the new one", "target", v.name)
	return false, reconcile.Result{}, nil
}

// drainCandidates takes the running target called name out of the set (no
// new pod goes there) and deletes its candidates that run no pod
// (deleteWaiting, whose binding it returns); then the pods elected there
// and not bound may be elected elsewhere, but those whose candidate runs
// there already.
func (c *Controller) drainCandidates(ctx context.Context, name string, r *running) (binding int, err error) {
	c.Targets.Drain(r.t)
	if binding, err = c.deleteWaiting(ctx, r.t); err != nil {
		return 0, err
	}
	c.Targets.MarkDrained(name)
	return binding, nil
}

// deleteWaiting deletes every candidate in t that runs no pod: all but the
// delegates of source pods bound to t's virtual node and the bound
// candidates of source pods elected there and not bound yet (binding, how
// many: the placement controller binds those pods to the virtual node,
// and the drain waits for them as for any pod that runs there).
func (c *Controller) deleteWaiting(ctx context.Context, t *Target) (binding int, err error) {
	if !t.HasSynced() {
		return 0, fmt.Errorf("target %s: candidates not listed yet: %v", t.Name, t.Err())
	}
	var errs []error
	for _, cand := range t.Candidates() {
		if cand.DeletionTimestamp != nil {
			continue
		}
		switch keptOnDrain(cand, c.sourceOf(cand), t) {
		case delegateKept:
			continue
		case bindingKept:
			binding++
			continue
		}
		if err := t.Delete(ctx, cand.Namespace, cand.Name, cand.UID); err != nil {
			errs = append(errs, err)
		}
	}
	return binding, errors.Join(errs...)
}

// sourceOf is the source pod of a candidate, as the source's cache holds
// it; nil when there is none of its UID.
func (c *Controller) sourceOf(cand *corev1.Pod) *corev1.Pod {
	obj, ok, err := c.SourcePods.GetIndexer().GetByKey(SourceKey(cand))
	if err != nil || !ok {
		return nil
	}
	src, ok := obj.(*corev1.Pod)
	if !ok || string(src.UID) != cand.Labels[protocol.SourceUIDLabel] {
		return nil
	}
	return src
}

// drainKeep is why a draining target's candidate stays.
type drainKeep int

const (
	// deleted: it runs no pod.
	deleted drainKeep = iota
	// delegateKept: the delegate of a source pod bound to the target.
	delegateKept
	// bindingKept: bound in the target, its source pod elected there and
	// not bound yet. It is the pod's running copy: the source pod is bound
	// to it, not elected elsewhere beside it.
	bindingKept
)

// keptOnDrain says whether a draining target t's candidate stays, src
// being its source pod (nil when gone).
func keptOnDrain(cand, src *corev1.Pod, t *Target) drainKeep {
	name := t.Name
	switch {
	case src == nil:
		return deleted
	case t.Runs(src):
		// Its virtual node ends it with its source pod.
		return delegateKept
	case src.DeletionTimestamp != nil:
		return deleted
	}
	e, err := protocol.ParseElection(src.Annotations[protocol.ElectionAnnotation])
	if src.Spec.NodeName == "" && cand.Spec.NodeName != "" && err == nil && e.Elected() && e.Target == name {
		return bindingKept
	}
	return deleted
}

// podsOf counts the source pods that run in the target called name, with
// virtual node node and old-form node legacy (runsOn).
func (c *Controller) podsOf(name, node, legacy string) int {
	n := 0
	for _, obj := range c.SourcePods.GetStore().List() {
		if p, ok := obj.(*corev1.Pod); ok && runsOn(p, name, node, legacy) {
			n++
		}
	}
	return n
}

// SummaryKey of a kubeconfig Secret names the ClusterSummary of the
// source's invitation in the target, which lists the invited namespaces.
const SummaryKey = "summary"

// readSummary reads the invitation's ClusterSummary from the target and
// watches the namespaces it names. A failed read is reported as the
// target's health; an empty Health means it went well.
func (c *Controller) readSummary(ctx context.Context, v view, t *Target) Health {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	sum := &v1alpha1.ClusterSummary{}
	if err := t.cr.Get(ctx, client.ObjectKey{Name: t.SummaryName()}, sum); err != nil {
		h := classify(err)
		if apierrors.IsNotFound(err) {
			h.Reason = v1alpha1.ReasonForbidden
			h.Message = fmt.Sprintf("The target publishes no ClusterSummary %s for this source (invitation deleted?)", t.SummaryName())
		}
		return h
	}
	if err := summary.Validate(&sum.Status); err != nil {
		return Health{Reachable: true, Authorized: true, Reason: v1alpha1.ReasonSummaryInvalid,
			Message: fmt.Sprintf("The target's ClusterSummary %s is not believable: %v", t.SummaryName(), err)}
	}
	t.SetNamespaces(sum.Status.Namespaces)
	v.status.Namespaces = sum.Status.Namespaces
	if len(sum.Status.Namespaces) == 0 {
		return Health{Reachable: true, Authorized: true, Reason: v1alpha1.ReasonForbidden,
			Message: "The target's invitation covers no namespace yet"}
	}
	return Health{}
}

// renew renews the token of the kubeconfig once the share TokenRenewAfter
// of its lifetime has passed, stores it back in the Secret and hands it to
// the running client. A token that is not a ServiceAccount's is left alone.
func (c *Controller) renew(ctx context.Context, v view, t *Target) {
	if v.secretObj == nil || t.Token() == "" {
		return
	}
	claims, err := parseToken(t.Token())
	if err != nil {
		return
	}
	if _, _, ok := claims.serviceAccount(); !ok || claims.Expiry == 0 {
		return
	}
	exp := metav1.NewTime(time.Unix(claims.Expiry, 0))
	v.status.TokenExpirationTime = &exp
	if !renewDue(claims, time.Now(), c.TokenRenewAfter) {
		return
	}
	token, expires, err := t.renewToken(ctx, claims)
	if err == nil {
		var data []byte
		if v.tokenOnly {
			data = []byte(token)
		} else {
			data, err = withToken(v.secretObj, v.secretKey, token)
		}
		if err == nil {
			secret := v.secretObj.DeepCopy()
			secret.Data[v.secretKey] = data
			err = c.Client.Update(ctx, secret)
		}
	}
	if err != nil {
		setCondition(v, v1alpha1.TargetCredentialsValid, metav1.ConditionFalse, v1alpha1.ReasonTokenRenewalFailed,
			fmt.Sprintf("Renewing the token that expires at %s: %v", exp.UTC().Format(time.RFC3339), err))
		return
	}
	t.SetToken(token)
	exp = metav1.NewTime(expires)
	v.status.TokenExpirationTime = &exp
	klog.FromContext(ctx).V(2).Info("Renewed the target's token", "target", t.Name, "expires", expires)
}

// statusConflictRetry is how soon a target whose status write lost a race
// with a newer version is looked at again.
const statusConflictRetry = time.Second

// report writes the status if it changed, with an Event when Ready flips.
func (c *Controller) report(ctx context.Context, v view, before *v1alpha1.TargetStatus, resync time.Duration) (reconcile.Result, error) {
	v.status.ObservedGeneration = v.obj.GetGeneration()
	if equality.Semantic.DeepEqual(before, v.status) {
		return reconcile.Result{RequeueAfter: resync}, nil
	}
	if err := c.Client.Status().Update(ctx, v.obj); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			// A newer version (or its deletion) brings the target back;
			// this look is in case that was missed.
			return reconcile.Result{RequeueAfter: statusConflictRetry}, nil
		}
		return reconcile.Result{}, fmt.Errorf("updating the status of target %s: %w", v.name, err)
	}
	was := meta.FindStatusCondition(before.Conditions, v1alpha1.TargetReady)
	now := meta.FindStatusCondition(v.status.Conditions, v1alpha1.TargetReady)
	if c.Recorder != nil && now != nil && (was == nil || was.Status != now.Status || was.Reason != now.Reason) {
		kind := corev1.EventTypeNormal
		if now.Status != metav1.ConditionTrue {
			kind = corev1.EventTypeWarning
		}
		c.Recorder.Eventf(v.obj, nil, kind, now.Reason, "Connect", "%s", now.Message)
	}
	return reconcile.Result{RequeueAfter: resync}, nil
}

// reportOverlaps sets the Overlapping condition of a running target from
// the targets running beside it. A target that starts or goes is seen by
// the others at their next resync.
func (c *Controller) reportOverlaps(v view, t *Target) {
	me := reachOf(t)
	var others []Reach
	for _, o := range c.Targets.All() {
		others = append(others, reachOf(o))
	}
	if overlaps := Overlaps(me, others); len(overlaps) > 0 {
		setCondition(v, v1alpha1.TargetOverlapping, metav1.ConditionTrue, v1alpha1.ReasonSameClusterAndNamespace, OverlapMessage(me, overlaps))
		return
	}
	setCondition(v, v1alpha1.TargetOverlapping, metav1.ConditionFalse, v1alpha1.ReasonNoOverlap, "No other target of this cluster sends pods of a namespace to the same cluster and namespace")
}

func setCondition(v view, typ string, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&v.status.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: message, ObservedGeneration: v.obj.GetGeneration(),
	})
}

// ReleaseAll deletes the virtual node of every Target and ClusterTarget and
// releases their finalizers, for an uninstall: the agent is gone, so nobody
// would drain them. Pods bound to the deleted nodes are then removed by the
// cluster's pod garbage collector; delegates in the targets stay until the
// targets revoke the invitation.
func ReleaseAll(ctx context.Context, cl client.Client, kube kubernetes.Interface) error {
	var errs []error
	release := func(obj client.Object, node string) {
		owner := protocol.NodeOwner{Namespace: obj.GetNamespace(), Name: obj.GetName()}
		if err := deleteOwnNode(ctx, kube, node, owner); err != nil {
			errs = append(errs, err)
		}
		patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
		if controllerutil.RemoveFinalizer(obj, Finalizer) {
			if err := cl.Patch(ctx, obj, patch); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, err)
			}
		}
	}
	targets := &v1alpha1.TargetList{}
	if err := cl.List(ctx, targets); err != nil {
		return err
	}
	for i := range targets.Items {
		t := &targets.Items[i]
		if err := deleteOwnNode(ctx, kube, protocol.LegacyVirtualNodeName(t.Namespace, t.Name), protocol.NodeOwner{Namespace: t.Namespace, Name: t.Name}); err != nil {
			errs = append(errs, err)
		}
		release(t, protocol.VirtualNodeName(t.Namespace, t.Name))
	}
	clusterTargets := &v1alpha1.ClusterTargetList{}
	if err := cl.List(ctx, clusterTargets); err != nil {
		return err
	}
	for i := range clusterTargets.Items {
		t := &clusterTargets.Items[i]
		release(t, protocol.VirtualNodeName("", t.Name))
	}
	return errors.Join(errs...)
}
