package monitoring

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// object is what the tests read of a rendered object.
type object struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec json.RawMessage   `json:"spec"`
	Data map[string]string `json:"data"`
}

func render(t *testing.T, values ...string) []object {
	t.Helper()
	manifest, err := sandbox.Template(context.Background(), "flotilla-system", append([]string{"clusterName=east"}, values...)...)
	if err != nil {
		t.Fatal(err)
	}
	var out []object
	for _, doc := range strings.Split(string(manifest), "\n---") {
		var o object
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		if o.Kind != "" {
			out = append(out, o)
		}
	}
	return out
}

// monitoringObjects are the objects of the chart's metrics values: the
// Prometheus Operator's kinds, the dashboard's ConfigMap and the
// scheduler's metrics Service.
func monitoringObjects(objs []object) map[string]object {
	out := map[string]object{}
	for _, o := range objs {
		if strings.HasPrefix(o.APIVersion, "monitoring.coreos.com/") ||
			strings.HasSuffix(o.Metadata.Name, "-dashboard") || strings.HasSuffix(o.Metadata.Name, "-scheduler-metrics") {
			out[o.Kind+" "+o.Metadata.Name] = o
		}
	}
	return out
}

func keys(m map[string]object) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestMonitoringIsOffByDefault(t *testing.T) {
	if got := monitoringObjects(render(t)); len(got) != 0 {
		t.Errorf("the default values render %v, want no monitoring object", keys(got))
	}
}

// Each value turns on its own objects only.
func TestEachMonitoringValueRendersItsObjects(t *testing.T) {
	for _, tc := range []struct {
		value string
		extra []string
		want  []string
	}{
		{"metrics.serviceMonitor.enabled=true", nil,
			[]string{"ServiceMonitor flotilla-agent", "ServiceMonitor flotilla-scheduler", "Service flotilla-scheduler-metrics"}},
		{"metrics.serviceMonitor.enabled=true", []string{"scheduler.enabled=false"}, []string{"ServiceMonitor flotilla-agent"}},
		{"metrics.prometheusRule.enabled=true", nil, []string{"PrometheusRule flotilla"}},
		{"metrics.dashboard.enabled=true", nil, []string{"ConfigMap flotilla-dashboard"}},
	} {
		t.Run(strings.Join(append([]string{tc.value}, tc.extra...), ","), func(t *testing.T) {
			got := monitoringObjects(render(t, append([]string{tc.value}, tc.extra...)...))
			for _, name := range tc.want {
				if _, ok := got[name]; !ok {
					t.Errorf("%s not rendered; got %v", name, keys(got))
				}
			}
			if len(got) != len(tc.want) {
				t.Errorf("got %v, want only %v", keys(got), tc.want)
			}
		})
	}
}

type endpoint struct {
	Port            string `json:"port"`
	Path            string `json:"path"`
	Scheme          string `json:"scheme"`
	Interval        string `json:"interval"`
	BearerTokenFile string `json:"bearerTokenFile"`
	Authorization   *struct {
		Type        string `json:"type"`
		Credentials struct {
			Name, Key string
		} `json:"credentials"`
	} `json:"authorization"`
	TLSConfig map[string]any `json:"tlsConfig"`
}

type serviceMonitorSpec struct {
	Selector struct {
		MatchLabels map[string]string `json:"matchLabels"`
	} `json:"selector"`
	NamespaceSelector struct {
		MatchNames []string `json:"matchNames"`
	} `json:"namespaceSelector"`
	Endpoints []endpoint `json:"endpoints"`
}

