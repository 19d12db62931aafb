package sandbox

import (
	"context"
	"fmt"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// Agent is a flotilla-agent process run against a sandbox cluster.
type Agent struct {
	*Process
	// Cluster is the agent's own cluster.
	Cluster *Cluster
	// ProbeAddr serves /healthz and /readyz; MetricsAddr serves /metrics.
	ProbeAddr, MetricsAddr string
	// KubeletAddr serves the kubelet API of the virtual nodes (HTTPS),
	// where the API server calls it.
	KubeletAddr string
}

// StartAgent installs Flotilla's chart in cluster c with the real helm and
// runs the release's agent (see Release), gives it the given targets as
// ClusterTargets (c itself as self, the others through a Secret with their
// admin kubeconfig), and waits until the webhook mutates opted-in pods and
// every target is Ready. values are the chart's values the release is
// installed with (helm --set), e.g. "agent.maxCandidates=1": they reach the
// agent through the configuration the chart renders.
func StartAgent(ctx context.Context, c *Cluster, targets []*Cluster, values ...string) (*Agent, error) {
	return StartAgentWith(ctx, c, targets, ReleaseOptions{Set: values})
}

// StartAgentWith is StartAgent with the release's options.
func StartAgentWith(ctx context.Context, c *Cluster, targets []*Cluster, opts ReleaseOptions) (*Agent, error) {
	r, err := c.InstallRelease(ctx, opts)
	if err != nil {
		return nil, err
	}
	a := r.Agent
	for _, t := range targets {
		if err := c.AddTarget(ctx, t); err != nil {
			return nil, err
		}
	}
	for _, t := range targets {
		if err := c.WaitTargetReady(ctx, t.Name, 60*time.Second); err != nil {
			return nil, fmt.Errorf("agent in %s (%s): %w", c.Name, a, err)
		}
	}
	return a, nil
}

// WaitReady waits until the agent is healthy and its webhook turns an
// opted-in pod into a source pod, or keeps it here for a self target with
// localFirst (checked with a dry-run create).
func (a *Agent) WaitReady(ctx context.Context) error {
	client := a.Cluster.Client()
	httpClient := &http.Client{Timeout: 2 * time.Second}
	probe := optedInProbe("webhook-probe-")
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "flotilla-probe", Labels: map[string]string{protocol.NamespaceEnabledLabel: "true"}}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	var last error
	err := poll(ctx, 60*time.Second, func() (bool, error) {
		if a.Process != nil && !a.Running() {
			return false, fmt.Errorf("agent exited; see %s", a.LogPath())
		}
		resp, err := httpClient.Get("http://" + a.ProbeAddr + "/readyz")
		if err != nil {
			last = err
			return false, nil
		}
		resp.Body.Close()
		got, err := client.CoreV1().Pods(ns.Name).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			last = err
			return false, nil
		}
		if got.Spec.SchedulerName != protocol.SourceSchedulerName && got.Labels[protocol.LocalLabel] != "true" {
			last = fmt.Errorf("webhook not registered yet (schedulerName %q)", got.Spec.SchedulerName)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("agent in %s not ready (%s): %v: %w", a.Cluster.Name, a, last, err)
	}
	return nil
}

// String names the agent's log: its process's, or the test's own output
// for an agent run in process.
func (a *Agent) String() string {
	if a.Process == nil {
		return "in process, log " + inProcessLog
	}
	return "log " + a.LogPath()
}

// optedInProbe is an opted-in pod that asks for nothing, for dry-run
// creates that show what the webhook does.
func optedInProbe(generateName string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: generateName, Labels: map[string]string{protocol.ElectLabel: "true"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "probe"}}},
	}
}
