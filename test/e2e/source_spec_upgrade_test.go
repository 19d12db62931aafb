package e2e

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// TestSourcePodsAdmittedBeforeOriginalFields checks the upgrade path of
// the source pod's form: a pod that the webhook of an agent before
// original-fields made a source pod (its whole spec saved in source-spec,
// no original fields) is placed by today's agent, and its delegate runs the
// saved spec. Today's webhook would take the saved spec off a pod it
// admits, so the pod is written as the old webhook left it, by the agent's
// identity (which the chart's admission policy lets write it) and without
// the opt-in label (which the webhook is called for; it matters only at
// creation).
func TestSourcePodsAdmittedBeforeOriginalFields(t *testing.T) {
	t.Parallel()
	src, tgt := agentsOnSourceAndTarget(t, sandbox.NodeSpec{CPU: "8"})
	ctx := t.Context()
	invite(t, src, tgt)

	pod := optedInPod("admitted-before", "100m")
	delete(pod.Labels, protocol.ElectLabel)
	saved := pod.Spec.DeepCopy()
	saved.SchedulerName = corev1.DefaultSchedulerName
	// What only the saved spec says: the delegate runs it, not the
	// visible spec.
	saved.Containers[0].Env = []corev1.EnvVar{{Name: "FORM", Value: "source-spec"}}
	raw, err := json.Marshal(saved)
	if err != nil {
		t.Fatal(err)
	}
	pod.Annotations = map[string]string{protocol.SourceSpecAnnotation: string(raw)}
	pod.Spec.SchedulerName = protocol.SourceSchedulerName
	pod.Spec.Tolerations = []corev1.Toleration{
		{Key: protocol.VirtualNodeTaintKey, Operator: corev1.TolerationOpEqual, Value: protocol.VirtualNodeTaintValue, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
	}
	if _, err := asAgent(t, src).CoreV1().Pods(placementNS).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("writing a source pod as an agent before original-fields did: %v", err)
	}

	d := waitDelegate(t, tgt.Client().CoreV1().Pods(placementNS), pod.Name)
	if env := d.Spec.Containers[0].Env; len(env) != 1 || env[0].Value != "source-spec" {
		t.Errorf("the delegate runs env %+v, want the saved spec's FORM=source-spec", env)
	}
	if d.Annotations[protocol.SourceSpecAnnotation] != "" || d.Annotations[protocol.OriginalFieldsAnnotation] != "" {
		t.Errorf("the delegate carries the source's saved spec: %v", d.Annotations)
	}
	waitFor(t, 60*time.Second, "the source pod on its virtual node", func() (bool, string) {
		p, err := src.Client().CoreV1().Pods(placementNS).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Spec.NodeName == "flotilla-tgt", fmt.Sprintf("node %q", p.Spec.NodeName)
	})
}
