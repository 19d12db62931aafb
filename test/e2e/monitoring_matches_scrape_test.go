package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/sets"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/test/monitoring"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// checkChartQueriesAgainstScrapes fails for each metric that the chart's
// dashboard or alert rules query and that neither the agent's nor the
// scheduler's scrape shows, unless test/monitoring.OnlyAfterAFault lists
// it (a counter vector that this placement never counts), which must then
// be registered in pkg/.
func checkChartQueriesAgainstScrapes(t *testing.T, scrapes ...metrics) {
	t.Helper()
	queries, err := monitoring.ChartQueries()
	if err != nil {
		t.Fatal(err)
	}
	used, err := monitoring.NamesUsed(queries)
	if err != nil {
		t.Fatal(err)
	}
	scraped := map[string]bool{}
	for _, m := range scrapes {
		for series := range m {
			name, _, _ := strings.Cut(series, "{")
			scraped[name] = true
		}
	}
	registered, err := monitoring.RegisteredMetrics()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range monitoring.Unexported(used, scraped, registered) {
		t.Errorf("the chart's monitoring: %s", p)
	}
	var seen []string
	for name := range monitoring.OnlyAfterAFault {
		if scraped[name] {
			seen = append(seen, name)
		}
	}
	if len(seen) > 0 {
		t.Logf("listed as appearing only after a fault, yet scraped here: %v", seen)
	}
}

// dryRunMonitoringObjects creates the Prometheus Operator's CRDs
// (test/monitoring/testdata/crds, as published) in c, then each object the
// chart renders with its metrics values on with a server-side dry run and
// strict field validation: a field the CRDs do not know, or a value their
// schemas refuse, fails.
func dryRunMonitoringObjects(t *testing.T, c *sandbox.Cluster) {
	t.Helper()
	ctx := t.Context()
	crdClient, err := apiextensionsclient.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	crdAPI := crdClient.ApiextensionsV1().CustomResourceDefinitions()
	files, err := filepath.Glob(filepath.Join("..", "monitoring", "testdata", "crds", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Prometheus Operator CRDs in test/monitoring/testdata/crds: %v", err)
	}
	var crds []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(data, crd); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if _, err := crdAPI.Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating CRD %s: %v", crd.Name, err)
		}
		crds = append(crds, crd.Name)
	}
	waitFor(t, 30*time.Second, "the Prometheus Operator's CRDs established", func() (bool, string) {
		for _, name := range crds {
			crd, err := crdAPI.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			established := false
			for _, cond := range crd.Status.Conditions {
				established = established || cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue
			}
			if !established {
				return false, name + " not established"
			}
		}
		return true, ""
	})

	manifest, err := sandbox.Template(ctx, sandbox.ReleaseNamespace, "clusterName="+c.Name,
		"metrics.serviceMonitor.enabled=true", "metrics.prometheusRule.enabled=true", "metrics.dashboard.enabled=true")
	if err != nil {
		t.Fatal(err)
	}
	// A client made now knows the new kinds.
	cl := c.CRClient()
	kinds := sets.New[string]()
	for _, doc := range strings.Split(string(manifest), "\n---") {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatal(err)
		}
		if u.Object == nil || !(strings.HasPrefix(u.GetAPIVersion(), "monitoring.coreos.com/") ||
			strings.HasSuffix(u.GetName(), "-dashboard") || strings.HasSuffix(u.GetName(), "-scheduler-metrics")) {
			continue
		}
		if err := cl.Create(ctx, u, crclient.DryRunAll, crclient.FieldValidation("Strict")); err != nil {
			t.Errorf("server-side dry run of %s %s: %v", u.GetKind(), u.GetName(), err)
		}
		kinds.Insert(u.GetKind())
	}
	if want := sets.New("ServiceMonitor", "PrometheusRule", "ConfigMap", "Service"); !kinds.Equal(want) {
		t.Errorf("dry-ran %v, want %v", sets.List(kinds), sets.List(want))
	}
}