// The ServiceMonitors select the Services that serve each component's
// metrics, on the port and scheme each serves them, and the scheduler's
// carries a bearer token.
func TestServiceMonitorsScrapeWhatServesMetrics(t *testing.T) {
	objs := render(t, "metrics.serviceMonitor.enabled=true", "metrics.serviceMonitor.labels.release=prom", "metrics.serviceMonitor.interval=15s")
	services := map[string]object{}
	for _, o := range objs {
		if o.Kind == "Service" {
			services[o.Metadata.Name] = o
		}
	}
	for _, tc := range []struct {
		monitor, service, port, scheme string
	}{
		{"flotilla-agent", "flotilla-agent", "metrics", "http"},
		{"flotilla-scheduler", "flotilla-scheduler-metrics", "https", "https"},
	} {
		sm := monitoringObjects(objs)["ServiceMonitor "+tc.monitor]
		var spec serviceMonitorSpec
		if err := json.Unmarshal(sm.Spec, &spec); err != nil {
			t.Fatal(err)
		}
		if sm.Metadata.Labels["release"] != "prom" {
			t.Errorf("%s: labels %v, want metrics.serviceMonitor.labels", tc.monitor, sm.Metadata.Labels)
		}
		svc, ok := services[tc.service]
		if !ok {
			t.Fatalf("%s: no Service %s", tc.monitor, tc.service)
		}
		// Every Service the selector picks in the namespace: only this one.
		var picked []string
		for name, s := range services {
			if matches(spec.Selector.MatchLabels, s.Metadata.Labels) {
				picked = append(picked, name)
			}
		}
		if len(picked) != 1 || picked[0] != tc.service {
			t.Errorf("%s selects Services %v, want %s", tc.monitor, picked, tc.service)
		}
		if len(spec.NamespaceSelector.MatchNames) != 1 || spec.NamespaceSelector.MatchNames[0] != "flotilla-system" {
			t.Errorf("%s: namespaceSelector %v, want the release's namespace", tc.monitor, spec.NamespaceSelector.MatchNames)
		}
		var svcSpec struct {
			Ports []struct {
				Name       string `json:"name"`
				TargetPort any    `json:"targetPort"`
			} `json:"ports"`
		}
		if err := json.Unmarshal(svc.Spec, &svcSpec); err != nil {
			t.Fatal(err)
		}
		hasPort := false
		for _, p := range svcSpec.Ports {
			hasPort = hasPort || p.Name == tc.port
		}
		if len(spec.Endpoints) != 1 {
			t.Fatalf("%s: %d endpoints, want 1", tc.monitor, len(spec.Endpoints))
		}
		e := spec.Endpoints[0]
		if !hasPort || e.Port != tc.port || e.Scheme != tc.scheme || e.Path != "/metrics" || e.Interval != "15s" {
			t.Errorf("%s: endpoint %+v (Service has port %s: %t), want port %s, %s, /metrics, every 15s", tc.monitor, e, tc.port, hasPort, tc.port, tc.scheme)
		}
	}
	// The scheduler's port is the scheduler pod's secure port.
	for _, o := range objs {
		if o.Kind == "Deployment" && o.Metadata.Name == "flotilla-scheduler" && !strings.Contains(string(o.Spec), `"name":"https","containerPort":10259`) && !strings.Contains(string(o.Spec), `"containerPort":10259,"name":"https"`) {
			t.Errorf("the scheduler Deployment names no port https 10259: %s", o.Spec)
		}
	}

	scheduler := func(values ...string) endpoint {
		var spec serviceMonitorSpec
		sm := monitoringObjects(render(t, append([]string{"metrics.serviceMonitor.enabled=true"}, values...)...))["ServiceMonitor flotilla-scheduler"]
		if err := json.Unmarshal(sm.Spec, &spec); err != nil {
			t.Fatal(err)
		}
		return spec.Endpoints[0]
	}
	if e := scheduler(); e.BearerTokenFile == "" || e.Authorization != nil || e.TLSConfig["insecureSkipVerify"] != true {
		t.Errorf("scheduler endpoint by default: %+v, want Prometheus's own token and insecureSkipVerify", e)
	}
	e := scheduler("metrics.serviceMonitor.scheduler.bearerTokenSecret.name=scraper", "metrics.serviceMonitor.scheduler.bearerTokenSecret.key=tok")
	if e.BearerTokenFile != "" || e.Authorization == nil || e.Authorization.Type != "Bearer" ||
		e.Authorization.Credentials.Name != "scraper" || e.Authorization.Credentials.Key != "tok" {
		t.Errorf("scheduler endpoint with bearerTokenSecret: %+v, want authorization from Secret scraper, key tok", e)
	}
}

