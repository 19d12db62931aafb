package invitation

import (
	"fmt"
	"strconv"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

const celIsConfigMap = "request.resource.resource == 'configmaps'"

// referenceValidations keep the identity to the ConfigMaps and Secrets it
// copied itself. Admission cannot look another object up, so a candidate
// could otherwise name any ConfigMap or Secret of its namespace (this
// cluster's database password, a legacy token Secret of another
// ServiceAccount) and read it through exec or its logs. The source names
// its copies protocol.CopyName, under a prefix of its own: the identity
// may create no ConfigMap or Secret of another name, and a candidate it
// creates may reference no other, in every place a pod names one (those
// candidate.VisitObjectReferences visits, which the source renames). A
// pod's references cannot change after it is created, nor an object's
// name.
func (inv Invitation) referenceValidations() []admissionregistrationv1.Validation {
	src := inv.Spec.ClusterName
	prefix := protocol.CopyNamePrefix(src)
	// own holds when an optional name is absent, empty (it names
	// nothing) or the source's copy's.
	own := func(name string) string {
		return fmt.Sprintf("%s.orValue('') == '' || %s.orValue('').startsWith(%s)", name, name, strconv.Quote(prefix))
	}
	msg := func(field string) string {
		return fmt.Sprintf("%s: source %s may only reference its own copies (names starting %s)", field, src, prefix)
	}
	const containers = " (and of init and ephemeral containers)"
	out := onPodCreate(
		rule{
			expr: "object.spec.?volumes.orValue([]).all(v, " + own("v.?configMap.?name") + ")",
			msg:  msg("spec.volumes[].configMap.name"),
		},
		rule{
			expr: "object.spec.?volumes.orValue([]).all(v, " + own("v.?secret.?secretName") + ")",
			msg:  msg("spec.volumes[].secret.secretName"),
		},
		rule{
			expr: "object.spec.?volumes.orValue([]).all(v, v.?projected.?sources.orValue([]).all(s, " + own("s.?configMap.?name") + "))",
			msg:  msg("spec.volumes[].projected.sources[].configMap.name"),
		},
		rule{
			expr: "object.spec.?volumes.orValue([]).all(v, v.?projected.?sources.orValue([]).all(s, " + own("s.?secret.?name") + "))",
			msg:  msg("spec.volumes[].projected.sources[].secret.name"),
		},
		rule{
			expr: everyContainer("c.?env.orValue([]).all(e, " + own("e.?valueFrom.?configMapKeyRef.?name") + ")"),
			msg:  msg("spec.containers[].env[].valueFrom.configMapKeyRef.name" + containers),
		},
		rule{
			expr: everyContainer("c.?env.orValue([]).all(e, " + own("e.?valueFrom.?secretKeyRef.?name") + ")"),
			msg:  msg("spec.containers[].env[].valueFrom.secretKeyRef.name" + containers),
		},
		rule{
			expr: everyContainer("c.?envFrom.orValue([]).all(e, " + own("e.?configMapRef.?name") + ")"),
			msg:  msg("spec.containers[].envFrom[].configMapRef.name" + containers),
		},
		rule{
			expr: everyContainer("c.?envFrom.orValue([]).all(e, " + own("e.?secretRef.?name") + ")"),
			msg:  msg("spec.containers[].envFrom[].secretRef.name" + containers),
		},
		rule{
			// Volume plugins read a Secret of the pod's namespace for
			// their own use (credentials of the storage); the source
			// copies none for them, and such a Secret would be this
			// cluster's.
			expr: "object.spec.?volumes.orValue([]).all(v, (" + strings.Join([]string{
				own("v.?csi.?nodePublishSecretRef.?name"), own("v.?cephfs.?secretRef.?name"), own("v.?rbd.?secretRef.?name"),
				own("v.?iscsi.?secretRef.?name"), own("v.?flexVolume.?secretRef.?name"), own("v.?azureFile.?secretName"),
				own("v.?scaleIO.?secretRef.?name"), own("v.?storageos.?secretRef.?name"),
			}, ") && (") + "))",
			msg: msg("spec.volumes[]: the Secret a volume plugin reads (csi.nodePublishSecretRef, cephfs, rbd, iscsi, flexVolume, azureFile, scaleIO, storageos)"),
		},
		rule{
			// The ServiceAccount admission plugin gives a pod without
			// image pull secrets those of its ServiceAccount ("default")
			// before this policy runs.
			expr: "object.spec.?imagePullSecrets.orValue([]).all(s, " + own("s.?name") + ")",
			msg: msg("spec.imagePullSecrets[].name") +
				"; a candidate without any gets those of the namespace's default ServiceAccount, which must have none",
		},
	)
	return append(out, guarded("!("+celIsConfigMap+" || "+celIsSecret+") || !("+celIsCreate+")", []rule{{
		expr: "object.metadata.name.startsWith(" + strconv.Quote(prefix) + ")",
		msg:  fmt.Sprintf("metadata.name: source %s may only create ConfigMaps and Secrets named as its copies are (starting %s)", src, prefix),
	}})...)
}
