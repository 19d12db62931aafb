package e2e

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/reservation"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// TestObjects places pods that use ConfigMaps and Secrets on a target
// reached through an invitation, so that the target's RBAC (writes, no
// reads) and admission policy are the real ones: the objects are copied
// before the candidate under the names only this source's copies carry,
// which the delegate names, kept in step, removed with their last user,
// never written over someone else's, and a missing one keeps the pod
// Pending until it exists.
func TestObjects(t *testing.T) {
	t.Parallel()
	src, tgt := agentsOnSourceAndTarget(t, sandbox.NodeSpec{CPU: "8"})
	ctx := t.Context()
	srcClient, tgtClient := src.Client(), tgt.Client()
	if err := src.Invite(ctx, tgt, placementNS); err != nil {
		t.Fatal(err)
	}
	if err := src.WaitTarget(ctx, client.ObjectKey{Name: "tgt"}, 60*time.Second, func(st *v1alpha1.TargetStatus) bool {
		return meta.IsStatusConditionTrue(st.Conditions, v1alpha1.TargetReady) && strings.Join(st.Namespaces, ",") == placementNS
	}); err != nil {
		t.Fatal(err)
	}

	createConfigMap(t, srcClient, "app-config", map[string]string{"mode": "blue"})
	createSecret(t, srcClient, "app-secret", map[string][]byte{"password": []byte("hunter2")})
	createSecret(t, srcClient, "app-env", map[string][]byte{"TOKEN": []byte("t0k3n")})
	web := podWithObjects("web", "app-config", "app-secret", "app-env")
	if _, err := srcClient.CoreV1().Pods(placementNS).Create(ctx, web, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A second pod shares the ConfigMap only.
	if _, err := srcClient.CoreV1().Pods(placementNS).Create(ctx, podWithObjects("web2", "app-config", "", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	t.Run("a pod's ConfigMap and Secrets are in the target with the source's data, owned by its delegate", func(t *testing.T) {
		for _, name := range []string{"web", "web2"} {
			waitPod(t, srcClient, placementNS, name, "running in tgt", func(p *corev1.Pod) bool {
				return p.Spec.NodeName == "flotilla-tgt" && p.Status.Phase == corev1.PodRunning
			})
		}
		delegates := map[string]types.UID{}
		for _, app := range []string{"web", "web2"} {
			delegates[app] = delegateUID(t, tgtClient, app)
		}
		waitCopy(t, tgtClient, "ConfigMap", "app-config", func(data map[string]string, m metav1.ObjectMeta) (bool, string) {
			return data["mode"] == "blue" && ownedBy(m, delegates["web"], delegates["web2"]), copyState(data, m)
		})
		waitCopy(t, tgtClient, "Secret", "app-secret", func(data map[string]string, m metav1.ObjectMeta) (bool, string) {
			return data["password"] == "hunter2" && ownedBy(m, delegates["web"]), copyState(data, m)
		})
		waitCopy(t, tgtClient, "Secret", "app-env", func(data map[string]string, m metav1.ObjectMeta) (bool, string) {
			return data["TOKEN"] == "t0k3n" && ownedBy(m, delegates["web"]), copyState(data, m)
		})
		// The delegate names the copies, never the objects' own names,
		// which in the target may be anyone's.
		delegate := candidateOf(t, tgtClient, delegates["web"])
		vols := map[string]string{}
		for _, v := range delegate.Spec.Volumes {
			switch {
			case v.ConfigMap != nil:
				vols[v.Name] = v.ConfigMap.Name
			case v.Secret != nil:
				vols[v.Name] = v.Secret.SecretName
			}
		}
		var envFrom []string
		for _, e := range delegate.Spec.Containers[0].EnvFrom {
			if e.SecretRef != nil {
				envFrom = append(envFrom, e.SecretRef.Name)
			}
		}
		if vols["config"] != protocol.CopyName("src", "app-config") || vols["secret"] != protocol.CopyName("src", "app-secret") ||
			len(envFrom) != 1 || envFrom[0] != protocol.CopyName("src", "app-env") {
			t.Errorf("the delegate names volumes %v and envFrom %v, want the copies of app-config, app-secret and app-env", vols, envFrom)
		}
	})

	t.Run("a change of the ConfigMap reaches its copy", func(t *testing.T) {
		cm, err := srcClient.CoreV1().ConfigMaps(placementNS).Get(ctx, "app-config", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Data = map[string]string{"mode": "green", "extra": "1"}
		if _, err := srcClient.CoreV1().ConfigMaps(placementNS).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		waitCopy(t, tgtClient, "ConfigMap", "app-config", func(data map[string]string, m metav1.ObjectMeta) (bool, string) {
			return maps.Equal(data, cm.Data) && len(m.OwnerReferences) == 2, copyState(data, m)
		})
		t.Logf("the copy changed %s after the ConfigMap", time.Since(start).Round(time.Millisecond))
	})

	t.Run("deleting a pod removes the copies nothing else uses; a shared one stays", func(t *testing.T) {
		for _, name := range []string{"app-secret", "app-env"} {
			waitCopy(t, tgtClient, "Secret", name, func(data map[string]string, m metav1.ObjectMeta) (bool, string) {
				return len(data) == 1, copyState(data, m)
			})
		}
		if err := srcClient.CoreV1().Pods(placementNS).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 90*time.Second, "the copies of web's Secrets gone", func() (bool, string) {
			var left []string
			for _, name := range []string{"app-secret", "app-env"} {
				if _, err := tgtClient.CoreV1().Secrets(placementNS).Get(ctx, protocol.CopyName("src", name), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					left = append(left, fmt.Sprintf("%s: %v", name, err))
				}
			}
			return len(left) == 0, strings.Join(left, "; ")
		})
		web2 := delegateUID(t, tgtClient, "web2")
		waitCopy(t, tgtClient, "ConfigMap", "app-config", func(data map[string]string, m metav1.ObjectMeta) (bool, string) {
			return data["mode"] == "green" && len(m.OwnerReferences) == 1 && m.OwnerReferences[0].UID == web2, copyState(data, m)
		})
	})

	t.Run("an object of the target that someone else made is not overwritten, and the pod is told", func(t *testing.T) {
		// The target's admin made an object under the copy's name.
		taken := protocol.CopyName("src", "taken")
		theirs := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: taken, Namespace: placementNS}, Data: map[string]string{"owner": "target"}}
		if _, err := tgtClient.CoreV1().ConfigMaps(placementNS).Create(ctx, theirs, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		createConfigMap(t, srcClient, "taken", map[string]string{"owner": "source"})
		if _, err := srcClient.CoreV1().Pods(placementNS).Create(ctx, podWithObjects("blocked", "taken", "", ""), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitObjectEvent(t, srcClient, reservation.ReasonObjectConflict, "blocked", "target tgt", "ConfigMap "+placementNS+"/"+taken, "copy of taken")
		if n := countCandidates(t, tgtClient, "blocked"); n != 0 {
			t.Errorf("the target got %d candidates of a pod whose ConfigMap is in the way", n)
		}
		got, err := tgtClient.CoreV1().ConfigMaps(placementNS).Get(ctx, taken, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Data["owner"] != "target" || len(got.OwnerReferences) != 0 || got.Labels[protocol.CopyLabel] != "" {
			t.Errorf("the target's own ConfigMap was changed: %+v", got)
		}
	})

	t.Run("a pod whose Secret is missing waits, told why, and is placed once the Secret exists", func(t *testing.T) {
		if _, err := srcClient.CoreV1().Pods(placementNS).Create(ctx, podWithObjects("waiting", "", "late", ""), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitPod(t, srcClient, placementNS, "waiting", "PodScheduled=False naming the Secret", func(p *corev1.Pod) bool {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == reservation.ReasonObjectMissing {
					return strings.Contains(c.Message, "Secret "+placementNS+"/late")
				}
			}
			return false
		})
		waitObjectEvent(t, srcClient, reservation.ReasonObjectMissing, "waiting", "Secret "+placementNS+"/late")
		if n := countCandidates(t, tgtClient, "waiting"); n != 0 {
			t.Fatalf("the target got %d candidates of a pod whose Secret is missing", n)
		}
		createSecret(t, srcClient, "late", map[string][]byte{"key": []byte("finally")})
		waitPod(t, srcClient, placementNS, "waiting", "running in tgt", func(p *corev1.Pod) bool {
			return p.Spec.NodeName == "flotilla-tgt" && p.Status.Phase == corev1.PodRunning
		})
		waitCopy(t, tgtClient, "Secret", "late", func(data map[string]string, m metav1.ObjectMeta) (bool, string) {
			return data["key"] == "finally" && len(m.OwnerReferences) == 1, copyState(data, m)
		})
	})
}

// podWithObjects is an opted-in pod that mounts ConfigMap cm and Secret
// secret and takes its environment from Secret env (each when not empty).
func podWithObjects(name, cm, secret, env string) *corev1.Pod {
	p := optedInPod(name, "100m")
	c := &p.Spec.Containers[0]
	if cm != "" {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm}}}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "config", MountPath: "/config"})
	}
	if secret != "" {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "secret", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret}}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "secret", MountPath: "/secret"})
	}
	if env != "" {
		c.EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: env}}}}
	}
	return p
}

