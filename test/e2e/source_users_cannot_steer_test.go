package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	flotillacandidate "github.com/flotilla-dev/flotilla/pkg/candidate"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/sourcespec"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// TestSourceUsersCannotSteer checks that a user of a source cluster with
// a Role in one namespace cannot steer the protocol through the keys that
// Flotilla alone writes: what a target runs is what the source's
// admission let in, and a candidate's labels are Flotilla's unless the
// target's invitation keeps the source pod's.
func TestSourceUsersCannotSteer(t *testing.T) {
	t.Parallel()
	src, tgt := agentsOnSourceAndTarget(t, sandbox.NodeSpec{CPU: "8"})
	ctx := t.Context()
	invite(t, src, tgt)
	user := namespaceUser(t, src, placementNS, "alice")
	srcPods, tgtPods := user.CoreV1().Pods(placementNS), tgt.Client().CoreV1().Pods(placementNS)

	// hidden is what a user would have the target run instead of what
	// the source admitted: privileged, with the host's root mounted.
	hidden := optedInPod("hidden", "100m").Spec
	hidden.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
	hidden.Volumes = []corev1.Volume{{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
	hidden.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "host", MountPath: "/host"}}
	hiddenRaw, err := json.Marshal(hidden)
	if err != nil {
		t.Fatal(err)
	}
	// everywhere is what a user would have the target run the pod with
	// instead of its tolerations: every taint tolerated (a target's
	// control plane, its dedicated nodes), by another scheduler.
	everywhere, err := sourcespec.Fields{SchedulerName: "my-scheduler", Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}}.Encode()
	if err != nil {
		t.Fatal(err)
	}

	// Opted-in pods carrying keys only Flotilla writes: the webhook
	// replaces them, and each pod is placed as an ordinary one.
	forged := map[string]*corev1.Pod{}
	for name, forge := range map[string]func(*corev1.Pod){
		"forged-spec": func(p *corev1.Pod) {
			p.Annotations = map[string]string{protocol.SourceSpecAnnotation: string(hiddenRaw)}
		},
		"forged-fields": func(p *corev1.Pod) {
			p.Annotations = map[string]string{protocol.OriginalFieldsAnnotation: everywhere}
		},
		"forged-election": func(p *corev1.Pod) {
			p.Annotations = map[string]string{protocol.ElectionAnnotation: "7/tgt/forged", protocol.ElectedDomainAnnotation: `{"topology.kubernetes.io/zone":"forged"}`}
		},
		"forged-local": func(p *corev1.Pod) { p.Labels[protocol.LocalLabel] = "true" },
		"forged-candidate": func(p *corev1.Pod) {
			p.Labels[protocol.CandidateLabel] = "true"
			p.Labels[protocol.SourceClusterLabel] = "src"
		},
	} {
		pod := optedInPod(name, "100m")
		forge(pod)
		created, err := srcPods.Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s: creating an opted-in pod: %v", name, err)
		}
		forged[name] = created
	}

	t.Run("the webhook replaces what the user forged", func(t *testing.T) {
		for name, p := range forged {
			for k, v := range p.Labels {
				if protocol.WrittenByFlotilla(k) {
					t.Errorf("%s: kept label %s=%s", name, k, v)
				}
			}
			for k, v := range p.Annotations {
				if protocol.WrittenByFlotilla(k) && k != protocol.OriginalFieldsAnnotation {
					t.Errorf("%s: kept annotation %s=%s", name, k, v)
				}
			}
			if p.Spec.SchedulerName != protocol.SourceSchedulerName {
				t.Errorf("%s: schedulerName %q, want a source pod", name, p.Spec.SchedulerName)
			}
			if v, ok := p.Annotations[protocol.SourceSpecAnnotation]; ok {
				t.Errorf("%s: kept a saved spec: %s", name, v)
			}
			if f := p.Annotations[protocol.OriginalFieldsAnnotation]; f == everywhere || strings.Contains(f, "my-scheduler") {
				t.Errorf("%s: the original fields are the forged ones: %s", name, f)
			}
		}
	})

	t.Run("each delegate runs the admitted spec", func(t *testing.T) {
		for name := range forged {
			d := waitDelegate(t, tgtPods, name)
			if sc := d.Spec.Containers[0].SecurityContext; sc != nil && sc.Privileged != nil && *sc.Privileged {
				t.Errorf("%s: the delegate is privileged", name)
			}
			for _, v := range d.Spec.Volumes {
				if v.HostPath != nil {
					t.Errorf("%s: the delegate mounts the host's %s", name, v.HostPath.Path)
				}
			}
			if got := d.Spec.Containers[0].Image; got != "registry.example/app:1" {
				t.Errorf("%s: the delegate runs %s", name, got)
			}
			for _, tol := range d.Spec.Tolerations {
				if tol.Key == "" {
					t.Errorf("%s: the delegate tolerates every taint: %+v", name, tol)
				}
			}
		}
		waitFor(t, 60*time.Second, "the forged-election pod on its virtual node, elected by the agent", func() (bool, string) {
			p, err := srcPods.Get(ctx, "forged-election", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			e, err := protocol.ParseElection(p.Annotations[protocol.ElectionAnnotation])
			domain := p.Annotations[protocol.ElectedDomainAnnotation]
			return err == nil && p.Spec.NodeName == "flotilla-tgt" && e.Generation < 7 && !strings.Contains(domain, "forged"),
				fmt.Sprintf("node %q, election %q, elected domain %q", p.Spec.NodeName, p.Annotations[protocol.ElectionAnnotation], domain)
		})
	})

	t.Run("pods the webhook does not admit carry no Flotilla key", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			pod  *corev1.Pod
		}{
			{"on a virtual node, for no scheduler", func() *corev1.Pod {
				p := optedInPod("on-vnode", "100m")
				delete(p.Labels, protocol.ElectLabel)
				p.Spec.NodeName = "flotilla-tgt"
				p.Spec.SchedulerName = protocol.SourceSchedulerName
				return p
			}()},
			{"a saved spec, not opted in", func() *corev1.Pod {
				p := optedInPod("not-opted-in", "100m")
				delete(p.Labels, protocol.ElectLabel)
				p.Spec.SchedulerName = protocol.SourceSchedulerName
				p.Annotations = map[string]string{protocol.SourceSpecAnnotation: string(hiddenRaw)}
				return p
			}()},
			{"original fields, not opted in", func() *corev1.Pod {
				p := optedInPod("fields-not-opted-in", "100m")
				delete(p.Labels, protocol.ElectLabel)
				p.Spec.SchedulerName = protocol.SourceSchedulerName
				p.Annotations = map[string]string{protocol.OriginalFieldsAnnotation: everywhere}
				return p
			}()},
			{"a local mark, not opted in", func() *corev1.Pod {
				p := optedInPod("local-not-opted-in", "100m")
				delete(p.Labels, protocol.ElectLabel)
				p.Labels[protocol.LocalLabel] = "true"
				return p
			}()},
			{"a candidate of this cluster", func() *corev1.Pod {
				p := optedInPod("own-candidate", "100m")
				p.Labels = map[string]string{protocol.CandidateLabel: "true", protocol.SourceClusterLabel: "src", protocol.SourceUIDLabel: string(forged["forged-spec"].UID)}
				p.Spec.SchedulerName = protocol.SchedulerName
				return p
			}()},
		} {
			_, err := srcPods.Create(ctx, tc.pod, metav1.CreateOptions{})
			if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
				t.Errorf("%s: created (%v), want refused", tc.name, err)
				continue
			}
			t.Logf("%s: refused: %v", tc.name, err)
		}
	})

	t.Run("only the agent changes a placed pod's keys", func(t *testing.T) {
		for _, patch := range []string{
			`{"metadata":{"annotations":{"multicluster.flotilla.dev/election":"9/tgt/mine"}}}`,
			`{"metadata":{"annotations":{"multicluster.flotilla.dev/election":null}}}`,
			`{"metadata":{"annotations":{"multicluster.flotilla.dev/elected-domain":"{\"topology.kubernetes.io/zone\":\"mine\"}"}}}`,
			`{"metadata":{"annotations":{"multicluster.flotilla.dev/source-spec":` + jsonString(t, string(hiddenRaw)) + `}}}`,
			`{"metadata":{"annotations":{"multicluster.flotilla.dev/original-fields":` + jsonString(t, everywhere) + `}}}`,
			`{"metadata":{"annotations":{"multicluster.flotilla.dev/original-fields":null}}}`,
			`{"metadata":{"labels":{"multicluster.flotilla.dev/local":"true"}}}`,
		} {
			_, err := srcPods.Patch(ctx, "forged-spec", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
			if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
				t.Errorf("patch %s: %v, want refused", patch, err)
				continue
			}
			t.Logf("patch refused: %v", err)
		}
		// Its own labels and annotations stay the user's.
		if _, err := srcPods.Patch(ctx, "forged-spec", types.MergePatchType, []byte(`{"metadata":{"annotations":{"team":"a"}}}`), metav1.PatchOptions{}); err != nil {
			t.Errorf("annotating one's own pod: %v", err)
		}
	})

	t.Run("a delegate carries its source's labels renamed and in an annotation", func(t *testing.T) {
		d := waitDelegate(t, tgtPods, "forged-local")
		if _, ok := d.Labels["app"]; ok {
			t.Errorf("the delegate carries the source's label app: %v", d.Labels)
		}
		if carried, _ := protocol.CarriedLabelKey("app"); d.Labels[carried] != "forged-local" {
			t.Errorf("the delegate does not carry %s=forged-local: %v", carried, d.Labels)
		}
		labels, err := flotillacandidate.SourceLabels(d)
		if err != nil || labels["app"] != "forged-local" {
			t.Errorf("source labels %v (%v), want app=forged-local", labels, err)
		}
		svc := serviceFor(t, tgt.Client(), "forged-local")
		selected, err := tgtPods.List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(&metav1.LabelSelector{MatchLabels: svc.Spec.Selector})})
		if err != nil {
			t.Fatal(err)
		}
		if len(selected.Items) != 0 {
			t.Errorf("Service %s selects %d pods, want none", svc.Name, len(selected.Items))
		}
	})

	t.Run("an invitation that keeps the labels", func(t *testing.T) {
		cs := &v1alpha1.ClusterSource{}
		if err := tgt.CRClient().Get(ctx, client.ObjectKey{Name: "src"}, cs); err != nil {
			t.Fatal(err)
		}
		cs.Spec.KeepSourceLabels = true
		if err := tgt.CRClient().Update(ctx, cs); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 60*time.Second, "the source to learn that its target keeps labels", func() (bool, string) {
			list := &v1alpha1.ClusterSummaryList{}
			if err := tgt.CRClient().List(ctx, list); err != nil {
				return false, err.Error()
			}
			for _, sum := range list.Items {
				if sum.Status.Invitation == "src" {
					return sum.Status.KeepSourceLabels, fmt.Sprintf("keepSourceLabels %v", sum.Status.KeepSourceLabels)
				}
			}
			return false, "no summary"
		})
		// The source reads the summary within its watch; a pod placed
		// while it had not would carry the annotation, so the check is
		// on a pod created until one carries the labels.
		svc := serviceFor(t, tgt.Client(), "kept")
		var d *corev1.Pod
		for i := 0; d == nil; i++ {
			if i == 5 {
				t.Fatal("no delegate kept its source's labels")
			}
			name := fmt.Sprintf("kept-%d", i)
			p := optedInPod(name, "100m")
			p.Labels["app"] = "kept"
			if _, err := srcPods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if got := waitDelegate(t, tgtPods, name); got.Labels["app"] == "kept" {
				d = got
			}
		}
		selected, err := tgtPods.List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(&metav1.LabelSelector{MatchLabels: svc.Spec.Selector})})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, p := range selected.Items {
			found = found || p.Name == d.Name
		}
		if !found {
			t.Errorf("Service %s does not select the delegate %s", svc.Name, d.Name)
		}
	})
}

