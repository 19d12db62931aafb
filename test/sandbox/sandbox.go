package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-multierror"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Options describe a sandbox.
type Options struct {
	// Dir holds the clusters' data, kubeconfigs and logs. Empty means a new
	// temporary folder.
	Dir string
	// BinDir holds the binaries; empty means $FLOTILLA_BIN or <repo>/bin.
	BinDir string
	// Clusters to start; they start in parallel.
	Clusters []ClusterSpec
}

// ClusterSpec describes one cluster.
type ClusterSpec struct {
	Name  string
	Nodes []NodeSpec
	// Minor is the Kubernetes minor of the cluster's control plane and
	// scheduler: "" for the pinned one (KubernetesVersion), or an older
	// one that make tools-versions and make build-schedulers built
	// ("1.35", "1.36": bin/<minor>/ and bin/flotilla-scheduler-<minor>).
	// Its release runs the scheduler build the chart picks for it.
	Minor string
	// WithoutScheduler leaves the cluster without a scheduler.
	WithoutScheduler bool
	// SchedulerConfig replaces DefaultSchedulerConfig; %s stands for the
	// kubeconfig path.
	SchedulerConfig string
	// SchedulerArgs are appended to the scheduler's flags.
	SchedulerArgs []string
	// APIServerArgs are appended to the API server's flags (feature
	// gates, --runtime-config).
	APIServerArgs []string
	// WithoutRelease starts the cluster without Flotilla's Helm release;
	// its own scheduler then serves the flotilla profile too. By default a
	// cluster with a scheduler gets the release at start, whose scheduler
	// (CandidateScheduler) schedules candidates under the chart's
	// ServiceAccount; StartAgent adds the release's agent.
	WithoutRelease bool
	// SourceOnly installs the release without its scheduler (the chart's
	// scheduler.enabled=false), as a cluster that only sends its pods
	// elsewhere would run it; the cluster's own scheduler still runs.
	SourceOnly bool
	// PermitTimeoutSeconds, when set, is how long a reserved candidate
	// waits in Permit in this cluster (the chart's
	// scheduler.permitTimeoutSeconds, or the flotilla profile of the
	// cluster's own scheduler without a release) instead of 30 s.
	PermitTimeoutSeconds int
	// ReleaseSet are chart values (--set) of the cluster's release, given
	// on every install and upgrade of it, the one at start included.
	ReleaseSet []string
	// OnProcessStart, when set, is called with the name and pid of every
	// process the sandbox starts for this cluster (its control plane, kwok,
	// its schedulers, the agents and hook Jobs of its Flotilla release),
	// restarts included, as soon as it has started and before it is waited
	// on; an error kills the process and fails its start. The name is a
	// Component for the cluster's own processes (ControlPlane tells which
	// of them a production cluster runs on its control plane), and the
	// process's or Job's name for the release's. The bench moves each one
	// into a CPU cgroup here (test/cgroup); what a process starts afterwards
	// is born in its cgroup.
	OnProcessStart func(name string, pid int) error
}

// Sandbox is a set of running clusters.
type Sandbox struct {
	Dir      string
	LogDir   string
	Clusters []*Cluster

	ownDir bool
}

