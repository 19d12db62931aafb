package monitoring

import (
	"slices"
	"testing"
)

func TestMetricNames(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`flotilla_target_ready == 0`, []string{"flotilla_target_ready"}},
		{`increase(flotilla_candidates_revoked_total[15m]) > 0`, []string{"flotilla_candidates_revoked_total"}},
		{`sum by (target) (rate(flotilla_candidates_allowed_total{namespace=~"$namespace", target=~"$target"}[$__rate_interval]))`, []string{"flotilla_candidates_allowed_total"}},
		{`histogram_quantile(0.95, sum by (le) (rate(flotilla_pod_bound_seconds_bucket[5m])))`, []string{"flotilla_pod_bound_seconds_bucket"}},
		{`rate(a{result="error"}[10m]) / ignoring(result) sum without(result) (rate(b[10m])) > 0.05`, []string{"a", "b"}},
		{`x >= y unless z == 0`, []string{"x", "y", "z"}},
		{`sum(rate(m[5m])) by (cluster, reason)`, []string{"m"}},
		{`a * on (pod) group_left (node) b offset 5m`, []string{"a", "b"}},
		{`{__name__="by_name", job="x"}`, []string{"by_name"}},
		{`count(up{job="a and b (c)"})`, []string{"up"}},
		{`(time() - issued) / (expiry - issued) > 0.75`, []string{"expiry", "issued"}},
		{`max_over_time(g[1h:5m]) @ end()`, []string{"g"}},
		{`vector(1) + 2e3 - Inf`, nil},
		{`${metric} + $other`, nil},
		{"sum by (le)\n  (rate(h_bucket[1m]))", []string{"h_bucket"}},
	} {
		got, err := MetricNames(tc.expr)
		if err != nil {
			t.Errorf("%q: %v", tc.expr, err)
			continue
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%q: got %q, want %q", tc.expr, got, tc.want)
		}
	}
}

func TestMetricNamesRefusesWhatItCannotRead(t *testing.T) {
	for _, expr := range []string{`rate(x[5m]`, `x{a="b}`, `x{a="b"`, `x[5m`, `sum(x))`, `"open`} {
		if names, err := MetricNames(expr); err == nil {
			t.Errorf("%q: read as %q, want an error", expr, names)
		}
	}
}

func TestDashboardQueries(t *testing.T) {
	dashboard := []byte(`{
	  "panels": [
	    {"type": "row", "title": "r", "panels": [{"title": "nested", "targets": [{"refId": "A", "expr": "nested_metric"}]}]},
	    {"title": "p", "targets": [{"refId": "A", "expr": "a"}, {"refId": "B", "expr": "rate(b[1m])"}]}
	  ],
	  "templating": {"list": [
	    {"name": "datasource", "type": "datasource", "query": "prometheus"},
	    {"name": "ns", "type": "query", "query": {"query": "label_values(v_metric, namespace)"}},
	    {"name": "old", "type": "query", "query": "label_values(w_metric{a=\"b\"}, c)"}
	  ]}
	}`)
	queries, err := DashboardQueries(dashboard)
	if err != nil {
		t.Fatal(err)
	}
	used, err := NamesUsed(queries)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"nested_metric", "a", "b", "v_metric", "w_metric"} {
		if len(used[name]) == 0 {
			t.Errorf("%s: not found in %v", name, used)
		}
	}
	if len(used) != 5 {
		t.Errorf("got %d names, want 5: %v", len(used), used)
	}
}