// namespaceUser is a client of c for a user who may do anything with pods
// in namespace, and nothing else: a tenant with one namespace.
func namespaceUser(t *testing.T, c *sandbox.Cluster, namespace, user string) kubernetes.Interface {
	t.Helper()
	admin := c.Client()
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: namespace},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}},
	}
	if _, err := admin.RbacV1().Roles(namespace).Create(t.Context(), role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}
	if _, err := admin.RbacV1().RoleBindings(namespace).Create(t.Context(), binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := c.RESTConfig()
	cfg.Impersonate.UserName = user
	cfg.Impersonate.Groups = []string{"system:authenticated"}
	return kubernetes.NewForConfigOrDie(cfg)
}

// waitDelegate waits for the delegate of the source pod named name: its
// candidate in the target, selected by its source-name label, bound.
func waitDelegate(t *testing.T, pods interface {
	List(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error)
}, name string) *corev1.Pod {
	t.Helper()
	var d *corev1.Pod
	selector := protocol.CandidateLabel + "=true," + protocol.SourceNameLabel + "=" + protocol.SourceNameLabelValue(name)
	waitFor(t, 90*time.Second, "the delegate of "+name, func() (bool, string) {
		list, err := pods.List(t.Context(), metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err.Error()
		}
		for i := range list.Items {
			if list.Items[i].Spec.NodeName != "" {
				d = &list.Items[i]
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d candidates, none bound", len(list.Items))
	})
	return d
}

// serviceFor makes a Service of the target selecting app=app.
func serviceFor(t *testing.T, c kubernetes.Interface, app string) *corev1.Service {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: placementNS},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": app},
			Ports:    []corev1.ServicePort{{Port: 80}},
		},
	}
	created, err := c.CoreV1().Services(placementNS).Create(t.Context(), svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

func jsonString(t *testing.T, s string) string {
	t.Helper()
	raw, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// ofApp reports whether a candidate's source pod is labelled app=app: a
// candidate carries its source's labels in an annotation, unless its
// target's invitation keeps them as labels.
func ofApp(candidate *corev1.Pod, app string) bool {
	labels, err := flotillacandidate.SourceLabels(candidate)
	return err == nil && labels["app"] == app
}
