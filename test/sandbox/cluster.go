package sandbox

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-multierror"
	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Component names one process of a sandbox cluster.
type Component string

const (
	Etcd              Component = "etcd"
	APIServer         Component = "kube-apiserver"
	ControllerManager Component = "kube-controller-manager"
	Scheduler         Component = "scheduler"
	// CandidateScheduler is Flotilla's scheduler, the one that schedules
	// candidates: the process standing in for the pod of the cluster's
	// Flotilla release, or, in a cluster without one, Scheduler itself.
	CandidateScheduler Component = "flotilla-scheduler"
	Kwok               Component = "kwok"
)

// ControlPlane tells whether the process of that name (as OnProcessStart
// gives it) is one a production cluster runs on its control plane: etcd,
// the API server, the controller manager and the cluster's own scheduler.
// kwok stands for the kubelets, and the release's processes (agents,
// Flotilla's scheduler, hook Jobs) for pods: they run on worker nodes.
func ControlPlane(name string) bool {
	switch Component(name) {
	case Etcd, APIServer, ControllerManager, Scheduler:
		return true
	}
	return false
}

// startOrder is the order in which a cluster's processes come up and the
// reverse of the order in which they stop.
var startOrder = []Component{Etcd, APIServer, ControllerManager, Scheduler, Kwok}

const (
	serviceCIDR = "10.0.0.0/24"
	serviceIP   = "10.0.0.1"
	stopGrace   = 10 * time.Second
)

// Cluster is one running sandbox cluster.
type Cluster struct {
	// Name is the cluster's name, also its kubeconfig context.
	Name string
	// Kubeconfig is the path of a kubeconfig with cluster-admin rights.
	Kubeconfig string
	// Host is the API server's URL.
	Host string

	spec   ClusterSpec
	dir    string
	logDir string
	pki    *pki
	binDir string
	ports  map[string]int
	procs  map[Component]*Process
	// schedulerPod is what the release's scheduler was started from, for
	// StartSchedulerReplica.
	schedulerPod *podProcess
	extra        []*Process
	mu           sync.Mutex
}

// RESTConfig returns a fresh client configuration with cluster-admin rights.
func (c *Cluster) RESTConfig() *rest.Config {
	return &rest.Config{
		Host:            c.Host,
		BearerToken:     c.pki.adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.pki.caCert},
		QPS:             200,
		Burst:           400,
		// As kube-scheduler and the controller manager talk: the cheapest
		// for the API server, so that clients of tests and benchmarks
		// weigh little on what they measure.
		ContentConfig: rest.ContentConfig{
			ContentType:        runtime.ContentTypeProtobuf,
			AcceptContentTypes: runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON,
		},
	}
}

// Client returns a clientset with cluster-admin rights.
func (c *Cluster) Client() kubernetes.Interface {
	return kubernetes.NewForConfigOrDie(c.RESTConfig())
}

// LogPath is the log file of one of the cluster's processes.
func (c *Cluster) LogPath(comp Component) string {
	return filepath.Join(c.logDir, c.Name+"-"+string(comp)+".log")
}