func createConfigMap(t *testing.T, c kubernetes.Interface, name string, data map[string]string) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: placementNS}, Data: data}
	if _, err := c.CoreV1().ConfigMaps(placementNS).Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func createSecret(t *testing.T, c kubernetes.Interface, name string, data map[string][]byte) {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: placementNS}, Data: data}
	if _, err := c.CoreV1().Secrets(placementNS).Create(t.Context(), s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// delegateUID is the UID of the one candidate of app in the target.
func delegateUID(t *testing.T, c kubernetes.Interface, app string) types.UID {
	t.Helper()
	var uid types.UID
	waitFor(t, 30*time.Second, "the delegate of "+app, func() (bool, string) {
		pods, err := c.CoreV1().Pods(placementNS).List(t.Context(), metav1.ListOptions{LabelSelector: protocol.CandidateLabel + "=true"})
		if err != nil {
			return false, err.Error()
		}
		var bound []corev1.Pod
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" && p.DeletionTimestamp == nil && ofApp(&p, app) {
				bound = append(bound, p)
			}
		}
		if len(bound) != 1 {
			return false, fmt.Sprintf("%d bound candidates of %d", len(bound), len(pods.Items))
		}
		uid = bound[0].UID
		return true, ""
	})
	return uid
}

// waitCopy waits until the copy of src's kind/name in the target (named
// protocol.CopyName) is this source's copy and ok says its data (Secret
// data as strings) and metadata are as expected.
func waitCopy(t *testing.T, c kubernetes.Interface, kind, original string, ok func(map[string]string, metav1.ObjectMeta) (bool, string)) {
	t.Helper()
	name := protocol.CopyName("src", original)
	waitFor(t, 60*time.Second, "the copy of "+kind+" "+original, func() (bool, string) {
		var data map[string]string
		var m metav1.ObjectMeta
		switch kind {
		case "ConfigMap":
			cm, err := c.CoreV1().ConfigMaps(placementNS).Get(t.Context(), name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			data, m = cm.Data, cm.ObjectMeta
		case "Secret":
			s, err := c.CoreV1().Secrets(placementNS).Get(t.Context(), name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			data, m = map[string]string{}, s.ObjectMeta
			for k, v := range s.Data {
				data[k] = string(v)
			}
		}
		if m.Labels[protocol.CopyLabel] != "true" || m.Labels[protocol.SourceClusterLabel] != "src" {
			return false, fmt.Sprintf("not labelled as src's copy: %v", m.Labels)
		}
		return ok(data, m)
	})
}

// candidateOf is the candidate of the given UID in the target.
func candidateOf(t *testing.T, c kubernetes.Interface, uid types.UID) *corev1.Pod {
	t.Helper()
	pods, err := c.CoreV1().Pods(placementNS).List(t.Context(), metav1.ListOptions{LabelSelector: protocol.CandidateLabel + "=true"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		if pods.Items[i].UID == uid {
			return &pods.Items[i]
		}
	}
	t.Fatalf("no candidate %s in the target", uid)
	return nil
}

func ownedBy(m metav1.ObjectMeta, uids ...types.UID) bool {
	if len(m.OwnerReferences) != len(uids) {
		return false
	}
	for _, uid := range uids {
		found := false
		for _, o := range m.OwnerReferences {
			found = found || (o.UID == uid && o.Kind == "Pod" && (o.BlockOwnerDeletion == nil || !*o.BlockOwnerDeletion))
		}
		if !found {
			return false
		}
	}
	return true
}

func copyState(data map[string]string, m metav1.ObjectMeta) string {
	var owners []string
	for _, o := range m.OwnerReferences {
		owners = append(owners, o.Name+"/"+string(o.UID))
	}
	return fmt.Sprintf("data %v owners %v", data, owners)
}

// waitObjectEvent waits for an Event of reason about pod that says each of words.
func waitObjectEvent(t *testing.T, c kubernetes.Interface, reason, pod string, words ...string) {
	t.Helper()
	waitFor(t, 30*time.Second, "a "+reason+" event of "+pod, func() (bool, string) {
		evs, err := c.EventsV1().Events(placementNS).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=" + reason + ",regarding.name=" + pod})
		if err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			all := true
			for _, w := range words {
				all = all && strings.Contains(e.Note, w)
			}
			if all {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events: %v", len(evs.Items), evs.Items)
	})
}