// Cluster returns the cluster with the given name, or nil.
func (s *Sandbox) Cluster(name string) *Cluster {
	for _, c := range s.Clusters {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// Start starts every cluster, creates their nodes and waits until each has
// Ready nodes and a default ServiceAccount. On error everything started so
// far is stopped again.
func Start(ctx context.Context, opts Options) (_ *Sandbox, err error) {
	if len(opts.Clusters) == 0 {
		return nil, errors.New("sandbox: no clusters requested")
	}
	binDir, err := findBinDir(opts.BinDir)
	if err != nil {
		return nil, err
	}
	s := &Sandbox{Dir: opts.Dir}
	if s.Dir == "" {
		if s.Dir, err = os.MkdirTemp("", "flotilla-sandbox-"); err != nil {
			return nil, err
		}
		s.ownDir = true
	}
	s.LogDir = filepath.Join(s.Dir, "logs")
	if err := os.MkdirAll(s.LogDir, 0o755); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, spec := range opts.Clusters {
		if spec.Name == "" || seen[spec.Name] {
			return nil, fmt.Errorf("sandbox: cluster names must be unique and not empty, got %q", spec.Name)
		}
		seen[spec.Name] = true
		c, err := newCluster(spec, filepath.Join(s.Dir, spec.Name), s.LogDir, binDir)
		if err != nil {
			return nil, fmt.Errorf("preparing cluster %s: %w", spec.Name, err)
		}
		s.Clusters = append(s.Clusters, c)
	}
	defer func() {
		if err != nil {
			_ = s.Stop()
		}
	}()

	var mu sync.Mutex
	var errs *multierror.Error
	var wg sync.WaitGroup
	for _, c := range s.Clusters {
		wg.Go(func() {
			if err := c.start(ctx); err != nil {
				mu.Lock()
				errs = multierror.Append(errs, err)
				mu.Unlock()
				return
			}
			if err := c.settle(ctx); err != nil {
				mu.Lock()
				errs = multierror.Append(errs, fmt.Errorf("cluster %s: %w", c.Name, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := errs.ErrorOrNil(); err != nil {
		return nil, fmt.Errorf("starting sandbox (logs in %s): %w", s.LogDir, err)
	}
	return s, nil
}

// Stop stops every process of every cluster and, when the sandbox made its
// own folder, removes it. It is safe to call more than once.
func (s *Sandbox) Stop() error {
	var errs *multierror.Error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, c := range s.Clusters {
		wg.Go(func() {
			if err := c.stop(); err != nil {
				mu.Lock()
				errs = multierror.Append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errs.ErrorOrNil()
}

// RemoveDir deletes the sandbox folder if the sandbox created it.
func (s *Sandbox) RemoveDir() error {
	if !s.ownDir {
		return nil
	}
	return os.RemoveAll(s.Dir)
}

// settle creates the cluster's nodes and waits for what tests rely on: every
// node Ready and the default ServiceAccount, without which the API server
// refuses pods.
func (c *Cluster) settle(ctx context.Context) error {
	client := c.Client()
	if err := c.InstallCRDs(ctx); err != nil {
		return err
	}
	for i, n := range c.spec.Nodes {
		if n.Name == "" {
			n.Name = fmt.Sprintf("%s-node-%d", c.Name, i)
		}
		if err := c.AddNode(ctx, n); err != nil {
			return err
		}
	}
	err := poll(ctx, 90*time.Second, func() (bool, error) {
		_, err := client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the default ServiceAccount: %w", err)
	}
	if err := c.WaitNodesReady(ctx, 90*time.Second); err != nil {
		return err
	}
	if !c.spec.WithoutScheduler && !c.spec.WithoutRelease {
		if _, err := c.InstallRelease(ctx, ReleaseOptions{Scheduler: !c.spec.SourceOnly, WithoutAgent: true}); err != nil {
			return fmt.Errorf("installing Flotilla's release: %w", err)
		}
	}
	return nil
}

// WaitNodesReady waits until every node of the cluster is Ready.
func (c *Cluster) WaitNodesReady(ctx context.Context, timeout time.Duration) error {
	client := c.Client()
	var notReady []string
	err := poll(ctx, timeout, func() (bool, error) {
		nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		notReady = notReady[:0]
		for _, n := range nodes.Items {
			if !nodeReady(&n) {
				notReady = append(notReady, n.Name)
			}
		}
		return len(notReady) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("nodes not Ready: %v: %w", notReady, err)
	}
	return nil
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// poll calls cond every 100ms until it returns true, returns an error, or the
// timeout passes.
func poll(ctx context.Context, timeout time.Duration, cond func() (bool, error)) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return cond()
	})
}

// findBinDir locates the folder of pinned binaries.
func findBinDir(explicit string) (string, error) {
	dir := explicit
	if dir == "" {
		dir = os.Getenv("FLOTILLA_BIN")
	}
	if dir == "" {
		root, err := RepoRoot()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(root, "bin")
	}
	for _, name := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kwok", "flotilla-scheduler"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return "", fmt.Errorf("sandbox: %s is missing from %s; run `make tools build` first", name, dir)
		}
	}
	return dir, nil
}

// RepoRoot finds the checkout's root by walking up to go.mod.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "hack", "tools.sh")); err == nil {
				return dir, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("sandbox: cannot find the repository root (no go.mod with hack/tools.sh above the working directory)")
		}
		dir = parent
	}
}
