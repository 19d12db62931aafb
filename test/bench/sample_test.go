package main

import "testing"

func TestSample(t *testing.T) {
	for _, tc := range []struct {
		line, name, labels string
		value              float64
		ok                 bool
	}{
		{`apiserver_request_total{resource="pods",verb="POST"} 12`, "apiserver_request_total", `resource="pods",verb="POST"`, 12, true},
		{`flotilla_x{reason="a b}"} 1.5e+02 1700000000000`, "flotilla_x", `reason="a b}"`, 150, true},
		{`go_goroutines 7`, "", "", 0, false},
		{`# HELP flotilla_x what{it} counts`, "", "", 0, false},
		{`flotilla_x{target="t1"}`, "", "", 0, false},
		{`flotilla_x{target="t1"} NaNx`, "", "", 0, false},
	} {
		name, labels, v, ok := sample(tc.line)
		if ok != tc.ok || (ok && (name != tc.name || labels != tc.labels || v != tc.value)) {
			t.Errorf("sample(%q) = %q, %q, %v, %v; want %q, %q, %v, %v", tc.line, name, labels, v, ok, tc.name, tc.labels, tc.value, tc.ok)
		}
	}
}
