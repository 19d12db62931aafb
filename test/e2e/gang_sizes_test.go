package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// TestGangSizes: members that give no size take it from what declares
// their gang, read live, over two targets of four CPUs:
//   - a PodGroup (scheduler-plugins' spec.minMember) of five holds the
//     gang back; lowered to four, it runs four whole in one target;
//   - a Job asked to be a gang (the gang annotation) is sized by its
//     parallelism: five wait, and once the Job runs four, they run whole;
//   - a Kubernetes PodGroup (scheduling.k8s.io/v1beta1, named by the
//     pods' spec.schedulingGroup) whose gang policy asks for five holds
//     four back; its minCount lowered to four, they run whole, and no
//     candidate carries the reference to a PodGroup its target does not
//     hold;
//   - a JobSet's replicated jobs (one launcher, two workers of two) make
//     a gang of five: four wait, the fifth completes it.
//
// The watch checks throughout that no member binds before its whole gang
// stands elected.
func TestGangSizes(t *testing.T) {
	t.Parallel()
	src, c2, c3 := gangFleet(t, sandbox.WorkloadAPI...)
	ctx := t.Context()
	dyn := dynamicClient(t, src)
	podGroups := dyn.Resource(schema.GroupVersionResource{Group: "scheduling.x-k8s.io", Version: "v1alpha1", Resource: "podgroups"}).Namespace(placementNS)
	jobSets := dyn.Resource(schema.GroupVersionResource{Group: "jobset.x-k8s.io", Version: "v1alpha2", Resource: "jobsets"}).Namespace(placementNS)
	createCRD(t, src, "scheduling.x-k8s.io", "v1alpha1", "PodGroup", "podgroups")
	createCRD(t, src, "jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets")
	if _, err := sandbox.StartAgent(ctx, src, []*sandbox.Cluster{c2, c3}); err != nil {
		t.Fatal(err)
	}
	plugin := buildPlugin(t)
	pods := src.Client().CoreV1().Pods(placementNS)
	g := watchGangs(t, src, placementNS, map[string]int{"pg": 4, "job:train": 4, "workload:w/workers": 4, "jobset:mpi": 5})
	create := func(t *testing.T, members []*corev1.Pod) {
		t.Helper()
		for _, p := range members {
			if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// waiting waits until every member says it waits for a gang whose
	// message holds msg, and fails at once should one bind.
	waiting := func(t *testing.T, members []*corev1.Pod, msg string) {
		t.Helper()
		waitFor(t, 90*time.Second, "every member waiting: "+msg, func() (bool, string) {
			on, waiting, err := gangState(ctx, pods, members, msg)
			if err != nil {
				return false, err.Error()
			}
			if bound := podsOn(on); bound > 0 {
				for _, m := range members {
					if p, err := pods.Get(ctx, m.Name, metav1.GetOptions{}); err == nil {
						t.Logf("%s: node %q, election %q", p.Name, p.Spec.NodeName, p.Annotations[protocol.ElectionAnnotation])
					}
				}
				t.Fatalf("%d members bound: the gang's size was not honoured", bound)
			}
			return waiting == len(members), fmt.Sprintf("%d of %d waiting", waiting, len(members))
		})
	}
	wholeInOne := func(t *testing.T, members []*corev1.Pod, n int) {
		t.Helper()
		waitFor(t, 3*time.Minute, fmt.Sprintf("%d members bound in one target", n), func() (bool, string) {
			on, _, _ := gangState(ctx, pods, members, "")
			return len(on) == 1 && on[onlyKey(on)] == n, fmt.Sprintf("bound: %v", on)
		})
		g.check(t)
	}
	// gone deletes the members, those not bound first: deleting the bound
	// ones first frees their room, and a member beyond the gang's size
	// waiting beside it (the PodGroup's fifth) may then be placed as the
	// running gang's newcomer by a round whose cache still shows the
	// deleted ones, bound while the watch sees its gang torn down.
	gone := func(t *testing.T, members []*corev1.Pod) {
		t.Helper()
		var bound []*corev1.Pod
		for _, p := range members {
			if live, err := pods.Get(ctx, p.Name, metav1.GetOptions{}); err == nil && live.Spec.NodeName != "" {
				bound = append(bound, p)
				continue
			}
			_ = pods.Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		}
		for _, p := range bound {
			_ = pods.Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		}
		waitFor(t, time.Minute, "the members' candidates gone", func() (bool, string) {
			n := countMembersIn(t, members, c2) + countMembersIn(t, members, c3)
			return n == 0, fmt.Sprintf("%d left", n)
		})
	}

	t.Run("a PodGroup's minMember", func(t *testing.T) {
		pg := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
			"metadata": map[string]any{"name": "pg"},
			"spec":     map[string]any{"minMember": int64(5)},
		}}
		if _, err := podGroups.Create(ctx, pg, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		members := gangPods("pg", 5, 0, "")
		for _, p := range members {
			delete(p.Annotations, protocol.GangMinMemberAnnotation)
		}
		create(t, members)
		waiting(t, members, "5 members of pod group pg")
		if _, err := podGroups.Patch(ctx, "pg", types.MergePatchType, []byte(`{"spec":{"minMember":4}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		wholeInOne(t, members, 4)
		gone(t, members)
	})

	t.Run("a Job's parallelism", func(t *testing.T) {
		tmpl := optedInPod("train", "1")
		tmpl.Annotations = map[string]string{protocol.GangAnnotation: protocol.GangOfJob}
		tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
		job := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: "train"},
			Spec: batchv1.JobSpec{
				Parallelism: ptr.To[int32](5), Completions: ptr.To[int32](5),
				Template: corev1.PodTemplateSpec{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec},
			},
		}
		jobs := src.Client().BatchV1().Jobs(placementNS)
		if _, err := jobs.Create(ctx, job, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		members := func() []*corev1.Pod {
			l, err := pods.List(ctx, metav1.ListOptions{LabelSelector: "app=train"})
			if err != nil {
				t.Fatal(err)
			}
			var out []*corev1.Pod
			for i := range l.Items {
				if l.Items[i].DeletionTimestamp == nil {
					out = append(out, &l.Items[i])
				}
			}
			return out
		}
		waitFor(t, time.Minute, "the Job's five pods", func() (bool, string) {
			n := len(members())
			return n == 5, fmt.Sprintf("%d pods", n)
		})
		waiting(t, members(), "5 members of job train")
		// explain reads the Job's size as the agent does.
		var e struct {
			Gang *struct {
				Name      string `json:"name"`
				Source    string `json:"source"`
				MinMember int    `json:"minMember"`
				Problem   string `json:"problem"`
			} `json:"gang"`
		}
		runPlugin(t, plugin, "--kubeconfig", src.Kubeconfig, "explain", members()[0].Name, "-n", placementNS, "-o", "json").mustDecode(t, &e)
		if g := e.Gang; g == nil || g.Name != "train" || g.Source != "job" || g.MinMember != 5 || g.Problem != "" {
			t.Errorf("explain's gang: %+v, want job train of 5", e.Gang)
		}
		if _, err := jobs.Patch(ctx, "train", types.MergePatchType, []byte(`{"spec":{"parallelism":4}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, time.Minute, "the Job down to four pods", func() (bool, string) {
			n := len(members())
			return n == 4, fmt.Sprintf("%d pods", n)
		})
		running := members()
		wholeInOne(t, running, 4)
		if err := jobs.Delete(ctx, "train", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}); err != nil {
			t.Fatal(err)
		}
		gone(t, running)
	})

	t.Run("a Kubernetes PodGroup's gang policy", func(t *testing.T) {
		podGroups := src.Client().SchedulingV1beta1().PodGroups(placementNS)
		if _, err := podGroups.Create(ctx, sandbox.GangPodGroup("w", 5), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var members []*corev1.Pod
		for i := range 4 {
			p := optedInPod(fmt.Sprintf("w-%d", i), "1")
			sandbox.InSchedulingGroup(p, "w")
			members = append(members, p)
		}
		create(t, members)
		waiting(t, members, "5 members of scheduling group w")
		// c2's API server serves the PodGroup API too, so it would keep a
		// pod's spec.schedulingGroup: its candidates show what the agent
		// sent.
		cands := candidatesIn(t, members, c2)
		if len(cands) != len(members) {
			t.Fatalf("%d candidates in c2, want one per member", len(cands))
		}
		for _, c := range cands {
			if c.Spec.SchedulingGroup != nil {
				t.Errorf("candidate %s in c2 refers to the source's PodGroup w, which c2 does not hold", c.Name)
			}
		}
		// A gang's minCount may change: lowered to four, the gang is whole.
		pg, err := podGroups.Get(ctx, "w", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pg.Spec.SchedulingPolicy.Gang.MinCount = 4
		if _, err := podGroups.Update(ctx, pg, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		wholeInOne(t, members, 4)
		gone(t, members)
	})

	t.Run("a JobSet's replicated jobs", func(t *testing.T) {
		js := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
			"metadata": map[string]any{"name": "mpi"},
			"spec": map[string]any{"replicatedJobs": []any{
				map[string]any{"name": "launcher", "template": map[string]any{"spec": map[string]any{}}},
				map[string]any{"name": "workers", "replicas": int64(2), "template": map[string]any{"spec": map[string]any{"parallelism": int64(2)}}},
			}},
		}}
		if _, err := jobSets.Create(ctx, js, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// The pods as JobSet's controller labels them, made here: no
		// JobSet controller runs in the sandbox.
		var members []*corev1.Pod
		for i := range 5 {
			p := optedInPod(fmt.Sprintf("mpi-%d", i), "500m")
			p.Labels[protocol.JobSetNameLabel] = "mpi"
			p.Annotations = map[string]string{protocol.GangAnnotation: protocol.GangOfJobSet}
			members = append(members, p)
		}
		create(t, members[:4])
		waiting(t, members[:4], "5 members of jobset mpi")
		create(t, members[4:])
		wholeInOne(t, members, 5)
		gone(t, members)
	})
}

// dynamicClient is a dynamic client of c.
func dynamicClient(t *testing.T, c *sandbox.Cluster) *dynamic.DynamicClient {
	t.Helper()
	cfg := rest.CopyConfig(c.RESTConfig())
	cfg.ContentType = runtime.ContentTypeJSON
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return dyn
}

// createCRD defines kind in c, namespaced, with a spec of any shape, and
// waits until it is served.
func createCRD(t *testing.T, c *sandbox.Cluster, group, version, kind, plural string) {
	t.Helper()
	cfg := rest.CopyConfig(c.RESTConfig())
	cfg.ContentType = runtime.ContentTypeJSON
	crds, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + "." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: kind, ListKind: kind + "List", Plural: plural},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: version, Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type:       "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": {Type: "object", XPreserveUnknownFields: ptr.To(true)}},
				}},
			}},
		},
	}
	if _, err := crds.ApiextensionsV1().CustomResourceDefinitions().Create(t.Context(), crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: group, Version: version, Resource: plural}
	dyn := dynamicClient(t, c)
	err = wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := dyn.Resource(gvr).Namespace(placementNS).List(ctx, metav1.ListOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("%s never served: %v", gvr, err)
	}
}
