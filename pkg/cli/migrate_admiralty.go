package cli

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/kubeconfig"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// Admiralty's names, as its release v0.17 spells them. They are read here
// and never written: migrate leaves Admiralty's objects as they are.
const (
	admiraltyGroup   = "multicluster.admiralty.io"
	admiraltyVersion = "v1alpha1"
	// admiraltyNamespaceLabel=enabled opts a namespace in to Admiralty.
	admiraltyNamespaceLabel = "multicluster-scheduler"
	// admiraltyElect on a pod (any value) asks Admiralty to place it.
	admiraltyElect = admiraltyGroup + "/elect"
	// admiraltyDefaultKey is the key of the kubeconfig in a Target's
	// Secret when kubeconfigSecret.key is empty.
	admiraltyDefaultKey = "config"
	// admiraltyProviderLabel=admiralty marks Admiralty's virtual nodes.
	admiraltyProviderLabel = "virtual-kubelet.io/provider"
	admiraltyProvider      = "admiralty"
)

// The Admiralty kinds migrate reads.
const (
	kindTarget        = "Target"
	kindClusterTarget = "ClusterTarget"
	kindSource        = "Source"
	kindClusterSource = "ClusterSource"
)

// admiraltyResources are the resources of the kinds migrate reads, in the
// order it reports them: a source's targets first, then a target's
// invitations.
var admiraltyResources = []struct {
	kind       string
	resource   schema.GroupVersionResource
	namespaced bool
}{
	{kindClusterTarget, schema.GroupVersionResource{Group: admiraltyGroup, Version: admiraltyVersion, Resource: "clustertargets"}, false},
	{kindTarget, schema.GroupVersionResource{Group: admiraltyGroup, Version: admiraltyVersion, Resource: "targets"}, true},
	{kindClusterSource, schema.GroupVersionResource{Group: admiraltyGroup, Version: admiraltyVersion, Resource: "clustersources"}, false},
	{kindSource, schema.GroupVersionResource{Group: admiraltyGroup, Version: admiraltyVersion, Resource: "sources"}, true},
}

// admiraltySpecFields are the spec fields of each kind in Admiralty v0.17
// (pkg/apis/multicluster/v1alpha1). A field outside them is reported and
// ignored.
var admiraltySpecFields = map[string][]string{
	kindTarget:        {"self", "kubeconfigSecret", "excludedLabelsRegexp"},
	kindClusterTarget: {"self", "kubeconfigSecret", "excludedLabelsRegexp"},
	kindSource:        {"userName", "serviceAccountName"},
	kindClusterSource: {"userName", "serviceAccount"},
}

// admiraltyPodAnnotations are Admiralty's per-pod annotations other than
// elect, with what a Flotilla user does instead.
var admiraltyPodAnnotations = map[string]string{
	admiraltyGroup + "/no-reservation":                                     "Flotilla has no equivalent: every target runs Flotilla's scheduler, which holds a node for a candidate until it is elected",
	admiraltyGroup + "/use-constraints-from-spec-for-proxy-pod-scheduling": "in Flotilla the pod's own constraints apply in the target; choose clusters with a PlacementPolicy (docs/placement.md)",
	admiraltyGroup + "/proxy-pod-scheduling-constraints":                   "choose clusters with a PlacementPolicy (docs/placement.md): a cluster selector over the targets' labels",
	admiraltyGroup + "/label-keys-to-skip-prefixing":                       "a target's invitation keeps every source label with spec.keepSourceLabels, or none (docs/invitations-reference.md)",
	admiraltyGroup + "/clustername":                                        "Admiralty ignores it since v0.8; choose clusters with a PlacementPolicy (docs/placement.md)",
}

// admiraltyState is what migrate read of one cluster.
type admiraltyState struct {
	// Objects are Admiralty's Targets, ClusterTargets, Sources and
	// ClusterSources, as the API server returned them.
	Objects []unstructured.Unstructured
	// Secrets are the Secrets the targets name, by namespace and name; a
	// Secret absent here was not found.
	Secrets map[types.NamespacedName]*corev1.Secret
	// SecretErrors are why a Secret could not be read (forbidden, say).
	SecretErrors map[types.NamespacedName]string
	// Namespaces opted in to Admiralty.
	Namespaces []string
	// Workloads whose pods ask Admiralty to place them.
	Workloads []admiraltyWorkload
	// VirtualNodes are Admiralty's virtual nodes, with the number of pods
	// bound to each.
	VirtualNodes map[string]int
	// ReroutedServices are Services whose selector Admiralty's service
	// reroute rewrote.
	ReroutedServices []types.NamespacedName
}

