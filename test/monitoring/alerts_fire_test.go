package monitoring

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// promtool is bin/promtool, which make tools builds: its absence fails the
// test rather than skipping it.
func promtool(t *testing.T) string {
	t.Helper()
	root, err := sandbox.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := os.Getenv("FLOTILLA_BIN")
	if bin == "" {
		bin = filepath.Join(root, "bin")
	}
	path := filepath.Join(bin, "promtool")
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("promtool: %v; run `make tools` (hack/tools.sh promtool)", err)
	}
	return path
}

// TestAlertsFireAndStaySilent renders the chart's PrometheusRule with its
// default values, checks the rules with promtool and runs
// testdata/alerts_test.yaml on them: each alert fires on one series at the
// time its thresholds say, and on no other (promtool fails on an alert not
// expected).
func TestAlertsFireAndStaySilent(t *testing.T) {
	tool := promtool(t)
	rules, err := RenderedRules()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "alerts.yaml"), rules, 0o600); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(filepath.Join("testdata", "alerts_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts_test.yaml"), tests, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"check", "rules", "--lint=all", "--lint-fatal", "alerts.yaml"},
		{"test", "rules", "alerts_test.yaml"},
	} {
		cmd := exec.CommandContext(t.Context(), tool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}

// TestEveryAlertIsTested: each alert of the chart has a test case in
// testdata/alerts_test.yaml in which it fires, and beside its firing series
// one it stays silent on; the tests name no alert the chart lacks.
func TestEveryAlertIsTested(t *testing.T) {
	rules, err := RenderedRules()
	if err != nil {
		t.Fatal(err)
	}
	var g RuleGroups
	if err := yaml.Unmarshal(rules, &g); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join("testdata", "alerts_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var tests struct {
		Tests []struct {
			Name   string `json:"name"`
			Series []struct {
				Series string `json:"series"`
			} `json:"input_series"`
			AlertRuleTest []struct {
				Alertname string           `json:"alertname"`
				ExpAlerts []map[string]any `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(raw, &tests); err != nil {
		t.Fatal(err)
	}
	fires := map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) == 0 {
				continue
			}
			fires[a.Alertname] = true
			// One alert per firing series, and at least one series more.
			if firing := len(a.ExpAlerts); len(tc.Series) <= firing {
				t.Errorf("test %q: %s fires %d times on %d series: no series it stays silent on", tc.Name, a.Alertname, firing, len(tc.Series))
			}
		}
	}
	alerts := map[string]bool{}
	for _, group := range g.Groups {
		for _, r := range group.Rules {
			alerts[r.Alert] = true
			if !fires[r.Alert] {
				t.Errorf("alert %s: no test in testdata/alerts_test.yaml fires it", r.Alert)
			}
		}
	}
	for name := range fires {
		if !alerts[name] {
			t.Errorf("testdata/alerts_test.yaml tests %s, which the chart does not render", name)
		}
	}
}
