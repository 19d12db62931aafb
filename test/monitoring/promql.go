// Package monitoring reads the chart's monitoring parts (the alert rules of
// templates/prometheusrule.yaml and the Grafana dashboard of
// files/dashboard.json) for the tests that check them: which metrics their
// queries name, so that each can be compared with what the agent and the
// scheduler export.
package monitoring

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// keywords are PromQL's words that are not metric names where they stand
// without a parenthesis after them: operators, modifiers and aggregations
// (which may be followed by by/without before their parenthesis).
var keywords = map[string]bool{
	"and": true, "or": true, "unless": true, "atan2": true, "bool": true, "offset": true,
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"sum": true, "avg": true, "count": true, "min": true, "max": true, "group": true,
	"stddev": true, "stdvar": true, "topk": true, "bottomk": true, "quantile": true,
	"count_values": true, "limitk": true, "limit_ratio": true,
	"inf": true, "nan": true,
}

// grouping are the keywords whose parenthesis lists label names.
var grouping = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

// MetricNames returns the metric names a PromQL expression selects, sorted
// and once each: identifiers that are not functions, keywords or label
// names, and the values of __name__ matchers. Grafana's variables ($x,
// ${x}, $__rate_interval) are skipped. An expression it cannot read (an
// unterminated string or bracket) is an error.
func MetricNames(expr string) ([]string, error) {
	names := map[string]bool{}
	var stack []byte // open brackets
	labels := 0      // depth of parentheses that list label names
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '"' || c == '\'' || c == '`':
			end, err := endOfString(expr, i)
			if err != nil {
				return nil, err
			}
			i = end
		case c == '#':
			for i < len(expr) && expr[i] != '\n' {
				i++
			}
		case c == '$':
			i++
			if i < len(expr) && expr[i] == '{' {
				end := strings.IndexByte(expr[i:], '}')
				if end < 0 {
					return nil, fmt.Errorf("%q: unterminated ${ at %d", expr, i)
				}
				i += end + 1
				continue
			}
			for i < len(expr) && isIdent(expr[i]) {
				i++
			}
		case c == '{':
			end, name, err := selector(expr, i)
			if err != nil {
				return nil, err
			}
			if name != "" {
				names[name] = true
			}
			i = end
		case c == '[':
			end := strings.IndexByte(expr[i:], ']')
			if end < 0 {
				return nil, fmt.Errorf("%q: unterminated [ at %d", expr, i)
			}
			i += end + 1
		case c == '(':
			stack = append(stack, c)
			i++
		case c == ')':
			if len(stack) == 0 {
				return nil, fmt.Errorf("%q: ) at %d closes nothing", expr, i)
			}
			stack = stack[:len(stack)-1]
			if labels > len(stack) {
				labels = 0
			}
			i++
		case c >= '0' && c <= '9' || c == '.':
			// A number or a duration (5m, 1e3, 0x1f).
			for i < len(expr) && (isIdent(expr[i]) || expr[i] == '.') {
				i++
			}
		case isIdentStart(c):
			start := i
			for i < len(expr) && isIdent(expr[i]) {
				i++
			}
			word := expr[start:i]
			next := i
			for next < len(expr) && (expr[next] == ' ' || expr[next] == '\t' || expr[next] == '\n') {
				next++
			}
			switch {
			case labels > 0:
				// A label name of by (...), on (...) and the like.
			case grouping[strings.ToLower(word)]:
				if next < len(expr) && expr[next] == '(' {
					stack = append(stack, '(')
					labels = len(stack)
					i = next + 1
				}
			case keywords[strings.ToLower(word)]:
			case next < len(expr) && expr[next] == '(':
				// A function call.
			default:
				names[word] = true
			}
		default:
			// Operators: + - * / % ^ == != < > <= >= = , @ :
			i++
		}
	}
	if len(stack) > 0 {
		return nil, fmt.Errorf("%q: %d parentheses left open", expr, len(stack))
	}
	out := make([]string, 0, len(names))
	for n := range names {
		out = append(out, n)
	}
	sort.Strings(out)
	return out, nil
}

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isIdent(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }

