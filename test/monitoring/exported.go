package monitoring

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// OnlyAfterAFault are the metrics the chart's queries name that a scrape
// of an agent and a scheduler that placed one pod (test/e2e's
// TestInspectableState) does not show: counter vectors appear once a child
// was counted, and these count what that placement never meets. Each must
// still be registered in the code (RegisteredMetrics).
var OnlyAfterAFault = map[string]string{
	"flotilla_candidates_denied_total":               "a candidate denied while another target's stood elected: two targets and a slow binding",
	"flotilla_candidate_denials_lifted_total":        "a denial lifted: an election that ended without binding after a denial",
	"flotilla_candidates_revoked_total":              "an elected candidate unbound past agent.electionTimeout",
	"flotilla_candidates_deleted_total":              "a candidate deleted: an election's loser or an ended pod; one target and a running pod delete none",
	"flotilla_candidates_unreserved_total":           "a reservation that ended without binding",
	"flotilla_source_quota_refusals_total":           "a candidate refused for its invitation's quota",
	"flotilla_split_places_total":                    "a pod of a workload with an on-demand/spot split",
	"flotilla_split_evictions_total":                 "an eviction by the split's rebalancer",
	"flotilla_target_token_issued_timestamp_seconds": "a target reached with an expiring ServiceAccount token (the sandbox's agents use an admin kubeconfig)",
	"flotilla_target_token_expiry_timestamp_seconds": "a target reached with an expiring ServiceAccount token (the sandbox's agents use an admin kubeconfig)",
}

// histogramSuffixes are the series a histogram is exported as.
var histogramSuffixes = []string{"_bucket", "_count", "_sum"}

// registration is a metric's name where the code registers it: a client
// options' Name or a collector's prometheus.NewDesc.
var registration = regexp.MustCompile(`(?:Name:\s*|NewDesc\(\s*)"(flotilla_[a-z0-9_]+)"`)

// RegisteredMetrics returns the flotilla_* metrics that pkg/ registers, read
// from its Go source (tests left out).
func RegisteredMetrics() (map[string]bool, error) {
	root, err := sandbox.RepoRoot()
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	err = filepath.WalkDir(filepath.Join(root, "pkg"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range registration.FindAllStringSubmatch(string(src), -1) {
			out[m[1]] = true
		}
		return nil
	})
	return out, err
}

// baseNames are name and, for a histogram's series, the histogram's name.
func baseNames(name string) []string {
	out := []string{name}
	for _, suffix := range histogramSuffixes {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			out = append(out, base)
		}
	}
	return out
}

// Registered reports whether name is one of registered or a series of one.
func Registered(name string, registered map[string]bool) bool {
	for _, n := range baseNames(name) {
		if registered[n] {
			return true
		}
	}
	return false
}

// ScrapedNames returns the metric names of a Prometheus text exposition.
func ScrapedNames(exposition string) map[string]bool {
	out := map[string]bool{}
	for _, line := range strings.Split(exposition, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			out[line[:i]] = true
		}
	}
	return out
}

// Unexported returns, sorted, what the chart's queries name that neither
// a scrape shows (scraped) nor OnlyAfterAFault lists, each with where it
// is used; and the names of OnlyAfterAFault that the code does not
// register.
func Unexported(used map[string][]string, scraped, registered map[string]bool) (problems []string) {
	for name, where := range used {
		if scraped[name] {
			continue
		}
		listed := false
		for _, n := range baseNames(name) {
			listed = listed || OnlyAfterAFault[n] != ""
		}
		if !listed {
			problems = append(problems, fmt.Sprintf("%s (used by %s) is in no scrape and not listed in OnlyAfterAFault", name, strings.Join(where, ", ")))
		}
	}
	for name := range OnlyAfterAFault {
		if !registered[name] {
			problems = append(problems, fmt.Sprintf("OnlyAfterAFault lists %s, which no code in pkg/ registers", name))
		}
	}
	sort.Strings(problems)
	return problems
}