// PIDs lists the process ids of the cluster's running processes.
func (c *Cluster) PIDs() map[Component]int {
	out := map[Component]int{}
	for comp, p := range c.procs {
		if pid := p.pid(); pid != 0 {
			out[comp] = pid
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.extra {
		if pid := p.pid(); pid != 0 {
			out[Component(p.name)] = pid
		}
	}
	return out
}

// Running reports whether a component's process is up.
func (c *Cluster) Running(comp Component) bool {
	p, ok := c.procs[comp]
	return ok && p.running()
}

// Stop stops one component gracefully (SIGTERM, then SIGKILL after a grace
// period); the rest of the cluster keeps running. StopAPIServer is the
// common case: an outage of the cluster as seen by its peers.
func (c *Cluster) Stop(comp Component) error {
	p, ok := c.procs[comp]
	if !ok {
		return fmt.Errorf("cluster %s has no %s", c.Name, comp)
	}
	return p.stop(stopGrace)
}

// Kill kills one component with SIGKILL, as a crash would.
func (c *Cluster) Kill(comp Component) error {
	p, ok := c.procs[comp]
	if !ok {
		return fmt.Errorf("cluster %s has no %s", c.Name, comp)
	}
	return p.stop(0)
}

// Pause freezes one component with SIGSTOP (see Process.Pause): its peers'
// connections stay open and get no answer, so their watches go stale.
func (c *Cluster) Pause(comp Component) error {
	p, ok := c.procs[comp]
	if !ok {
		return fmt.Errorf("cluster %s has no %s", c.Name, comp)
	}
	return p.Pause()
}

// Resume continues a paused component with SIGCONT.
func (c *Cluster) Resume(comp Component) error {
	p, ok := c.procs[comp]
	if !ok {
		return fmt.Errorf("cluster %s has no %s", c.Name, comp)
	}
	return p.Resume()
}

// Start starts a stopped component again, with the same ports and data, and
// waits until it is healthy.
func (c *Cluster) Start(ctx context.Context, comp Component) error {
	p, ok := c.procs[comp]
	if !ok {
		return fmt.Errorf("cluster %s has no %s", c.Name, comp)
	}
	if err := p.start(); err != nil {
		return err
	}
	return c.waitHealthy(ctx, comp)
}

// Restart kills a component and starts it again.
func (c *Cluster) Restart(ctx context.Context, comp Component) error {
	if err := c.Kill(comp); err != nil {
		return err
	}
	return c.Start(ctx, comp)
}

// StopAPIServer takes the cluster's API server down; etcd keeps the data.
func (c *Cluster) StopAPIServer() error { return c.Stop(APIServer) }

// StartAPIServer brings the API server back on the same address.
func (c *Cluster) StartAPIServer(ctx context.Context) error { return c.Start(ctx, APIServer) }

func newCluster(spec ClusterSpec, dir, logDir, binDir string) (*Cluster, error) {
	c := &Cluster{Name: spec.Name, spec: spec, dir: dir, logDir: logDir, binDir: binDir, procs: map[Component]*Process{}}
	var err error
	if c.pki, err = newPKI(filepath.Join(dir, "pki")); err != nil {
		return nil, err
	}
	ports, err := FreePorts(6)
	if err != nil {
		return nil, err
	}
	c.ports = map[string]int{"etcd-client": ports[0], "etcd-peer": ports[1], "apiserver": ports[2], "kcm": ports[3], "scheduler": ports[4], "kwok": ports[5]}
	c.Host = "https://127.0.0.1:" + strconv.Itoa(c.ports["apiserver"])
	c.Kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := c.writeKubeconfig(); err != nil {
		return nil, fmt.Errorf("writing kubeconfig: %w", err)
	}
	if err := c.defineProcesses(); err != nil {
		return nil, err
	}
	return c, nil
}

// newProcess defines one of the cluster's processes; every start of it,
// restarts too, goes through the cluster's OnProcessStart.
func (c *Cluster) newProcess(name, binary, logPath string, args ...string) *Process {
	p := newProcess(name, binary, logPath, args...)
	p.onStart = c.spec.OnProcessStart
	return p
}

func (c *Cluster) writeKubeconfig() error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[c.Name] = &clientcmdapi.Cluster{Server: c.Host, CertificateAuthorityData: c.pki.caCert}
	cfg.AuthInfos[c.Name+"-admin"] = &clientcmdapi.AuthInfo{Token: c.pki.adminToken}
	cfg.Contexts[c.Name] = &clientcmdapi.Context{Cluster: c.Name, AuthInfo: c.Name + "-admin"}
	cfg.CurrentContext = c.Name
	return clientcmd.WriteToFile(*cfg, c.Kubeconfig)
}

func (c *Cluster) defineProcesses() error {
	bin := func(name string) string { return filepath.Join(c.binDir, name) }
	port := func(name string) string { return strconv.Itoa(c.ports[name]) }
	etcdClient := "http://127.0.0.1:" + port("etcd-client")
	etcdPeer := "http://127.0.0.1:" + port("etcd-peer")

	c.procs[Etcd] = c.newProcess(string(Etcd), bin("etcd"), c.LogPath(Etcd),
		"--name="+c.Name,
		"--data-dir="+filepath.Join(c.dir, "etcd"),
		"--listen-client-urls="+etcdClient,
		"--advertise-client-urls="+etcdClient,
		"--listen-peer-urls="+etcdPeer,
		"--initial-advertise-peer-urls="+etcdPeer,
		"--initial-cluster="+c.Name+"="+etcdPeer,
		// A sandbox trades durability on power loss for speed.
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	)
	apiserverArgs := []string{
		"--etcd-servers=" + etcdClient,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + port("apiserver"),
		"--cert-dir=" + filepath.Join(c.dir, "apiserver-certs"),
		"--tls-cert-file=" + c.pki.servingCert,
		"--tls-private-key-file=" + c.pki.servingKey,
		"--client-ca-file=" + c.pki.caCertPath,
		// What the API server shows kubelets (kwok's and the agents'
		// kubelet API) for logs, exec and port-forward.
		"--kubelet-client-certificate=" + c.pki.kubeletClientCert,
		"--kubelet-client-key=" + c.pki.kubeletClientKey,
		"--token-auth-file=" + c.pki.tokenFile,
		"--authorization-mode=RBAC",
		"--service-account-key-file=" + c.pki.saPub,
		"--service-account-signing-key-file=" + c.pki.saKey,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-cluster-ip-range=" + serviceCIDR,
		"--endpoint-reconciler-type=none",
		"--allow-privileged=true",
		"--profiling=true",
		"--v=1",
	}
	apiserver, err := c.controlPlaneBinary("kube-apiserver")
	if err != nil {
		return err
	}
	kcm, err := c.controlPlaneBinary("kube-controller-manager")
	if err != nil {
		return err
	}
	c.procs[APIServer] = c.newProcess(string(APIServer), apiserver, c.LogPath(APIServer), append(apiserverArgs, c.spec.APIServerArgs...)...)
	c.procs[ControllerManager] = c.newProcess(string(ControllerManager), kcm, c.LogPath(ControllerManager),
		"--kubeconfig="+c.Kubeconfig,
		"--authentication-kubeconfig="+c.Kubeconfig,
		"--authorization-kubeconfig="+c.Kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port="+port("kcm"),
		"--cert-dir="+filepath.Join(c.dir, "kcm-certs"),
		"--leader-elect=false",
		"--service-account-private-key-file="+c.pki.saKey,
		"--root-ca-file="+c.pki.caCertPath,
		"--use-service-account-credentials=false",
		"--kube-api-qps=200",
		"--kube-api-burst=400",
		"--v=1",
	)
	if !c.spec.WithoutScheduler {
		cfgPath := filepath.Join(c.dir, "scheduler-config.yaml")
		if err := os.WriteFile(cfgPath, []byte(c.schedulerConfig()), 0o644); err != nil {
			return fmt.Errorf("writing scheduler configuration: %w", err)
		}
		args := []string{
			"--config=" + cfgPath,
			"--authentication-kubeconfig=" + c.Kubeconfig,
			"--authorization-kubeconfig=" + c.Kubeconfig,
			"--bind-address=127.0.0.1",
			"--secure-port=" + port("scheduler"),
			"--cert-dir=" + filepath.Join(c.dir, "scheduler-certs"),
			// A candidate waits in Permit for the source's word; with this
			// gate on, the scheduler first writes nominatedNodeName on
			// every candidate, status writes that nobody here reads (see
			// docs/operations.md).
			"--feature-gates=" + SchedulerFeatureGates,
			"--v=1",
		}
		sched, err := c.schedulerBinaryOf(c.spec.Minor)
		if err != nil {
			return err
		}
		c.procs[Scheduler] = c.newProcess(string(Scheduler), sched, c.LogPath(Scheduler), append(args, c.spec.SchedulerArgs...)...)
	}
	c.procs[Kwok] = c.newProcess(string(Kwok), bin("kwok"), c.LogPath(Kwok),
		"--kubeconfig="+c.Kubeconfig,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector="+kwokNodeAnnotation+"=fake",
		"--cidr=10.244.0.1/16",
		"--node-ip=127.0.0.1",
		"--node-lease-duration-seconds=40",
		"--config="+filepath.Join(c.dir, "kwok.yaml"),
		// kwok's kubelet API: its nodes publish this port, and the API
		// server reaches it on their InternalIP, 127.0.0.1.
		"--server-address=127.0.0.1:"+port("kwok"),
		"--node-port="+port("kwok"),
		"--tls-cert-file="+c.pki.servingCert,
		"--tls-private-key-file="+c.pki.servingKey,
	)
	if err := os.WriteFile(c.PodLogPath(), criLog(PodLogLines), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(c.dir, "kwok.yaml"), []byte(fmt.Sprintf(kwokConfig, c.PodLogPath(), c.Name)), 0o644)
}

// PodLogLines are the log of every container kwok runs, at first, as
// kubectl logs shows it; AppendPodLog adds to it (kubectl logs -f follows).
const PodLogLines = "sandbox log line 1\nsandbox log line 2\nsandbox log line 3\n"

// PodLogPath is the file kwok serves as every container's log.
func (c *Cluster) PodLogPath() string { return filepath.Join(c.dir, "pod.log") }

// AppendPodLog writes lines to every container's log.
func (c *Cluster) AppendPodLog(lines string) error {
	f, err := os.OpenFile(c.PodLogPath(), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.Write(criLog(lines)); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// criLog is lines in the CRI log format a kubelet (and kwok) reads:
// "<RFC3339Nano time> stdout F <line>".
func criLog(lines string) []byte {
	var b strings.Builder
	now := time.Now().UTC().Format(time.RFC3339Nano)
	for _, l := range strings.Split(strings.TrimSuffix(lines, "\n"), "\n") {
		fmt.Fprintf(&b, "%s stdout F %s\n", now, l)
	}
	return []byte(b.String())
}

// kwokConfig is what kwok's kubelet API does for every pod: logs from one
// file (%s), followed; exec runs the command here with SANDBOX_CLUSTER set
// to the cluster's name (%s); port-forward echoes what it is sent.
const kwokConfig = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterLogs
metadata:
  name: sandbox
spec:
  logs:
  - logsFile: %s
    follow: true
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterExec
metadata:
  name: sandbox
spec:
  execs:
  - local:
      envs:
      - name: SANDBOX_CLUSTER
        value: %q
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterPortForward
metadata:
  name: sandbox
spec:
  forwards:
  - command: ["cat"]
`

// schedulerConfig is the KubeSchedulerConfiguration of the cluster's own
// scheduler: the default profile for ordinary pods, and the flotilla profile
// for candidates when no Flotilla release runs its own scheduler.
func (c *Cluster) schedulerConfig() string {
	switch {
	case c.spec.SchedulerConfig != "":
		return fmt.Sprintf(c.spec.SchedulerConfig, c.Kubeconfig)
	case c.spec.WithoutRelease:
		return fmt.Sprintf(withPermitTimeout(DefaultSchedulerConfig, c.spec.PermitTimeoutSeconds), c.Kubeconfig)
	}
	return fmt.Sprintf(PlainSchedulerConfig, c.Kubeconfig)
}

// withPermitTimeout is a scheduler configuration of the flotilla profile
// with its Permit timeout set to seconds, unless seconds is 0.
func withPermitTimeout(config string, seconds int) string {
	if seconds == 0 {
		return config
	}
	return strings.Replace(config, "permitTimeoutSeconds: 30", "permitTimeoutSeconds: "+strconv.Itoa(seconds), 1)
}

// releaseSet are the chart values of the cluster's release, given on every
// install and upgrade of it.
func (c *Cluster) releaseSet() []string {
	var set []string
	if c.spec.PermitTimeoutSeconds != 0 {
		set = append(set, "scheduler.permitTimeoutSeconds="+strconv.Itoa(c.spec.PermitTimeoutSeconds))
	}
	if c.spec.SourceOnly {
		set = append(set, "scheduler.enabled=false")
	}
	return append(set, c.spec.ReleaseSet...)
}

// PlainSchedulerConfig is the scheduler of a cluster whose Flotilla release
// schedules the candidates; %s is replaced by the kubeconfig path.
const PlainSchedulerConfig = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %s
  qps: 200
  burst: 400
leaderElection:
  leaderElect: false
profiles:
- schedulerName: default-scheduler
`

// WorkloadAPI are the API server flags that serve Kubernetes' own
// PodGroups (scheduling.k8s.io/v1beta1, beta and off by default in 1.37)
// and pods' spec.schedulingGroup (ClusterSpec.APIServerArgs).
var WorkloadAPI = []string{"--feature-gates=GenericWorkload=true", "--runtime-config=scheduling.k8s.io/v1beta1=true"}

// GangScheduling are the scheduler flags of kube-scheduler's own gang
// scheduling (ClusterSpec.SchedulerArgs; 1.37 has it under
// GenericWorkload), with WorkloadAPI in its API server.
var GangScheduling = []string{"--feature-gates=GenericWorkload=true"}

// GangPodGroup is a PodGroup of Kubernetes' own API whose gang policy asks
// for minCount members: a gang for kube-scheduler's own gang scheduling,
// or for Flotilla's reading of spec.schedulingGroup.
func GangPodGroup(name string, minCount int32) *schedulingv1beta1.PodGroup {
	return &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: schedulingv1beta1.PodGroupSpec{
		SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: minCount}},
	}}
}

