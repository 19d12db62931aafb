package invitation

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// This file holds the CEL of the admission policy that keeps an invited
// identity, which may send any request its RBAC allows straight to this
// API server, from getting more than the protocol needs: by class, not by
// instance. Each rule is one Validation whose message names the field it
// refuses, so that an operator reading the source's error knows what to
// change.

// What a request is, in CEL.
const (
	celIsToken  = "request.resource.resource == 'serviceaccounts'"
	celIsPod    = "request.resource.resource == 'pods'"
	celIsSecret = "request.resource.resource == 'secrets'"
	celIsCreate = "request.operation == 'CREATE'"
	celIsUpdate = "request.operation == 'UPDATE'"
	celIsDelete = "request.operation == 'DELETE'"
)

// baselineCapabilities are the capabilities the Pod Security Standards'
// baseline profile lets a container add.
var baselineCapabilities = []string{
	"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
	"NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}

// baselineSysctls are the namespaced sysctls the baseline profile allows
// (its list as of Kubernetes 1.32, the newest it changed).
var baselineSysctls = []string{
	"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
	"net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
	"net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
	"net.ipv4.tcp_keepalive_probes", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem",
}

// baselineSELinuxTypes are the SELinux types the baseline profile allows.
var baselineSELinuxTypes = []string{"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}

// tokenSecretTypes are the Secret types a controller of this cluster fills
// with a credential: a Secret of either, written by the source, would hand
// a long-lived token to whoever mounts it.
var tokenSecretTypes = []string{"kubernetes.io/service-account-token", "bootstrap.kubernetes.io/token"}

// flotillaLabelKey matches the label keys of Flotilla's domain: its
// prefix, and its subdomains' (the source's own labels, carried under
// protocol.SourceLabelPrefix). Nothing of the target selects those by
// accident.
var flotillaLabelKey = "^([a-z0-9]([-a-z0-9]*[a-z0-9])?\\.)*" + regexp.QuoteMeta(protocol.Prefix)

// protocolLabels tie an object to its source (and a candidate to the
// source's target that made it); they never change once set.
var protocolLabels = []string{protocol.CandidateLabel, protocol.SourceClusterLabel, protocol.TargetLabel, protocol.SourceUIDLabel, protocol.SourceNameLabel, protocol.CopyLabel}

// celList is a CEL list literal of strings.
func celList(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// everyContainer is true when p holds for every container, init container
// and ephemeral container of the pod, each named c. The three lists are
// walked apart: they are of different types to the API server's CEL.
func everyContainer(p string) string {
	return "[object.spec.containers, object.spec.?initContainers.orValue([]), object.spec.?ephemeralContainers.orValue([])].all(cs, cs.all(c, " + p + "))"
}

// podSC is a field of the pod's securityContext, optional.
func podSC(path string) string { return "object.spec.?securityContext.?" + path }

// rule is one validation before the guard that says what it applies to.
type rule struct {
	expr, msg string
}

// onPods applies rules to pods written (created or updated), onCreate to
// pods created only.
func onPods(rs ...rule) []admissionregistrationv1.Validation {
	return guarded("!("+celIsPod+") || "+celIsDelete, rs)
}

func onPodCreate(rs ...rule) []admissionregistrationv1.Validation {
	return guarded("!("+celIsPod+") || !("+celIsCreate+")", rs)
}

func guarded(skip string, rs []rule) []admissionregistrationv1.Validation {
	out := make([]admissionregistrationv1.Validation, len(rs))
	for i, r := range rs {
		out[i] = admissionregistrationv1.Validation{Expression: skip + " || (" + r.expr + ")", Message: r.msg}
	}
	return out
}

// schedulingValidations keep a candidate in the hands of this cluster's
// Flotilla scheduler, its allowance and its quota: a pod created with a
// node skips the scheduler. The scheduler itself binds through
// pods/binding, which the identity may not; an UPDATE cannot change
// spec.nodeName, so only CREATE is checked (a bound candidate's updates
// carry the node its scheduler chose).
func (inv Invitation) schedulingValidations() []admissionregistrationv1.Validation {
	src := inv.Spec.ClusterName
	return onPodCreate(rule{
		expr: "object.spec.?nodeName.orValue('') == ''",
		msg:  fmt.Sprintf("spec.nodeName: source %s may not choose a node; candidates are scheduled by the flotilla scheduler", src),
	})
}

// priorityValidations keep a candidate from choosing how much it preempts.
// The Priority admission plugin resolves spec.priority from the class and
// refuses a pod whose spec.priority disagrees; where it did not run, a
// pod without a class must not carry a priority of its own.
func (inv Invitation) priorityValidations() []admissionregistrationv1.Validation {
	src := inv.Spec.ClusterName
	allowed := []string{""}
	for _, c := range inv.Spec.AllowPriorityClasses {
		if !strings.HasPrefix(c, "system-") {
			allowed = append(allowed, c)
		}
	}
	return onPodCreate(
		rule{
			expr: "object.spec.?priorityClassName.orValue('') in " + celList(allowed),
			msg: fmt.Sprintf("spec.priorityClassName: source %s may only name a PriorityClass its invitation allows (spec.allowPriorityClasses: %s), never a system- one",
				src, strings.Join(allowed[1:], ", ")),
		},
		rule{
			expr: "object.spec.?priorityClassName.orValue('') != '' || object.spec.?priority.orValue(0) == 0",
			msg:  fmt.Sprintf("spec.priority: source %s may not set a candidate's priority; it comes from the PriorityClass", src),
		},
	)
}

// baselineValidations are the controls of the Pod Security Standards'
// baseline profile beyond the host namespaces, hostPath volumes and
// privileged containers that Policy checks itself, as
// k8s.io/pod-security-admission checks them at version latest.
func (inv Invitation) baselineValidations() []admissionregistrationv1.Validation {
	src := inv.Spec.ClusterName
	not := func(field, what string) string {
		return fmt.Sprintf("%s: the invitation of source %s does not allow %s (Pod Security Standards, baseline)", field, src, what)
	}
	selinux := func(o string) string {
		return fmt.Sprintf("(%s.?type.orValue('') in %s && %s.?user.orValue('') == '' && %s.?role.orValue('') == '')", o, celList(baselineSELinuxTypes), o, o)
	}
	noHost := func(handler string) string {
		return fmt.Sprintf("c.?%s.?httpGet.?host.orValue('') == '' && c.?%s.?tcpSocket.?host.orValue('') == ''", handler, handler)
	}
	const appArmorAnnotation = "container.apparmor.security.beta.kubernetes.io/"
	// Annotations may change after creation; the spec's fields these rules
	// read may not (an update may change only images, tolerations,
	// activeDeadlineSeconds and scheduling gates), so they are checked at
	// creation only, which spares the evaluation on every annotation patch
	// of the protocol.
	appArmorAnnotations := rule{
		expr: fmt.Sprintf("!has(object.metadata.annotations) || object.metadata.annotations.all(k, !k.startsWith(%q) || object.metadata.annotations[k] in ['', 'runtime/default'] || object.metadata.annotations[k].startsWith('localhost/'))", appArmorAnnotation),
		msg:  not("metadata.annotations["+appArmorAnnotation+"*]", "an AppArmor profile other than runtime/default or localhost/*"),
	}
	return append(onPods(appArmorAnnotations), onPodCreate(
		rule{
			expr: "!" + podSC("windowsOptions.?hostProcess.orValue(false)") + " && " +
				everyContainer("!c.?securityContext.?windowsOptions.?hostProcess.orValue(false)"),
			msg: not("securityContext.windowsOptions.hostProcess", "Windows HostProcess containers"),
		},
		rule{
			expr: everyContainer("c.?securityContext.?capabilities.?add.orValue([]).all(x, x in " + celList(baselineCapabilities) + ")"),
			msg:  not("securityContext.capabilities.add", "capabilities beyond "+strings.Join(baselineCapabilities, ", ")),
		},
		rule{
			expr: everyContainer("c.?ports.orValue([]).all(p, p.?hostPort.orValue(0) == 0)"),
			msg:  not("ports[].hostPort", "host ports"),
		},
		rule{
			expr: podSC("appArmorProfile.?type.orValue('RuntimeDefault')") + " in ['RuntimeDefault', 'Localhost'] && " +
				everyContainer("c.?securityContext.?appArmorProfile.?type.orValue('RuntimeDefault') in ['RuntimeDefault', 'Localhost']"),
			msg: not("securityContext.appArmorProfile.type", "an AppArmor profile other than RuntimeDefault or Localhost"),
		},
		rule{
			expr: selinux(podSC("seLinuxOptions.orValue({})")) + " && " + everyContainer(selinux("c.?securityContext.?seLinuxOptions.orValue({})")),
			msg:  not("securityContext.seLinuxOptions", "an SELinux user or role, or a type other than "+strings.Join(baselineSELinuxTypes[1:], ", ")),
		},
		rule{
			// In a user namespace an unmasked /proc is the user
			// namespace's, which baseline allows since 1.35.
			expr: "object.spec.?hostUsers.orValue(true) == false || " + everyContainer("c.?securityContext.?procMount.orValue('Default') == 'Default'"),
			msg:  not("securityContext.procMount", "an unmasked /proc outside a user namespace"),
		},
		rule{
			expr: podSC("seccompProfile.?type.orValue('RuntimeDefault')") + " in ['RuntimeDefault', 'Localhost'] && " +
				everyContainer("c.?securityContext.?seccompProfile.?type.orValue('RuntimeDefault') in ['RuntimeDefault', 'Localhost']"),
			msg: not("securityContext.seccompProfile.type", "seccomp profile Unconfined"),
		},
		rule{
			expr: podSC("sysctls.orValue([]).all(s, s.name in " + celList(baselineSysctls) + ")"),
			msg:  not("spec.securityContext.sysctls", "sysctls outside the safe set"),
		},
		rule{
			expr: everyContainer(strings.Join([]string{
				noHost("livenessProbe"), noHost("readinessProbe"), noHost("startupProbe"),
				noHost("lifecycle.?postStart"), noHost("lifecycle.?preStop"),
			}, " && ")),
			msg: not("httpGet.host and tcpSocket.host of probes and lifecycle handlers", "a host other than the pod's own"),
		},
	)...)
}

// delegationValidations refuse what would make this cluster create or
// hand out something on the identity's behalf: a PersistentVolumeClaim
// (generic ephemeral volumes), one of its own claims mounted by name,
// ResourceClaims, a token of another
// ServiceAccount of the namespace (run as it, then exec), a token or pod
// certificate projected into the candidate, a Secret the token controller
// fills.
func (inv Invitation) delegationValidations() []admissionregistrationv1.Validation {
	src := inv.Spec.ClusterName
	var pods []rule
	if !inv.Spec.AllowEphemeralVolumes {
		pods = append(pods, rule{
			expr: "object.spec.?volumes.orValue([]).all(v, !has(v.ephemeral))",
			msg:  fmt.Sprintf("spec.volumes[].ephemeral: the invitation of source %s does not allow generic ephemeral volumes (spec.allowEphemeralVolumes): this cluster would create their claims", src),
		})
	}
	if !inv.Spec.AllowPersistentVolumeClaims {
		pods = append(pods, rule{
			expr: "object.spec.?volumes.orValue([]).all(v, !has(v.persistentVolumeClaim))",
			msg:  fmt.Sprintf("spec.volumes[].persistentVolumeClaim: the invitation of source %s does not allow mounting this cluster's PersistentVolumeClaims (spec.allowPersistentVolumeClaims)", src),
		})
	}
	if !inv.Spec.AllowResourceClaims {
		pods = append(pods, rule{
			expr: "size(object.spec.?resourceClaims.orValue([])) == 0",
			msg:  fmt.Sprintf("spec.resourceClaims: the invitation of source %s does not allow resource claims (spec.allowResourceClaims)", src),
		})
	}
	pods = append(pods,
		rule{
			// The ServiceAccount admission plugin has filled in
			// "default" by now, and copied serviceAccount over.
			expr: "object.spec.?serviceAccountName.orValue('') in ['', 'default'] && object.spec.?serviceAccount.orValue('') in ['', 'default']",
			msg:  fmt.Sprintf("spec.serviceAccountName: source %s may not run a candidate as a ServiceAccount of this cluster", src),
		},
		rule{
			// Automounting adds such a volume before this policy runs.
			expr: "object.spec.?volumes.orValue([]).all(v, v.?projected.?sources.orValue([]).all(s, !has(s.serviceAccountToken) && !has(s.podCertificate)))",
			msg:  fmt.Sprintf("spec.volumes[].projected.sources[].serviceAccountToken: source %s may not give a candidate a token or certificate of this cluster (set automountServiceAccountToken: false)", src),
		},
	)
	// The spec's fields these read cannot change after creation.
	out := onPodCreate(pods...)
	return append(out, guarded("!("+celIsSecret+") || "+celIsDelete, []rule{{
		expr: "!(object.?type.orValue('') in " + celList(tokenSecretTypes) + ")",
		msg:  fmt.Sprintf("type: source %s may not create Secrets of type %s, which this cluster fills with a token", src, strings.Join(tokenSecretTypes, " or ")),
	}})...)
}

// affinityValidations confine a candidate's pod (anti-)affinity terms to
// the source's own candidates in the candidate's namespace, as the agent
// writes them when the invitation does not keep the source's labels
// (candidate.OfSource): no namespaces, no namespace selector, and a label
// selector that requires the source-cluster label of this source. A
// candidate's terms act on the pods that come to its node after it (a
// required anti-affinity keeps them off, a preferred one scores them), so
// a term that reached the target's own pods (by the absence of a key, or
// in other namespaces) would steer this cluster's scheduling of them. A
// nil selector matches no pod. Under keepSourceLabels the source's terms
// select this cluster's pods by their labels as they are: that is what
// the invitation trusts the source with.
func (inv Invitation) affinityValidations() []admissionregistrationv1.Validation {
	if inv.Spec.KeepSourceLabels {
		return nil
	}
	src := inv.Spec.ClusterName
	key := strconv.Quote(protocol.SourceClusterLabel)
	confined := func(t string) string {
		return fmt.Sprintf("(!has(%[1]s.namespaceSelector) && size(%[1]s.?namespaces.orValue([])) == 0 && (!has(%[1]s.labelSelector) || "+
			"%[1]s.labelSelector.?matchExpressions.orValue([]).exists(e, e.key == %[2]s && e.operator == 'In' && e.?values.orValue([]) == [%[3]s]) || "+
			"(%[2]s in %[1]s.labelSelector.?matchLabels.orValue({}) && %[1]s.labelSelector.matchLabels[%[2]s] == %[3]s)))",
			t, key, strconv.Quote(src))
	}
	var parts []string
	for _, kind := range []string{"podAffinity", "podAntiAffinity"} {
		base := "object.spec.?affinity.?" + kind
		parts = append(parts,
			base+".?requiredDuringSchedulingIgnoredDuringExecution.orValue([]).all(t, "+confined("t")+")",
			base+".?preferredDuringSchedulingIgnoredDuringExecution.orValue([]).all(w, "+confined("w.podAffinityTerm")+")")
	}
	// The spec's affinity cannot change after creation.
	return onPodCreate(rule{
		expr: strings.Join(parts, " && "),
		msg: fmt.Sprintf("spec.affinity: a pod (anti-)affinity term of source %s may select only its own candidates in the candidate's namespace: no namespaces or namespaceSelector, and a labelSelector requiring %s In [%s] (as the agent writes it), since a candidate's terms steer where this cluster schedules the pods that come after it",
			src, protocol.SourceClusterLabel, src),
	})
}

// metadataValidations keep what the identity writes from changing how
// this cluster treats its own objects: finalizers (deletion waits for the
// source), owners (a candidate counted by a ReplicaSet, a copy that holds
// its owner's deletion), and labels that this cluster's Services,
// NetworkPolicies and controllers select by.
func (inv Invitation) metadataValidations() []admissionregistrationv1.Validation {
	src := inv.Spec.ClusterName
	labels := "object.metadata.?labels.orValue({})"
	oldLabels := "oldObject.metadata.?labels.orValue({})"
	out := guarded(celIsDelete, []rule{{
		// On UPDATE the finalizers stay as they were: one this cluster's
		// controllers set is theirs to remove.
		expr: fmt.Sprintf("%s ? size(object.metadata.?finalizers.orValue([])) == 0 : (object.metadata.?finalizers.orValue([]).all(f, f in oldObject.metadata.?finalizers.orValue([])) && oldObject.metadata.?finalizers.orValue([]).all(f, f in object.metadata.?finalizers.orValue([])))", celIsCreate),
		msg:  fmt.Sprintf("metadata.finalizers: source %s may not add or remove finalizers", src),
	}})
	out = append(out, guarded("!("+celIsPod+") || "+celIsDelete, []rule{{
		expr: fmt.Sprintf("%s ? size(object.metadata.?ownerReferences.orValue([])) == 0 : object.metadata.?ownerReferences.orValue([]) == oldObject.metadata.?ownerReferences.orValue([])", celIsCreate),
		msg:  fmt.Sprintf("metadata.ownerReferences: source %s may not give a candidate an owner", src),
	}})...)
	// A copy is owned by the candidates that use it, as pkg/objects
	// writes it: a Pod, neither controller nor blocking its deletion.
	out = append(out, guarded(celIsPod+" || "+celIsDelete, []rule{{
		expr: "object.metadata.?ownerReferences.orValue([]).all(r, r.apiVersion == 'v1' && r.kind == 'Pod' && !r.?controller.orValue(false) && !r.?blockOwnerDeletion.orValue(false))",
		msg:  fmt.Sprintf("metadata.ownerReferences: source %s may only make a copy owned by Pods (apiVersion v1), without controller or blockOwnerDeletion", src),
	}})...)
	if !inv.Spec.KeepSourceLabels {
		// A label someone else set before stays: the source may not
		// add, change or remove one.
		ours := "k.matches(" + strconv.Quote(flotillaLabelKey) + ")"
		expr := fmt.Sprintf("%s ? %s.all(k, %s) : (%s.all(k, %s || (k in %s && %s[k] == %s[k])) && %s.all(k, %s || k in %s))",
			celIsCreate, labels, ours,
			labels, ours, oldLabels, oldLabels, labels,
			oldLabels, ours, labels)
		out = append(out, guarded(celIsDelete, []rule{{
			expr: expr,
			msg:  fmt.Sprintf("metadata.labels: source %s may only set labels under %s or its subdomains (the invitation does not set spec.keepSourceLabels)", src, protocol.Prefix),
		}})...)
	}
	var same []string
	for _, k := range protocolLabels {
		q := strconv.Quote(k)
		same = append(same, fmt.Sprintf("(%s in %s) == (%s in %s) && (!(%s in %s) || %s[%s] == %s[%s])", q, labels, q, oldLabels, q, labels, labels, q, oldLabels, q))
	}
	out = append(out, guarded("!("+celIsUpdate+")", []rule{{
		expr: strings.Join(same, " && "),
		msg:  fmt.Sprintf("metadata.labels: source %s may not change the labels %s of an object", src, strings.Join(protocolLabels, ", ")),
	}})...)
	return out
}

// tokenValidations bound what the identity's TokenRequests for itself
// yield: a token of this API server's audiences (one for another audience
// would open whatever trusts this cluster's issuer for that audience), no
// longer than the invitation allows, and bound to nothing (a token bound
// to a pod and asking for the kubelet's 3607 seconds would be extended
// to a year). The API server fills in its audiences before admission, so
// the policy names them.
func (inv Invitation) tokenValidations() []admissionregistrationv1.Validation {
	src := inv.Spec.ClusterName
	life := int64(inv.Spec.TokenLifetime().Seconds())
	audiences := "this API server's (not known yet: the agent learns them from the first token it requests)"
	if len(inv.APIAudiences) > 0 {
		audiences = strings.Join(inv.APIAudiences, ", ")
	}
	return guarded("!("+celIsToken+")", []rule{
		{
			expr: fmt.Sprintf("has(object.spec.expirationSeconds) && object.spec.expirationSeconds <= %d", life),
			msg:  fmt.Sprintf("spec.expirationSeconds: source %s may request tokens of at most %d seconds (the invitation's maxTokenLifetime)", src, life),
		},
		{
			// A null list is filled in with this API server's own.
			expr: "!has(object.spec.audiences) || object.spec.audiences == null || object.spec.audiences.all(a, a in " + celList(inv.APIAudiences) + ")",
			msg:  fmt.Sprintf("spec.audiences: source %s may only request tokens for this API server's audiences (%s)", src, audiences),
		},
		{
			expr: "!has(object.spec.boundObjectRef) || object.spec.boundObjectRef == null",
			msg:  fmt.Sprintf("spec.boundObjectRef: source %s may not bind its tokens to an object", src),
		},
	})
}

// notToken makes object validations pass a TokenRequest by: it carries
// none of an object's labels.
func notToken(vs []admissionregistrationv1.Validation) []admissionregistrationv1.Validation {
	for i := range vs {
		vs[i].Expression = celIsToken + " || (" + vs[i].Expression + ")"
	}
	return vs
}