// endOfString returns the index after the string literal that starts at i.
func endOfString(s string, i int) (int, error) {
	quote := s[i]
	for j := i + 1; j < len(s); j++ {
		switch {
		case s[j] == '\\' && quote != '`':
			j++
		case s[j] == quote:
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("%q: unterminated string at %d", s, i)
}

// selector reads the label matchers that start at the { at i; name is the
// value of a __name__="..." matcher.
func selector(s string, i int) (end int, name string, err error) {
	j := i + 1
	for j < len(s) {
		switch c := s[j]; {
		case c == '}':
			return j + 1, name, nil
		case c == '"' || c == '\'' || c == '`':
			e, err := endOfString(s, j)
			if err != nil {
				return 0, "", err
			}
			j = e
		case isIdentStart(c):
			start := j
			for j < len(s) && isIdent(s[j]) {
				j++
			}
			if s[start:j] != "__name__" {
				continue
			}
			k := j
			for k < len(s) && s[k] == ' ' {
				k++
			}
			if k+1 < len(s) && s[k] == '=' && s[k+1] == '"' {
				e, err := endOfString(s, k+1)
				if err != nil {
					return 0, "", err
				}
				name, j = s[k+2:e-1], e
			}
		default:
			j++
		}
	}
	return 0, "", fmt.Errorf("%q: unterminated { at %d", s, i)
}

// Query is one PromQL expression of the chart and where it is.
type Query struct {
	Where, Expr string
}

// labelValues is Grafana's label_values(selector, label) of a variable.
var labelValues = regexp.MustCompile(`^\s*label_values\((.*),\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*$`)

// DashboardQueries returns every PromQL expression of a Grafana dashboard:
// its panels' targets (rows' nested panels too) and its query variables
// (label_values' selector).
func DashboardQueries(dashboard []byte) ([]Query, error) {
	var d struct {
		Panels     []dashboardPanel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(dashboard, &d); err != nil {
		return nil, fmt.Errorf("reading the dashboard: %w", err)
	}
	var out []Query
	var walk func(ps []dashboardPanel)
	walk = func(ps []dashboardPanel) {
		for _, p := range ps {
			for _, t := range p.Targets {
				out = append(out, Query{Where: fmt.Sprintf("panel %q target %s", p.Title, t.RefID), Expr: t.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		var s string
		if err := json.Unmarshal(v.Query, &q); err == nil && q.Query != "" {
			s = q.Query
		} else if err := json.Unmarshal(v.Query, &s); err != nil {
			return nil, fmt.Errorf("variable %s: a query that is neither a string nor an object with query", v.Name)
		}
		if m := labelValues.FindStringSubmatch(s); m != nil {
			s = m[1]
		}
		out = append(out, Query{Where: "variable " + v.Name, Expr: s})
	}
	return out, nil
}

type dashboardPanel struct {
	Title   string `json:"title"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []dashboardPanel `json:"panels"`
}

// RuleGroups is a Prometheus rule file, as promtool reads it.
type RuleGroups struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert string `json:"alert,omitempty"`
			Expr  string `json:"expr"`
		} `json:"rules"`
	} `json:"groups"`
}

// RenderedRules renders the chart's PrometheusRule with values (the
// defaults, with the rule turned on) and returns its spec as a rule file.
func RenderedRules(values ...string) ([]byte, error) {
	manifest, err := sandbox.Template(context.Background(), sandbox.ReleaseNamespace,
		append([]string{"clusterName=monitoring", "metrics.prometheusRule.enabled=true"}, values...)...)
	if err != nil {
		return nil, err
	}
	for _, doc := range strings.Split(string(manifest), "\n---") {
		var obj struct {
			Kind string          `json:"kind"`
			Spec json.RawMessage `json:"spec"`
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			return nil, fmt.Errorf("reading the rendered chart: %w", err)
		}
		if obj.Kind == "PrometheusRule" {
			return yaml.JSONToYAML(obj.Spec)
		}
	}
	return nil, fmt.Errorf("the chart rendered no PrometheusRule with metrics.prometheusRule.enabled=true")
}

// RuleQueries returns each rule's expression of a rule file.
func RuleQueries(rules []byte) ([]Query, error) {
	var g RuleGroups
	if err := yaml.Unmarshal(rules, &g); err != nil {
		return nil, fmt.Errorf("reading the rules: %w", err)
	}
	var out []Query
	for _, group := range g.Groups {
		for _, r := range group.Rules {
			out = append(out, Query{Where: "alert " + r.Alert, Expr: r.Expr})
		}
	}
	return out, nil
}

// ChartQueries are the expressions of the chart's dashboard and of its
// rendered alert rules.
func ChartQueries() ([]Query, error) {
	dashboard, err := os.ReadFile(filepath.Join(sandbox.ChartDir(), "files", "dashboard.json"))
	if err != nil {
		return nil, err
	}
	queries, err := DashboardQueries(dashboard)
	if err != nil {
		return nil, err
	}
	rules, err := RenderedRules()
	if err != nil {
		return nil, err
	}
	ruleQueries, err := RuleQueries(rules)
	if err != nil {
		return nil, err
	}
	return append(queries, ruleQueries...), nil
}

// NamesUsed maps each metric name the queries select to where.
func NamesUsed(queries []Query) (map[string][]string, error) {
	used := map[string][]string{}
	for _, q := range queries {
		names, err := MetricNames(q.Expr)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", q.Where, err)
		}
		if len(names) == 0 {
			return nil, fmt.Errorf("%s: %q selects no metric", q.Where, q.Expr)
		}
		for _, n := range names {
			used[n] = append(used[n], q.Where)
		}
	}
	return used, nil
}