// admiraltyWorkload is an object whose pods (or a pod) carry Admiralty's
// elect annotation.
type admiraltyWorkload struct {
	// Kind is the resource kubectl names it by: deployment, statefulset,
	// daemonset, replicaset, job, cronjob or pod.
	Kind        string
	Namespace   string
	Name        string
	Annotations map[string]string
}

// migrateAdmiraltyOptions are what the command line adds to the cluster's
// objects.
type migrateAdmiraltyOptions struct {
	// AgentNamespace is where Flotilla's agent runs: ClusterTargets'
	// Secrets go there.
	AgentNamespace string
	// InviteNamespaces or InviteSelector say where a ClusterSource invites
	// its source; Admiralty's ClusterSource grants every namespace.
	InviteNamespaces []string
	InviteSelector   *metav1.LabelSelector
}

// migration is what migrate would write, and what it could not map.
type migration struct {
	// Objects are Flotilla's objects, Secrets first, then targets, then
	// invitations.
	Objects []client.Object
	// Findings say, per Admiralty object, namespace and workload, what
	// maps to what and what to do.
	Findings []finding
}

// finding is what migrate says of one thing it read.
type finding struct {
	// Subject is what was read: "Admiralty ClusterTarget c2", "namespace shop".
	Subject string
	// Result is what it became, or "not migrated".
	Result string
	// Notes say what is not carried over and why.
	Notes []string
	// Commands are what to run, in order.
	Commands []string
}

// migrated reports whether the finding's subject became a Flotilla object.
func (f finding) migrated() bool { return f.Result != notMigrated }

const notMigrated = "not migrated"

// convertAdmiralty turns what migrate read into Flotilla's objects and the
// findings to print. It is a pure function of its arguments.
func convertAdmiralty(st admiraltyState, o migrateAdmiraltyOptions) migration {
	var m migration
	objs := slices.Clone(st.Objects)
	order := map[string]int{}
	for i, r := range admiraltyResources {
		order[r.kind] = i
	}
	sort.SliceStable(objs, func(i, j int) bool {
		a, b := &objs[i], &objs[j]
		if order[a.GetKind()] != order[b.GetKind()] {
			return order[a.GetKind()] < order[b.GetKind()]
		}
		if a.GetNamespace() != b.GetNamespace() {
			return a.GetNamespace() < b.GetNamespace()
		}
		return a.GetName() < b.GetName()
	})
	var secrets, targets, sources []client.Object
	for i := range objs {
		u := &objs[i]
		f := finding{Subject: "Admiralty " + u.GetKind() + " " + refName(u.GetNamespace(), u.GetName())}
		var out []client.Object
		switch u.GetKind() {
		case kindTarget, kindClusterTarget:
			out = convertTarget(u, st, o, &f)
		case kindSource, kindClusterSource:
			out = convertSource(u, o, &f)
		default:
			f.Result = notMigrated
			f.Notes = append(f.Notes, "not a kind migrate knows")
		}
		for _, obj := range out {
			switch obj.(type) {
			case *corev1.Secret:
				secrets = append(secrets, obj)
			case *v1alpha1.Target, *v1alpha1.ClusterTarget:
				targets = append(targets, obj)
			default:
				sources = append(sources, obj)
			}
		}
		m.Findings = append(m.Findings, f)
	}
	m.Objects = append(append(secrets, targets...), sources...)
	m.Findings = append(m.Findings, optInFindings(st)...)
	return m
}