// InSchedulingGroup makes p a member of PodGroup group
// (spec.schedulingGroup.podGroupName).
func InSchedulingGroup(p *corev1.Pod, group string) {
	p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: &group}
}

// SchedulerFeatureGates are the feature gates of every sandbox scheduler,
// the ones docs/operations.md recommends.
const SchedulerFeatureGates = "NominatedNodeNameForExpectation=false"

// DefaultSchedulerConfig is the scheduler configuration of a sandbox cluster
// without a Flotilla release: one scheduler serves ordinary pods and
// candidates. %s is replaced by the kubeconfig path.
const DefaultSchedulerConfig = PlainSchedulerConfig + `- schedulerName: flotilla
  plugins:
    multiPoint:
      enabled:
      - name: FlotillaCandidate
    bind:
      enabled:
      - name: FlotillaCandidate
  pluginConfig:
  - name: FlotillaCandidate
    args:
      permitTimeoutSeconds: 30
`

// start brings the processes up in order, each healthy before the next.
func (c *Cluster) start(ctx context.Context) error {
	for _, comp := range startOrder {
		p, ok := c.procs[comp]
		if !ok {
			continue
		}
		if err := p.start(); err != nil {
			return err
		}
		if err := c.waitHealthy(ctx, comp); err != nil {
			return err
		}
	}
	return nil
}