func matches(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return len(selector) > 0
}

// The dashboard's ConfigMap holds files/dashboard.json as it is, with the
// sidecar's label, in the namespace asked for.
func TestDashboardConfigMap(t *testing.T) {
	want, err := os.ReadFile(filepath.Join(sandbox.ChartDir(), "files", "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	cm := monitoringObjects(render(t, "metrics.dashboard.enabled=true", "metrics.dashboard.namespace=grafana"))["ConfigMap flotilla-dashboard"]
	if cm.Metadata.Labels["grafana_dashboard"] != "1" || cm.Metadata.Namespace != "grafana" {
		t.Errorf("dashboard ConfigMap: namespace %q, labels %v; want grafana, grafana_dashboard=1", cm.Metadata.Namespace, cm.Metadata.Labels)
	}
	if got := cm.Data["flotilla.json"]; strings.TrimSpace(got) != strings.TrimSpace(string(want)) {
		t.Errorf("the ConfigMap's flotilla.json differs from files/dashboard.json")
	}
	var d struct {
		UID        string `json:"uid"`
		Templating struct {
			List []struct {
				Name string `json:"name"`
				Type string `json:"type"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Datasource struct {
				UID string `json:"uid"`
			} `json:"datasource"`
			Type string `json:"type"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(want, &d); err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || len(d.Templating.List) == 0 || d.Templating.List[0].Type != "datasource" {
		t.Errorf("the dashboard needs a uid and a datasource variable first: %+v", d.Templating.List)
	}
	for i, p := range d.Panels {
		if p.Type != "row" && p.Datasource.UID != "${"+d.Templating.List[0].Name+"}" {
			t.Errorf("panel %d's datasource %q is not the datasource variable", i, p.Datasource.UID)
		}
	}
}

// A bad threshold stops the rendering with the value's name.
func TestAlertThresholdsRefused(t *testing.T) {
	for _, value := range []string{
		"metrics.prometheusRule.targetNotReadyFor=5 minutes",
		"metrics.prometheusRule.sourceAtQuotaFor=",
		"metrics.prometheusRule.podWaitingSeconds=0",
		"metrics.prometheusRule.tokenLifetimeShare=0.5",
		"metrics.prometheusRule.tokenLifetimeShare=1",
		"metrics.prometheusRule.webhookCertMinDays=-1",
		"metrics.prometheusRule.webhookErrorRatio=0",
		"metrics.prometheusRule.webhookErrorRatio=1.5",
	} {
		field, _, _ := strings.Cut(value, "=")
		_, err := sandbox.Template(context.Background(), "flotilla-system", "clusterName=east", "metrics.prometheusRule.enabled=true", value)
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: got %v, want an error naming %s", value, err, field)
		}
	}
}

// The queries of the dashboard and of the alerts name only metrics that
// pkg/ registers (the sandbox's scrape, in test/e2e's TestInspectableState,
// checks that they are exported).
func TestChartQueriesNameRegisteredMetrics(t *testing.T) {
	queries, err := ChartQueries()
	if err != nil {
		t.Fatal(err)
	}
	used, err := NamesUsed(queries)
	if err != nil {
		t.Fatal(err)
	}
	registered, err := RegisteredMetrics()
	if err != nil {
		t.Fatal(err)
	}
	if len(used) < 20 {
		t.Errorf("the chart's queries name %d metrics; the reader missed some: %v", len(used), used)
	}
	for name, where := range used {
		if !Registered(name, registered) {
			t.Errorf("%s (used by %v) is registered nowhere in pkg/", name, where)
		}
	}
	for _, p := range Unexported(nil, nil, registered) {
		t.Error(p)
	}
}