func refName(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// unknownSpecFields notes the spec fields that Admiralty v0.17 does not
// have: an object written for another release, or by hand.
func unknownSpecFields(u *unstructured.Unstructured, f *finding) {
	spec, _, _ := unstructured.NestedMap(u.Object, "spec")
	known := admiraltySpecFields[u.GetKind()]
	for _, k := range slices.Sorted(maps.Keys(spec)) {
		if !slices.Contains(known, k) {
			f.Notes = append(f.Notes, fmt.Sprintf("spec.%s is not a field of Admiralty's %s (it has %s): ignored", k, u.GetKind(), strings.Join(known, ", ")))
		}
	}
}

// stringField reads a string of the spec; a value of another type is a
// mistake named by its field.
func stringField(u *unstructured.Unstructured, fields ...string) (string, error) {
	v, _, err := unstructured.NestedFieldNoCopy(u.Object, append([]string{"spec"}, fields...)...)
	if err != nil || v == nil {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("spec.%s is a %T, not a string", strings.Join(fields, "."), v)
	}
	return s, nil
}

func boolField(u *unstructured.Unstructured, field string) (bool, error) {
	v, _, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", field)
	if v == nil {
		return false, nil
	}
	b, ok := v.(bool)
	if !ok {
		return false, fmt.Errorf("spec.%s is a %T, not a boolean", field, v)
	}
	return b, nil
}

// convertTarget maps an Admiralty Target or ClusterTarget of a source
// cluster to Flotilla's, with a Secret holding a copy of its kubeconfig
// (Flotilla's agent renews the token in that Secret, so it is never
// Admiralty's own).
func convertTarget(u *unstructured.Unstructured, st admiraltyState, o migrateAdmiraltyOptions, f *finding) []client.Object {
	unknownSpecFields(u, f)
	cluster := u.GetKind() == kindClusterTarget
	fail := func(format string, args ...any) []client.Object {
		f.Result = notMigrated
		f.Notes = append(f.Notes, fmt.Sprintf(format, args...))
		return nil
	}
	if v, _ := stringField(u, "excludedLabelsRegexp"); v != "" {
		f.Notes = append(f.Notes, "spec.excludedLabelsRegexp has no equivalent: Flotilla's virtual node copies no label of the target's nodes; it carries the labels given in spec.labels")
	}
	self, err := boolField(u, "self")
	if err != nil {
		return fail("%v", err)
	}
	ks, hasSecret, err := unstructured.NestedMap(u.Object, "spec", "kubeconfigSecret")
	if err != nil {
		return fail("spec.kubeconfigSecret is not an object: %v", err)
	}
	switch {
	case self && hasSecret:
		return fail("both spec.self and spec.kubeconfigSecret are set: a Flotilla target is one or the other; create it with the one you mean")
	case !self && !hasSecret:
		return fail("neither spec.self nor spec.kubeconfigSecret is set: it names no cluster")
	}

	name, ns := u.GetName(), u.GetNamespace()
	vnode := protocol.VirtualNodeName(ns, name)
	if self {
		f.Result = fmt.Sprintf("%s %s (self; virtual node %s)", u.GetKind(), refName(ns, name), vnode)
		if cluster {
			ct := &v1alpha1.ClusterTarget{TypeMeta: typeMeta(kindClusterTarget), ObjectMeta: migratedMeta("", name)}
			ct.Spec.Self = true
			return []client.Object{ct}
		}
		t := &v1alpha1.Target{TypeMeta: typeMeta(kindTarget), ObjectMeta: migratedMeta(ns, name)}
		t.Spec.Self = true
		return []client.Object{t}
	}

	secretName, _ := ks["name"].(string)
	key, _ := ks["key"].(string)
	kcContext, _ := ks["context"].(string)
	for _, field := range []string{"name", "namespace", "key", "context"} {
		if v, ok := ks[field]; ok && v != nil {
			if _, isString := v.(string); !isString {
				return fail("spec.kubeconfigSecret.%s is a %T, not a string", field, v)
			}
		}
	}
	secretNS := ns
	if cluster {
		secretNS, _ = ks["namespace"].(string)
		if secretNS == "" {
			return fail("spec.kubeconfigSecret.namespace is empty: a ClusterTarget's Secret needs one")
		}
	}
	if secretName == "" {
		return fail("spec.kubeconfigSecret.name is empty")
	}
	if key == "" {
		key = admiraltyDefaultKey
	}
	joinHint := fmt.Sprintf("in the target, invite this cluster (kubectl flotilla invite CLUSTER --namespaces ... -o %s.yaml); here: kubectl flotilla join %s --kubeconfig-from %s.yaml", name, name, name)
	if !cluster {
		joinHint = fmt.Sprintf("in the target, invite this cluster into namespace %s; here, write the kubeconfig into a Secret of namespace %s and name it in a Target (docs/join-a-target.md)", ns, ns)
	}
	from := types.NamespacedName{Namespace: secretNS, Name: secretName}
	if msg, ok := st.SecretErrors[from]; ok {
		f.Commands = append(f.Commands, joinHint)
		return fail("reading Secret %s: %s", from, msg)
	}
	secret, ok := st.Secrets[from]
	if !ok {
		f.Commands = append(f.Commands, joinHint)
		return fail("Secret %s, which spec.kubeconfigSecret names, does not exist", from)
	}
	data, ok := secret.Data[key]
	if !ok {
		f.Commands = append(f.Commands, joinHint)
		return fail("Secret %s has no key %q", from, key)
	}
	copied, err := flotillaKubeconfig(data, kcContext)
	if err != nil {
		f.Commands = append(f.Commands, joinHint)
		return fail("the kubeconfig of Secret %s (key %s): %v", from, key, err)
	}

	flotillaSecretNS := ns
	if cluster {
		flotillaSecretNS = o.AgentNamespace
	}
	flotillaSecret := &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: migratedMeta(flotillaSecretNS, SecretPrefix+name),
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{protocol.InvitationKubeconfigKey: copied},
	}
	via := ""
	if kcContext != "" {
		via = ", context " + kcContext
	}
	f.Result = fmt.Sprintf("%s %s (virtual node %s), with a copy of the kubeconfig of Secret %s (key %s%s) in Secret %s/%s",
		u.GetKind(), refName(ns, name), vnode, from, key, via, flotillaSecretNS, flotillaSecret.Name)
	f.Notes = append(f.Notes,
		"the target admits this identity's candidates once its own Admiralty Source or ClusterSource is migrated (or a Flotilla invitation names the identity), and only in the namespaces that invitation names",
		"the Secret names no ClusterSummary: until it does, the agent lists pods in every namespace of the target, which the invited identity may not do; add the name the target's invitation reports in status.summary:")
	f.Commands = append(f.Commands, fmt.Sprintf(`kubectl -n %s patch secret %s --type merge -p '{"stringData":{"%s":"SUMMARY"}}'`,
		flotillaSecretNS, flotillaSecret.Name, protocol.InvitationSummaryKey))
	ref := v1alpha1.LocalSecretKeyRef{Name: flotillaSecret.Name, Key: protocol.InvitationKubeconfigKey}
	if cluster {
		ct := &v1alpha1.ClusterTarget{TypeMeta: typeMeta(kindClusterTarget), ObjectMeta: migratedMeta("", name)}
		ct.Spec.KubeconfigSecretRef = &v1alpha1.SecretKeyRef{LocalSecretKeyRef: ref, Namespace: flotillaSecretNS}
		return []client.Object{flotillaSecret, ct}
	}
	t := &v1alpha1.Target{TypeMeta: typeMeta(kindTarget), ObjectMeta: migratedMeta(ns, name)}
	t.Spec.KubeconfigSecretRef = &ref
	return []client.Object{flotillaSecret, t}
}

