package e2e

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

// TestInspectableState places one pod from src into c2 and reads what the
// source's agent and the target's scheduler tell of it: the
// agent's counters for c2 (one candidate created, one allowance), one
// election and one binding observed, c2 reachable, and its /debug/state
// (leader, c2 healthy and synced with one cached candidate, no election
// left in flight); the scheduler's counters (every reservation ended bound
// or unreserved, one bound) and its /debug/state (nothing waiting in
// Permit, the Source's quota counting the delegate). A counter not
// incremented, a handler not served or a provider not registered fails it.
// Then every metric the chart's dashboard and alerts query must be in these
// scrapes (or listed as appearing only after a fault), and the chart's
// monitoring objects must pass a server-side dry run against the
// Prometheus Operator's CRDs.
func TestInspectableState(t *testing.T) {
	t.Parallel()
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{
		{Name: "src", WithoutScheduler: true},
		{Name: "c2", Nodes: []sandbox.NodeSpec{{CPU: "4"}}},
	}})
	src, c2 := s.Cluster("src"), s.Cluster("c2")
	ctx := t.Context()
	for _, c := range []*sandbox.Cluster{src, c2} {
		createNamespace(t, c.Client(), placementNS)
	}
	// An invitation of src into c2 with a quota, for the scheduler's
	// accounting; the agent reaches c2 with its admin kubeconfig.
	invitation := &v1alpha1.Source{ObjectMeta: metav1.ObjectMeta{Namespace: placementNS, Name: "src"}}
	invitation.Spec.ClusterName = "src"
	invitation.Spec.Identity.User = "src-agent"
	invitation.Spec.Quota = &v1alpha1.SourceQuota{Pods: ptr.To[int32](5)}
	if err := c2.CRClient().Create(ctx, invitation); err != nil {
		t.Fatal(err)
	}
	agent, err := sandbox.StartAgent(ctx, src, []*sandbox.Cluster{c2})
	if err != nil {
		t.Fatal(err)
	}

	if _, err := src.Client().CoreV1().Pods(placementNS).Create(ctx, optedInPod("inspected", "100m"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, src.Client(), placementNS, "inspected", "bound to c2's virtual node", func(p *corev1.Pod) bool {
		return p.Spec.NodeName == "flotilla-c2"
	})

	// The binding is observed right after the API server accepts it.
	plain := &http.Client{Timeout: 5 * time.Second}
	var agentMetrics metrics
	waitFor(t, 30*time.Second, "the agent's metrics of the binding", func() (bool, string) {
		body, err := get(plain, "http://"+agent.MetricsAddr+"/metrics", "")
		if err != nil {
			return false, err.Error()
		}
		agentMetrics = parseMetrics(body)
		n, _ := agentMetrics.value("flotilla_pod_bound_seconds_count")
		return n >= 1, fmt.Sprintf("flotilla_pod_bound_seconds_count %v", n)
	})
	for series, want := range map[string]float64{
		`flotilla_candidates_created_total{target="c2"}`: 1,
		`flotilla_candidates_allowed_total{target="c2"}`: 1,
		`flotilla_election_seconds_count`:                1,
		`flotilla_pod_bound_seconds_count`:               1,
		`flotilla_target_reachable{target="c2"}`:         1,
		`flotilla_target_ready{target="c2"}`:             1,
		`flotilla_target_candidates{target="c2"}`:        1,
		`flotilla_source_pods_waiting`:                   0,
		`flotilla_source_pods_waiting_oldest_seconds`:    0,
	} {
		if got, ok := agentMetrics.value(series); !ok || got != want {
			t.Errorf("agent: %s = %v (present %t), want %v", series, got, ok, want)
		}
	}
	if n, _ := agentMetrics.value(`flotilla_webhook_requests_total{result="allowed"}`); n < 1 {
		t.Errorf("agent: flotilla_webhook_requests_total{result=\"allowed\"} = %v, want the placed pod's admission at least", n)
	}
	// The webhook's certificate is the rotator's: a year, renewed 90 days ahead.
	if exp, _ := agentMetrics.value("flotilla_webhook_cert_expiry_timestamp_seconds"); time.Until(time.Unix(int64(exp), 0)) < 90*24*time.Hour {
		t.Errorf("agent: flotilla_webhook_cert_expiry_timestamp_seconds %v: want the served certificate's expiry, months ahead", exp)
	}

	var agentState struct {
		Leader  bool `json:"leader"`
		Targets struct {
			Total int `json:"total"`
			Items []struct {
				Name                  string
				Reachable, Authorized bool
				Synced                bool
				Candidates            int
				LastError             string
			} `json:"items"`
		} `json:"targets"`
		Elections struct {
			Total int    `json:"total"`
			Error string `json:"error"`
		} `json:"elections"`
	}
	getJSON(t, plain, "http://"+agent.MetricsAddr+"/debug/state", &agentState)
	if !agentState.Leader {
		t.Errorf("agent /debug/state: leader false; the only replica leads")
	}
	if tg := agentState.Targets.Items; agentState.Targets.Total != 1 || len(tg) != 1 || tg[0].Name != "c2" ||
		!tg[0].Reachable || !tg[0].Authorized || !tg[0].Synced || tg[0].Candidates != 1 || tg[0].LastError != "" {
		t.Errorf("agent /debug/state targets: %+v; want c2 reachable, authorized, synced, holding the delegate", agentState.Targets)
	}
	if agentState.Elections.Error != "" || agentState.Elections.Total != 0 {
		t.Errorf("agent /debug/state elections: %+v; want none in flight once the pod is bound", agentState.Elections)
	}

	// The target's scheduler: the release's, whose chart serves its state.
	debugAddr := c2.SchedulerDebugAddr()
	if debugAddr == "" {
		t.Fatal("c2's release scheduler serves no /debug/state (the chart's scheduler.debugStateAddress)")
	}
	type quota struct {
		Used, Limit string
	}
	var schedState struct {
		Flotilla struct {
			Reservations int `json:"reservations"`
			Waiting      struct {
				Total int `json:"total"`
			} `json:"waiting"`
			Quotas struct {
				Items []struct {
					Invitation, Cluster string
					Resources           map[string]quota
				} `json:"items"`
			} `json:"quotas"`
			QuotasKnown bool `json:"quotasKnown"`
		} `json:"flotilla"`
	}
	waitFor(t, 30*time.Second, "the scheduler's /debug/state counting the delegate against the quota", func() (bool, string) {
		body, err := get(plain, "http://"+debugAddr+"/debug/state", "")
		if err != nil {
			return false, err.Error()
		}
		if err := json.Unmarshal([]byte(body), &schedState); err != nil {
			return false, err.Error()
		}
		q := schedState.Flotilla.Quotas.Items
		return len(q) == 1 && q[0].Resources["pods"] == quota{Used: "1", Limit: "5"}, body
	})
	if f := schedState.Flotilla; f.Reservations != 0 || f.Waiting.Total != 0 || !f.QuotasKnown ||
		f.Quotas.Items[0].Invitation != "Source "+placementNS+"/src" || f.Quotas.Items[0].Cluster != "src" {
		t.Errorf("scheduler /debug/state: %+v; want nothing held or waiting, the quota known and named", f)
	}

	// Its metrics are on the secure port, behind the API server's authn/z.
	secure := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // self-signed, loopback
	var reserved, bound, unreserved float64
	var sm metrics
	waitFor(t, 30*time.Second, "the scheduler's metrics of the binding", func() (bool, string) {
		body, err := get(secure, "https://"+c2.SchedulerAddr()+"/metrics", c2.RESTConfig().BearerToken)
		if err != nil {
			return false, err.Error()
		}
		sm = parseMetrics(body)
		reserved, _ = sm.value(`flotilla_candidates_reserved_total{cluster="src"}`)
		bound, _ = sm.value(`flotilla_candidates_bound_total{cluster="src"}`)
		unreserved = sm.sum(`flotilla_candidates_unreserved_total{cluster="src",`)
		// The quota's gauges are set every 10 s.
		used, _ := sm.value(quotaSeries("used"))
		limit, _ := sm.value(quotaSeries("limit"))
		return bound >= 1 && used == 1 && limit == 5, fmt.Sprintf("reserved %v, bound %v, unreserved %v; pods quota used %v of %v", reserved, bound, unreserved, used, limit)
	})
	if bound != 1 || reserved != bound+unreserved {
		t.Errorf("scheduler: reserved %v, bound %v, unreserved %v; want one bound, and every reservation ended bound or unreserved", reserved, bound, unreserved)
	}

	// What the chart's dashboard and alerts query is what these export,
	// and its monitoring objects are valid Prometheus Operator objects.
	checkChartQueriesAgainstScrapes(t, agentMetrics, sm)
	dryRunMonitoringObjects(t, c2)
}

// quotaSeries is the series of the src invitation's pods quota, used or limit.
func quotaSeries(which string) string {
	return fmt.Sprintf(`flotilla_source_quota_%s{invitation="Source %s/src",resource="pods"}`, which, placementNS)
}

// get fetches url, with a bearer token if one is given.
func get(c *http.Client, url, token string) (string, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	return string(body), nil
}

func getJSON(t *testing.T, c *http.Client, url string, into any) {
	t.Helper()
	body, err := get(c, url, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(body), into); err != nil {
		t.Fatalf("GET %s: %v\n%s", url, err, body)
	}
}

// metrics maps each series of a Prometheus text exposition, as written
// (name{label="value",...}, labels sorted), to its value.
type metrics map[string]float64

func parseMetrics(text string) metrics {
	m := metrics{}
	for _, line := range strings.Split(text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			m[line[:i]] = v
		}
	}
	return m
}

func (m metrics) value(series string) (float64, bool) {
	v, ok := m[series]
	return v, ok
}

// sum adds the series that begin with prefix.
func (m metrics) sum(prefix string) float64 {
	var total float64
	for s, v := range m {
		if strings.HasPrefix(s, prefix) {
			total += v
		}
	}
	return total
}