// Run starts an extra process that belongs to the cluster, such as a
// Flotilla agent, with its log next to the cluster's others. The sandbox
// stops it before the cluster's own processes.
func (c *Cluster) Run(name, binary string, args ...string) (*Process, error) {
	return c.RunEnv(name, binary, nil, args...)
}

// RunEnv is Run with env ("KEY=value") added to the process's environment.
func (c *Cluster) RunEnv(name, binary string, env []string, args ...string) (*Process, error) {
	return c.run(name, binary, env, false, args...)
}

// runPod is RunEnv for a process that stands in for a pod of a Deployment
// (the release's agent and scheduler): when it exits on its own, it is
// started again after the kubelet's back-off (Process.restarts).
func (c *Cluster) runPod(name, binary string, env []string, args ...string) (*Process, error) {
	return c.run(name, binary, env, true, args...)
}

func (c *Cluster) run(name, binary string, env []string, restarts bool, args ...string) (*Process, error) {
	p := c.newProcess(name, binary, filepath.Join(c.logDir, c.Name+"-"+name+".log"), args...)
	p.env, p.restarts = env, restarts
	if err := p.start(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.extra = append(c.extra, p)
	c.mu.Unlock()
	return p, nil
}

// BinDir is the folder the cluster's binaries come from.
func (c *Cluster) BinDir() string { return c.binDir }

// stop stops every process in reverse start order, extra processes first.
func (c *Cluster) stop() error {
	var errs *multierror.Error
	c.mu.Lock()
	extra := c.extra
	c.mu.Unlock()
	for _, p := range extra {
		if err := p.stop(stopGrace); err != nil {
			errs = multierror.Append(errs, err)
		}
	}
	for i := len(startOrder) - 1; i >= 0; i-- {
		if p, ok := c.procs[startOrder[i]]; ok {
			if err := p.stop(stopGrace); err != nil {
				errs = multierror.Append(errs, err)
			}
		}
	}
	return errs.ErrorOrNil()
}

func (c *Cluster) waitHealthy(ctx context.Context, comp Component) error {
	var url string
	var header http.Header
	switch comp {
	case Etcd:
		url = "http://127.0.0.1:" + strconv.Itoa(c.ports["etcd-client"]) + "/health"
	case APIServer:
		url = c.Host + "/readyz"
		header = http.Header{"Authorization": {"Bearer " + c.pki.adminToken}}
	case ControllerManager:
		url = "https://127.0.0.1:" + strconv.Itoa(c.ports["kcm"]) + "/healthz"
	case Scheduler:
		url = "https://127.0.0.1:" + strconv.Itoa(c.ports["scheduler"]) + "/healthz"
	case CandidateScheduler:
		url = "https://127.0.0.1:" + strconv.Itoa(c.ports["candidate-scheduler"]) + "/healthz"
	default:
		// kwok has no health endpoint here; its nodes turning Ready shows it works.
		return nil
	}
	return c.waitURLHealthy(ctx, string(comp), c.procs[comp], url, header)
}

// waitURLHealthy waits until p answers 200 at url, or exits.
func (c *Cluster) waitURLHealthy(ctx context.Context, comp string, p *Process, url string, header http.Header) error {
	client := &http.Client{
		Timeout: 2 * time.Second,
		// Components other than the API server serve self-signed certificates
		// on loopback; only their liveness is checked here.
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec
	}
	var lastErr error
	err := poll(ctx, 90*time.Second, func() (bool, error) {
		if !p.running() {
			return false, fmt.Errorf("%s exited; see %s", comp, p.logPath)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		for k, v := range header {
			req.Header[k] = v
		}
		resp, err := client.Do(req)
		if err != nil {
			lastErr = err
			return false, nil
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			lastErr = fmt.Errorf("%s answered %s", url, resp.Status)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("cluster %s: waiting for %s to be healthy (log %s): %w", c.Name, comp, p.logPath, errors.Join(err, lastErr))
	}
	return nil
}

// CandidateSchedulerConfig returns a client configuration with
// cluster-admin's token for the secure port of the release's Flotilla
// scheduler (its /debug/pprof, /metrics), or nil when the cluster runs none.
// The scheduler's serving certificate is self-signed in its cert folder, so
// it is not verified.
func (c *Cluster) CandidateSchedulerConfig() *rest.Config {
	c.mu.Lock()
	port, ok := c.ports["candidate-scheduler"]
	c.mu.Unlock()
	if !ok {
		return nil
	}
	return &rest.Config{
		Host:            "https://127.0.0.1:" + strconv.Itoa(port),
		BearerToken:     c.pki.adminToken,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true},
	}
}