// flotillaKubeconfig is the kubeconfig Admiralty would use (the context
// named, or the current one) alone, if Flotilla's agent would accept it.
func flotillaKubeconfig(data []byte, context string) ([]byte, error) {
	kc, err := clientcmd.Load(data)
	if err != nil {
		return nil, fmt.Errorf("not a kubeconfig: %w", err)
	}
	if context != "" {
		if _, ok := kc.Contexts[context]; !ok {
			return nil, fmt.Errorf("it has no context %q (spec.kubeconfigSecret.context)", context)
		}
		kc.CurrentContext = context
	}
	if _, ok := kc.Contexts[kc.CurrentContext]; !ok {
		return nil, fmt.Errorf("its current-context %q names no context", kc.CurrentContext)
	}
	// Only what the context uses is copied: Flotilla judges every entry
	// of a kubeconfig, and a copy should carry no credential it does not use.
	if err := clientcmdapi.MinifyConfig(kc); err != nil {
		return nil, err
	}
	out, err := clientcmd.Write(*kc)
	if err != nil {
		return nil, err
	}
	if _, err := kubeconfig.RESTConfig(out); err != nil {
		return nil, fmt.Errorf("Flotilla's agent would refuse it: %w", err)
	}
	return out, nil
}

// convertSource maps an Admiralty Source or ClusterSource of a target
// cluster to a Flotilla invitation of the same identity. The source's
// clusterName is taken to be the object's name.
func convertSource(u *unstructured.Unstructured, o migrateAdmiraltyOptions, f *finding) []client.Object {
	unknownSpecFields(u, f)
	fail := func(format string, args ...any) []client.Object {
		f.Result = notMigrated
		f.Notes = append(f.Notes, fmt.Sprintf(format, args...))
		return nil
	}
	name, ns := u.GetName(), u.GetNamespace()
	cluster := u.GetKind() == kindClusterSource
	user, err := stringField(u, "userName")
	if err != nil {
		return fail("%v", err)
	}
	var sa *v1alpha1.ServiceAccountRef
	if cluster {
		ref, has, err := unstructured.NestedStringMap(u.Object, "spec", "serviceAccount")
		if err != nil {
			return fail("spec.serviceAccount is not an object of strings: %v", err)
		}
		if has {
			if ref["name"] == "" || ref["namespace"] == "" {
				return fail("spec.serviceAccount needs a name and a namespace")
			}
			sa = &v1alpha1.ServiceAccountRef{Namespace: ref["namespace"], Name: ref["name"]}
		}
	} else {
		saName, err := stringField(u, "serviceAccountName")
		if err != nil {
			return fail("%v", err)
		}
		if saName != "" {
			sa = &v1alpha1.ServiceAccountRef{Namespace: ns, Name: saName}
		}
	}
	if errs := validation.IsValidLabelValue(name); len(errs) > 0 || name == "" {
		return fail("its name %q cannot be a Flotilla clusterName (a label value: %s); invite the source with kubectl flotilla invite", name, strings.Join(errs, "; "))
	}
	common := v1alpha1.SourceCommon{ClusterName: name}
	switch {
	case sa != nil:
		common.Identity.ServiceAccount = sa
		if user != "" {
			f.Notes = append(f.Notes, fmt.Sprintf("it also names user %q: a Flotilla invitation names one identity; the ServiceAccount is invited, invite the user under another name if it sends pods too", user))
		}
	case user != "":
		common.Identity.User = user
	default:
		return fail("it names neither a user nor a ServiceAccount: there is no one to invite")
	}
	if cluster && len(o.InviteNamespaces) == 0 && o.InviteSelector == nil {
		return fail("Admiralty's ClusterSource lets its identity into every namespace; a Flotilla ClusterSource names its namespaces: run migrate again with --namespaces or --namespace-selector")
	}
	f.Notes = append(f.Notes,
		fmt.Sprintf("the source's Flotilla agent must run with clusterName %s (the chart's value clusterName): its candidates are admitted only under that name", name),
		"once it is Ready, its status.summary names the ClusterSummary that the source's Secret for this target should name (key summary)")
	if !cluster {
		s := &v1alpha1.Source{TypeMeta: typeMeta(kindSource), ObjectMeta: migratedMeta(ns, name)}
		s.Spec.SourceCommon = common
		f.Result = fmt.Sprintf("Source %s/%s inviting %s into namespace %s", ns, name, identityName(common.Identity), ns)
		return []client.Object{s}
	}
	cs := &v1alpha1.ClusterSource{TypeMeta: typeMeta(kindClusterSource), ObjectMeta: migratedMeta("", name)}
	cs.Spec.SourceCommon = common
	if len(o.InviteNamespaces) > 0 {
		cs.Spec.Namespaces = slices.Clone(o.InviteNamespaces)
		f.Result = fmt.Sprintf("ClusterSource %s inviting %s into namespaces %s", name, identityName(common.Identity), strings.Join(o.InviteNamespaces, ", "))
	} else {
		cs.Spec.NamespaceSelector = o.InviteSelector.DeepCopy()
		f.Result = fmt.Sprintf("ClusterSource %s inviting %s into the namespaces labelled %s", name, identityName(common.Identity), metav1.FormatLabelSelector(o.InviteSelector))
	}
	return []client.Object{cs}
}

