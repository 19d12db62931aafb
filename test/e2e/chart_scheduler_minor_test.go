package e2e

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// TestChartRunsTheSchedulerOfTheClustersMinor: the chart's scheduler image
// is the build of the cluster's Kubernetes minor (helm's view of the API
// server, here the pinned one), or of scheduler.kubernetesVersion; an
// explicit image tag is taken as is; a minor no build is made for is
// refused with the value named, never run with another minor's build.
// make test-versions runs each build in a cluster of its minor.
func TestChartRunsTheSchedulerOfTheClustersMinor(t *testing.T) {
	t.Parallel()
	image := func(values ...string) string {
		t.Helper()
		for _, doc := range chartDocs(t, values...) {
			var d appsv1.Deployment
			if err := yaml.Unmarshal(doc, &d); err != nil || d.Kind != "Deployment" || d.Labels["app.kubernetes.io/component"] != "scheduler" {
				continue
			}
			return d.Spec.Template.Spec.Containers[0].Image
		}
		t.Fatal("the chart renders no scheduler Deployment")
		return ""
	}
	if got := image(); !strings.HasSuffix(got, "-k8s"+sandbox.CurrentMinor()) {
		t.Errorf("the scheduler of a %s cluster runs %s", sandbox.KubernetesVersion, got)
	}
	if got := image("scheduler.kubernetesVersion=1.35"); !strings.HasSuffix(got, "-k8s1.35") {
		t.Errorf("scheduler.kubernetesVersion=1.35 runs %s", got)
	}
	if got := image("image.scheduler.tag=mine"); !strings.HasSuffix(got, ":mine") {
		t.Errorf("image.scheduler.tag=mine runs %s", got)
	}
	_, err := sandbox.Template(t.Context(), sandbox.ReleaseNamespace, "clusterName=east", "scheduler.kubernetesVersion=1.34")
	if err == nil || !strings.Contains(err.Error(), "scheduler.kubernetesVersion") || !strings.Contains(err.Error(), "1.34") {
		t.Errorf("scheduler.kubernetesVersion=1.34: %v, want a refusal naming the value", err)
	}
}
