package scenario

import (
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// AppLabel names a pod's workload in both worlds.
const AppLabel = "app"

// partLabel tells the two Deployments of a split workload in the oracle
// apart.
const partLabel = "scenario.flotilla.dev/part"

// PlacementPolicyOf is the source's policy of a workload (nil without a
// spread).
func PlacementPolicyOf(w Workload) *v1alpha1.PlacementPolicy {
	if w.Policy == nil {
		return nil
	}
	p := &v1alpha1.PlacementPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: w.Name, Namespace: Namespace},
		Spec:       v1alpha1.PlacementPolicySpec{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{AppLabel: w.Name}}},
	}
	for _, key := range w.Policy.Keys {
		p.Spec.SpreadConstraints = append(p.Spec.SpreadConstraints, v1alpha1.SpreadConstraint{
			TopologyKey: key, MaxSkew: w.Policy.MaxSkew, WhenUnsatisfiable: w.Policy.When,
		})
	}
	return p
}

// TopologySpreadOf is the policy as kube-scheduler's nearest: one pod
// topologySpreadConstraint per key, on the workload's pods. A joint
// region→zone spread becomes two constraints: kube-scheduler then compares
// each zone with every zone, not only with the zones of its region, and
// holds both levels at once rather than region first.
func TopologySpreadOf(w Workload) []corev1.TopologySpreadConstraint {
	if w.Policy == nil {
		return nil
	}
	var out []corev1.TopologySpreadConstraint
	for _, key := range w.Policy.Keys {
		out = append(out, corev1.TopologySpreadConstraint{
			MaxSkew: w.Policy.MaxSkew, TopologyKey: key,
			WhenUnsatisfiable: corev1.UnsatisfiableConstraintAction(w.Policy.When),
			LabelSelector:     &metav1.LabelSelector{MatchLabels: map[string]string{AppLabel: w.Name}},
		})
	}
	return out
}

// podTemplate is a workload's pod: its requests, and tolerations that keep
// it on a node that turns NotReady, as in test/chaos.
func podTemplate(w Workload, labels map[string]string) corev1.PodTemplateSpec {
	all := map[string]string{AppLabel: w.Name}
	for k, v := range labels {
		all[k] = v
	}
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: all},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{Name: "app", Image: "scenario", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse(w.CPU), corev1.ResourceMemory: resource.MustParse(w.Memory),
			}}}},
			Tolerations: []corev1.Toleration{
				{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
				{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
			},
		},
	}
}

// Object is one API object of a workload, for one world.
type Object struct {
	Deployment  *appsv1.Deployment
	StatefulSet *appsv1.StatefulSet
	Job         *batchv1.Job
}

// SourceObjects is the workload in the source: opted in, one object; a
// split Deployment carries max-on-demand.
func SourceObjects(w Workload, replicas int32) []Object {
	tmpl := podTemplate(w, map[string]string{protocol.ElectLabel: "true"})
	o := object(w, w.Name, replicas, tmpl, map[string]string{AppLabel: w.Name})
	if w.MaxOnDemand != nil && o.Deployment != nil {
		o.Deployment.Annotations = map[string]string{protocol.MaxOnDemandAnnotation: strconv.Itoa(int(*w.MaxOnDemand))}
	}
	return []Object{o}
}

// OracleObjects is the workload in the oracle: the spread as pod
// constraints; a split Deployment as two Deployments sharing the app label
// (which the spread counts), one of min(replicas, maxOnDemand) pods
// required on on-demand nodes, the other the rest on spot nodes, as the
// split's webhook would require of each pod.
func OracleObjects(w Workload, replicas int32) []Object {
	tmpl := podTemplate(w, nil)
	tmpl.Spec.TopologySpreadConstraints = TopologySpreadOf(w)
	if w.MaxOnDemand == nil || w.Kind != KindDeployment {
		return []Object{object(w, w.Name, replicas, tmpl, map[string]string{AppLabel: w.Name})}
	}
	onDemand := min(replicas, *w.MaxOnDemand)
	var out []Object
	for _, part := range []struct {
		suffix, value string
		replicas      int32
	}{{"od", protocol.CapacityOnDemand, onDemand}, {"spot", protocol.CapacitySpot, replicas - onDemand}} {
		t := *tmpl.DeepCopy()
		t.Labels[partLabel] = part.suffix
		t.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
				Key: CapacityKey, Operator: corev1.NodeSelectorOpIn, Values: []string{part.value},
			}}}},
		}}}
		out = append(out, object(w, w.Name+"-"+part.suffix, part.replicas, t, map[string]string{AppLabel: w.Name, partLabel: part.suffix}))
	}
	return out
}

func object(w Workload, name string, replicas int32, tmpl corev1.PodTemplateSpec, selector map[string]string) Object {
	meta := metav1.ObjectMeta{Name: name, Namespace: Namespace}
	sel := &metav1.LabelSelector{MatchLabels: selector}
	switch w.Kind {
	case KindStatefulSet:
		return Object{StatefulSet: &appsv1.StatefulSet{ObjectMeta: meta, Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To(replicas), Selector: sel, Template: tmpl, ServiceName: name,
			PodManagementPolicy: appsv1.ParallelPodManagement,
		}}}
	case KindJob:
		tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
		return Object{Job: &batchv1.Job{ObjectMeta: meta, Spec: batchv1.JobSpec{
			Parallelism: ptr.To(replicas), BackoffLimit: ptr.To[int32](1000), Template: tmpl,
		}}}
	}
	return Object{Deployment: &appsv1.Deployment{ObjectMeta: meta, Spec: appsv1.DeploymentSpec{
		Replicas: ptr.To(replicas), Selector: sel, Template: tmpl,
	}}}
}