func typeMeta(kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: kind}
}

func migratedMeta(namespace, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{"app.kubernetes.io/managed-by": "kubectl-flotilla"}}
}

// optInFindings say how to move each namespace and workload opted in to
// Admiralty over to Flotilla, and what becomes of the pods on Admiralty's
// virtual nodes and of rerouted Services. migrate changes none of them.
func optInFindings(st admiraltyState) []finding {
	var out []finding
	for _, ns := range slices.Sorted(slices.Values(st.Namespaces)) {
		out = append(out, finding{
			Subject: "namespace " + ns,
			Result:  fmt.Sprintf("opted in to Admiralty (%s=enabled)", admiraltyNamespaceLabel),
			Notes:   []string{"switch it when its targets are Ready: this stops Admiralty's webhook there and starts Flotilla's, for pods created from then on"},
			Commands: []string{fmt.Sprintf("kubectl label namespace %s %s- %s=true",
				ns, admiraltyNamespaceLabel, protocol.NamespaceEnabledLabel)},
		})
	}
	workloads := slices.Clone(st.Workloads)
	sort.Slice(workloads, func(i, j int) bool {
		a, b := workloads[i], workloads[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		return a.Name < b.Name
	})
	for _, w := range workloads {
		f := finding{Subject: fmt.Sprintf("%s %s/%s", w.Kind, w.Namespace, w.Name), Result: "asks Admiralty to place its pods (" + admiraltyElect + ")"}
		for _, k := range slices.Sorted(maps.Keys(w.Annotations)) {
			if instead, ok := admiraltyPodAnnotations[k]; ok {
				f.Notes = append(f.Notes, fmt.Sprintf("annotation %s: %s", k, instead))
			}
		}
		if w.Kind == "pod" {
			f.Notes = append(f.Notes, "a pod is opted in when it is created: recreate it with the label "+protocol.ElectLabel+"=true and without the annotation "+admiraltyElect)
		} else {
			patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:null},"labels":{%q:"true"}}}`, admiraltyElect, protocol.ElectLabel)
			patch = `{"spec":{"template":` + patch + `}}`
			if w.Kind == "cronjob" {
				patch = `{"spec":{"jobTemplate":` + patch + `}}`
			}
			f.Notes = append(f.Notes, "the patch changes the pod template: the workload replaces its pods, and the new ones go through Flotilla")
			f.Commands = append(f.Commands, fmt.Sprintf("kubectl -n %s patch %s %s --type merge -p '%s'", w.Namespace, w.Kind, w.Name, patch))
		}
		out = append(out, f)
	}
	for _, node := range slices.Sorted(maps.Keys(st.VirtualNodes)) {
		out = append(out, finding{
			Subject: "node " + node,
			Result:  fmt.Sprintf("Admiralty's virtual node, with %d pods", st.VirtualNodes[node]),
			Notes:   []string{"its pods keep running in their target until their workload replaces them; keep Admiralty installed until the node has none"},
		})
	}
	for _, svc := range st.ReroutedServices {
		out = append(out, finding{
			Subject:  "service " + svc.String(),
			Result:   "its selector was rewritten by Admiralty's service reroute (keys prefixed " + admiraltyGroup + "/)",
			Notes:    []string{"Flotilla reroutes no Service: give it back its own selector once its pods run through Flotilla (the prefix replaced any domain its keys had)"},
			Commands: []string{fmt.Sprintf("kubectl -n %s edit service %s", svc.Namespace, svc.Name)},
		})
	}
	return out
}

// podTemplateOptedIn reports whether annotations opt pods in to Admiralty.
func podTemplateOptedIn(annotations map[string]string) bool {
	_, ok := annotations[admiraltyElect]
	return ok
}

// admiraltyAnnotations keeps the Admiralty annotations of a pod template.
func admiraltyAnnotations(annotations map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range annotations {
		if strings.HasPrefix(k, admiraltyGroup+"/") {
			out[k] = v
		}
	}
	return out
}

// rerouted reports whether Admiralty's service reroute rewrote a Service's
// selector: every key under its prefix, and the Cilium global-service mark
// it sets beside.
func rerouted(svc *corev1.Service) bool {
	if len(svc.Spec.Selector) == 0 || svc.Annotations["io.cilium/global-service"] != "true" {
		return false
	}
	for k := range svc.Spec.Selector {
		if !strings.HasPrefix(k, admiraltyGroup+"/") {
			return false
		}
	}
	return true
}
