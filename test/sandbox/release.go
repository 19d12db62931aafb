package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// ReleaseNamespace is where the sandbox installs Flotilla's chart.
const ReleaseNamespace = "flotilla-system"

// ReleaseOptions describe a Helm release of charts/flotilla in a sandbox
// cluster.
type ReleaseOptions struct {
	// Name of the release; default "flotilla".
	Name string
	// Set are extra --set values.
	Set []string
	// AgentEnv is added to the agent's environment; AgentArgs to its flags.
	AgentEnv, AgentArgs []string
	// Scheduler runs the release's scheduler too, unless it runs already.
	// The cluster's own scheduler must then not serve the flotilla profile.
	Scheduler bool
	// WithoutAgent installs the release but runs no agent.
	WithoutAgent bool
	// AgentServer is the URL at which the agent reaches its own cluster's
	// API server (a Forwarder in front of it, to cut the agent off);
	// empty: the cluster's own.
	AgentServer string
	// InProcess runs the agent inside the test's process instead of as
	// flotilla-agent, from the same command line and configuration file
	// (pkg/agent's Flags, NewManager and Setup), until ctx ends. Its Agent
	// has no Process.
	InProcess bool
}

// Release is a Flotilla release installed with the real helm, whose agent
// (and, when asked, scheduler) pod runs as a local process with what the
// chart gives the pod: its arguments, environment, mounted ConfigMaps and
// Secrets, and a token of its ServiceAccount. There is no container runtime
// here, so the Deployments' own pods stay Pending (a node selector no node
// matches); the process stands in for one replica. What the sandbox changes
// is only where things are: listen addresses become free ports on
// 127.0.0.1, mount paths become folders, and the in-cluster connection
// becomes a kubeconfig with the ServiceAccount's token.
type Release struct {
	Cluster   *Cluster
	Name      string
	Agent     *Agent
	Scheduler *Process
	// WebhookURL is where the API server calls the agent's webhook.
	WebhookURL string

	// agentPod and agentOpts are what the agent's process was started
	// from, for StartAgentReplica.
	agentPod  *podProcess
	agentOpts ReleaseOptions
}

// InstallRelease installs (or upgrades) the chart in c and starts its agent,
// waiting until it is ready.
func (c *Cluster) InstallRelease(ctx context.Context, opts ReleaseOptions) (*Release, error) {
	if opts.Name == "" {
		opts.Name = "flotilla"
	}
	ports, err := FreePorts(6)
	if err != nil {
		return nil, err
	}
	r := &Release{Cluster: c, Name: opts.Name, WebhookURL: fmt.Sprintf("https://localhost:%d/mutate-pods", ports[2])}
	set := append([]string{
		"clusterName=" + c.Name,
		"webhook.url=" + r.WebhookURL,
		// The Deployments' pods wait: their processes run here instead.
		"agent.nodeSelector.flotilla\\.dev/sandbox=runs-as-process",
		"scheduler.nodeSelector.flotilla\\.dev/sandbox=runs-as-process",
	}, c.releaseSet()...)
	// The cluster's own values on every install and upgrade (helm does not
	// keep earlier --set values), then the caller's.
	set = append(set, opts.Set...)
	if _, err := c.Helm(ctx, append([]string{"upgrade", "--install", opts.Name, ChartDir(), "-n", ReleaseNamespace, "--create-namespace", "--wait=false"}, setArgs(set)...)...); err != nil {
		return nil, err
	}
	manifest, err := c.Helm(ctx, "get", "manifest", opts.Name, "-n", ReleaseNamespace)
	if err != nil {
		return nil, err
	}
	deployments, err := deploymentsOf(manifest)
	if err != nil {
		return nil, err
	}
	if opts.Scheduler {
		if err := c.runReleaseScheduler(ctx, r, deployments, ports[3], ports[5]); err != nil {
			return nil, err
		}
	}
	if opts.WithoutAgent {
		return r, nil
	}
	agentDep, ok := deployments["agent"]
	if !ok {
		return nil, fmt.Errorf("release %s renders no agent Deployment", opts.Name)
	}
	pod, err := c.podProcess(ctx, opts.Name+"-agent", agentDep)
	if err != nil {
		return nil, err
	}
	if opts.AgentServer != "" {
		if err := pod.setServer(opts.AgentServer); err != nil {
			return nil, err
		}
	}
	r.agentPod, r.agentOpts = pod, opts
	r.Agent = &Agent{Cluster: c, ProbeAddr: "127.0.0.1:" + strconv.Itoa(ports[0]), MetricsAddr: "127.0.0.1:" + strconv.Itoa(ports[1]),
		KubeletAddr: "127.0.0.1:" + strconv.Itoa(ports[4])}
	args := append(slices.Clone(pod.args), pod.listen(r.Agent.ProbeAddr, r.Agent.MetricsAddr, ports[2], ports[4])...)
	if v := os.Getenv("FLOTILLA_AGENT_VERBOSITY"); v != "" {
		// Debugging a test: the agent logs more than the chart has it log.
		args = append(args, "--v="+v)
	}
	if opts.InProcess {
		if err := runAgentInProcess(ctx, append(args, opts.AgentArgs...), c.LogPath("agent")); err != nil {
			return nil, fmt.Errorf("agent of %s in process: %w", c.Name, err)
		}
		return r, r.Agent.WaitReady(ctx)
	}
	p, err := c.runPod("agent", filepath.Join(c.binDir, "flotilla-agent"), append(pod.env, opts.AgentEnv...), append(args, opts.AgentArgs...)...)
	if err != nil {
		return nil, err
	}
	r.Agent.Process = p
	if err := r.Agent.WaitReady(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// StartAgentReplica runs one more replica of the release's agent, as a
// Deployment with more replicas would: the same arguments, environment and
// ServiceAccount, its own ports and webhook certificate folder; name tells
// its process and log apart. The replicas elect a leader on the chart's
// Lease and each serves the webhook: for the API server to reach either,
// install the release with webhook.url (ReleaseOptions.Set) naming an
// address in front of them. It waits until the replica is ready.
func (r *Release) StartAgentReplica(ctx context.Context, name string) (*Agent, error) {
	if r.agentPod == nil {
		return nil, fmt.Errorf("release %s in %s runs no agent", r.Name, r.Cluster.Name)
	}
	c := r.Cluster
	ports, err := FreePorts(4)
	if err != nil {
		return nil, err
	}
	a := &Agent{Cluster: c, ProbeAddr: "127.0.0.1:" + strconv.Itoa(ports[0]), MetricsAddr: "127.0.0.1:" + strconv.Itoa(ports[1]),
		KubeletAddr: "127.0.0.1:" + strconv.Itoa(ports[3])}
	certDir := filepath.Join(r.agentPod.dir, name, "webhook-certs")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return nil, err
	}
	// The release's extra flags too, but this replica's ports and folder
	// wherever they name them.
	args := append(slices.Clone(r.agentPod.args), r.agentOpts.AgentArgs...)
	args = append(args, r.agentPod.listen(a.ProbeAddr, a.MetricsAddr, ports[2], ports[3])...)
	args = replaceFlags(append(args, "--webhook-cert-dir="+certDir), map[string]string{
		"--health-probe-bind-address": a.ProbeAddr,
		"--metrics-bind-address":      a.MetricsAddr,
		"--webhook-port":              strconv.Itoa(ports[2]),
		"--kubelet-port":              strconv.Itoa(ports[3]),
		"--webhook-cert-dir":          certDir,
	})
	p, err := c.runPod(name, filepath.Join(c.binDir, "flotilla-agent"), append(slices.Clone(r.agentPod.env), r.agentOpts.AgentEnv...), args...)
	if err != nil {
		return nil, err
	}
	a.Process = p
	if err := a.WaitReady(ctx); err != nil {
		return nil, err
	}
	return a, nil
}

// WebhookAddr is the address the agent serves its webhook on, read from its
// last --webhook-port flag (the one that counts).
func (a *Agent) WebhookAddr() string {
	addr := ""
	for _, arg := range a.args {
		if port, ok := strings.CutPrefix(arg, "--webhook-port="); ok {
			addr = "127.0.0.1:" + port
		}
	}
	return addr
}

// runReleaseScheduler runs the release's scheduler as CandidateScheduler,
// unless it runs already: its secure port on port, its debug state (when
// the chart asks for it) on debugPort.
func (c *Cluster) runReleaseScheduler(ctx context.Context, r *Release, deployments map[string]*appsv1.Deployment, port, debugPort int) error {
	c.mu.Lock()
	running := c.procs[CandidateScheduler]
	c.mu.Unlock()
	if running != nil {
		r.Scheduler = running
		return nil
	}
	schedDep, ok := deployments["scheduler"]
	if !ok {
		return fmt.Errorf("release %s renders no scheduler Deployment", r.Name)
	}
	pod, err := c.podProcess(ctx, r.Name+"-scheduler", schedDep)
	if err != nil {
		return err
	}
	// Its configuration file names no kubeconfig (in a pod it is the
	// in-cluster one); here it is the ServiceAccount's.
	if err := setSchedulerKubeconfig(pod, pod.kubeconfig); err != nil {
		return err
	}
	debugAddr := "127.0.0.1:" + strconv.Itoa(debugPort)
	args := append(replaceFlags(pod.args, map[string]string{"--flotilla-debug-bind-address": debugAddr}),
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(port),
		"--cert-dir="+filepath.Join(pod.dir, "certs"),
		"--authentication-kubeconfig="+pod.kubeconfig,
		"--authorization-kubeconfig="+pod.kubeconfig,
	)
	sched, err := c.schedulerBinary(pod.image)
	if err != nil {
		return err
	}
	p, err := c.runPod(string(CandidateScheduler), sched, nil, args...)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.procs[CandidateScheduler] = p
	c.ports["candidate-scheduler"] = port
	if slices.Contains(args, "--flotilla-debug-bind-address="+debugAddr) {
		c.ports["candidate-scheduler-debug"] = debugPort
	}
	c.schedulerPod = pod
	c.mu.Unlock()
	r.Scheduler = p
	return c.waitHealthy(ctx, CandidateScheduler)
}

// StartSchedulerReplica runs one more replica of the release's scheduler
// (CandidateScheduler),
// as a Deployment with scheduler.replicas above 1 would: the same
// configuration and ServiceAccount, its own secure port and certificate
// folder, no debug address; name tells its process and log apart. The
// replicas elect a leader on the chart's Lease. It waits until the replica
// answers /healthz (a replica standing by does).
func (c *Cluster) StartSchedulerReplica(ctx context.Context, name string) (*Process, error) {
	c.mu.Lock()
	pod := c.schedulerPod
	c.mu.Unlock()
	if pod == nil {
		return nil, fmt.Errorf("cluster %s runs no scheduler of a release", c.Name)
	}
	ports, err := FreePorts(1)
	if err != nil {
		return nil, err
	}
	var args []string
	for _, a := range pod.args {
		if !strings.HasPrefix(a, "--flotilla-debug-bind-address") {
			args = append(args, a)
		}
	}
	args = append(args,
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(ports[0]),
		"--cert-dir="+filepath.Join(pod.dir, name, "certs"),
		"--authentication-kubeconfig="+pod.kubeconfig,
		"--authorization-kubeconfig="+pod.kubeconfig,
	)
	sched, err := c.schedulerBinary(pod.image)
	if err != nil {
		return nil, err
	}
	p, err := c.runPod(name, sched, nil, args...)
	if err != nil {
		return nil, err
	}
	return p, c.waitURLHealthy(ctx, name, p, "https://127.0.0.1:"+strconv.Itoa(ports[0])+"/healthz", nil)
}

// SchedulerAddr is where the release's scheduler serves HTTPS (health,
// /metrics), "" when it does not run.
func (c *Cluster) SchedulerAddr() string { return c.portAddr("candidate-scheduler") }

// SchedulerDebugAddr is where the release's scheduler serves its
// /debug/state over plain HTTP, "" when it does not.
func (c *Cluster) SchedulerDebugAddr() string { return c.portAddr("candidate-scheduler-debug") }

func (c *Cluster) portAddr(name string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if port, ok := c.ports[name]; ok {
		return "127.0.0.1:" + strconv.Itoa(port)
	}
	return ""
}

// Uninstall stops the release's processes (as scaling its Deployments to
// zero would) and runs helm uninstall, standing in for the pod of its
// pre-delete hook Job: the process runs to its end, then the Job is marked
// complete (no kubelet here reports it), and helm goes on.
func (r *Release) Uninstall(ctx context.Context) error {
	c := r.Cluster
	c.mu.Lock()
	sched := c.procs[CandidateScheduler]
	c.mu.Unlock()
	for _, p := range []*Process{sched, r.agentProcess()} {
		if p != nil {
			if err := p.Stop(); err != nil {
				return err
			}
		}
	}
	done := make(chan error, 1)
	go func() {
		_, err := r.Cluster.Helm(ctx, "uninstall", r.Name, "-n", ReleaseNamespace, "--wait", "--timeout", "120s")
		done <- err
	}()
	jobs := r.Cluster.Client().BatchV1().Jobs(ReleaseNamespace)
	ran := map[types.UID]bool{}
	for {
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		list, err := jobs.List(ctx, metav1.ListOptions{})
		if err != nil {
			continue
		}
		for i := range list.Items {
			job := &list.Items[i]
			if ran[job.UID] || job.Annotations["helm.sh/hook"] == "" {
				continue
			}
			ran[job.UID] = true
			if err := r.runHook(ctx, job); err != nil {
				return err
			}
		}
	}
}

// runHook runs a hook Job's pod as a process to its end and reports the Job
// complete, as the Job controller would once the kubelet said so.
func (r *Release) runHook(ctx context.Context, job *batchv1.Job) error {
	c := r.Cluster
	pod, err := c.podProcessOf(ctx, job.Name, job.ObjectMeta, job.Spec.Template.Spec)
	if err != nil {
		return err
	}
	binary := "flotilla-agent"
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir, binary), append(pod.args, "--kubeconfig="+pod.kubeconfig)...)
	cmd.Env = append(os.Environ(), pod.env...)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err = cmd.Start()
	if err == nil && c.spec.OnProcessStart != nil {
		if err = c.spec.OnProcessStart(job.Name, cmd.Process.Pid); err != nil {
			_ = cmd.Process.Kill()
		}
	}
	if werr := cmd.Wait(); err == nil {
		err = werr
	}
	out := buf.Bytes()
	logPath := filepath.Join(c.logDir, c.Name+"-"+job.Name+".log")
	_ = os.WriteFile(logPath, out, 0o644)
	if err != nil {
		return fmt.Errorf("hook %s failed (log %s): %w", job.Name, logPath, err)
	}
	jobs := c.Client().BatchV1().Jobs(job.Namespace)
	return poll(ctx, 30*time.Second, func() (bool, error) {
		job, err := jobs.Get(ctx, job.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		now := metav1.Now()
		if job.Status.StartTime == nil {
			job.Status.StartTime = &now
		}
		job.Status.CompletionTime, job.Status.Succeeded, job.Status.Active, job.Status.Ready = &now, 1, 0, ptr.To[int32](0)
		job.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastProbeTime: now, LastTransitionTime: now},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastProbeTime: now, LastTransitionTime: now},
		}
		_, err = jobs.UpdateStatus(ctx, job, metav1.UpdateOptions{})
		return err == nil, nil
	})
}

func (r *Release) agentProcess() *Process {
	if r.Agent == nil {
		return nil
	}
	return r.Agent.Process
}

// Helm runs the pinned helm against the cluster and returns its output.
func (c *Cluster) Helm(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir, "helm"), append(args, "--kubeconfig", c.Kubeconfig)...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(c.dir, "helm", "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(c.dir, "helm", "config"), "HELM_DATA_HOME="+filepath.Join(c.dir, "helm", "data"))
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out.Bytes(), nil
}

// Template renders charts/flotilla with the pinned helm (helm template) and
// the given values, as an install in namespace ns would, without a cluster.
func Template(ctx context.Context, ns string, values ...string) ([]byte, error) {
	bin, err := findBinDir("")
	if err != nil {
		return nil, err
	}
	home, err := os.MkdirTemp("", "flotilla-helm-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(home)
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "helm"), append([]string{"template", "flotilla", ChartDir(), "-n", ns, "--kube-version", KubernetesVersion}, setArgs(values)...)...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("helm template: %w: %s", err, stderr.String())
	}
	return out, nil
}

// ChartDir is charts/flotilla of the checkout.
func ChartDir() string {
	root, err := RepoRoot()
	if err != nil {
		return "charts/flotilla"
	}
	return filepath.Join(root, "charts", "flotilla")
}

func setArgs(values []string) []string {
	var out []string
	for _, v := range values {
		out = append(out, "--set", v)
	}
	return out
}

// deploymentsOf finds the Deployments of a manifest by their component label.
func deploymentsOf(manifest []byte) (map[string]*appsv1.Deployment, error) {
	out := map[string]*appsv1.Deployment{}
	dec := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(manifest)))
	for {
		doc, err := dec.Read()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil || meta.Kind != "Deployment" {
			continue
		}
		d := &appsv1.Deployment{}
		if err := yaml.UnmarshalStrict(doc, d); err != nil {
			return nil, fmt.Errorf("decoding a Deployment of the release: %w", err)
		}
		out[d.Labels["app.kubernetes.io/component"]] = d
	}
}

// podProcess is what a process needs to stand in for a Deployment's pod.
type podProcess struct {
	// image is the container's image, as the chart names it.
	image      string
	dir        string
	args, env  []string
	kubeconfig string
	// files maps a mount path to its folder here.
	mounts map[string]string
}

// setServer makes the pod reach its API server at server.
func (p *podProcess) setServer(server string) error {
	kc, err := clientcmd.LoadFromFile(p.kubeconfig)
	if err != nil {
		return err
	}
	for _, cl := range kc.Clusters {
		cl.Server = server
	}
	return clientcmd.WriteToFile(*kc, p.kubeconfig)
}

func (c *Cluster) podProcess(ctx context.Context, name string, d *appsv1.Deployment) (*podProcess, error) {
	return c.podProcessOf(ctx, name, d.ObjectMeta, d.Spec.Template.Spec)
}

// podProcessOf stands in for one pod of owner (a Deployment or a Job).
func (c *Cluster) podProcessOf(ctx context.Context, name string, owner metav1.ObjectMeta, spec corev1.PodSpec) (*podProcess, error) {
	d := struct{ Name, Namespace string }{owner.Name, owner.Namespace}
	if len(spec.Containers) != 1 {
		return nil, fmt.Errorf("%s has %d containers; the sandbox runs one", d.Name, len(spec.Containers))
	}
	container := spec.Containers[0]
	p := &podProcess{image: container.Image, dir: filepath.Join(c.dir, "release", name), mounts: map[string]string{}}
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return nil, err
	}
	client := c.Client()
	// The ServiceAccount's own token, as the kubelet would mount it.
	tr, err := client.CoreV1().ServiceAccounts(d.Namespace).CreateToken(ctx, spec.ServiceAccountName, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](48 * 3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("a token of ServiceAccount %s/%s: %w", d.Namespace, spec.ServiceAccountName, err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["in-cluster"] = &clientcmdapi.Cluster{Server: c.Host, CertificateAuthorityData: c.pki.caCert}
	kc.AuthInfos["sa"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["in-cluster"] = &clientcmdapi.Context{Cluster: "in-cluster", AuthInfo: "sa", Namespace: d.Namespace}
	kc.CurrentContext = "in-cluster"
	p.kubeconfig = filepath.Join(p.dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, p.kubeconfig); err != nil {
		return nil, err
	}
	volumes := map[string]corev1.Volume{}
	// Mounted configuration, written once every mount is known: the paths
	// it names (a certificate's, a folder's) move as the mounts do.
	configFiles := map[string]string{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
	}
	for _, m := range container.VolumeMounts {
		v, ok := volumes[m.Name]
		if !ok {
			return nil, fmt.Errorf("Deployment %s mounts unknown volume %s", d.Name, m.Name)
		}
		local := filepath.Join(p.dir, "volumes", m.Name)
		if err := os.MkdirAll(local, 0o700); err != nil {
			return nil, err
		}
		switch {
		case v.EmptyDir != nil:
		case v.ConfigMap != nil:
			cm, err := client.CoreV1().ConfigMaps(d.Namespace).Get(ctx, v.ConfigMap.Name, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("ConfigMap %s of Deployment %s: %w", v.ConfigMap.Name, d.Name, err)
			}
			for k, data := range cm.Data {
				configFiles[filepath.Join(local, k)] = data
			}
		case v.Secret != nil:
			s, err := client.CoreV1().Secrets(d.Namespace).Get(ctx, v.Secret.SecretName, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("Secret %s of Deployment %s: %w", v.Secret.SecretName, d.Name, err)
			}
			for k, data := range s.Data {
				if err := os.WriteFile(filepath.Join(local, k), data, 0o600); err != nil {
					return nil, err
				}
			}
		default:
			return nil, fmt.Errorf("Deployment %s: the sandbox cannot stand in for volume %s", d.Name, v.Name)
		}
		p.mounts[m.MountPath] = local
	}
	for file, data := range configFiles {
		if err := os.WriteFile(file, []byte(p.local(data)), 0o600); err != nil {
			return nil, err
		}
	}
	for _, a := range append(slices.Clone(container.Command[min(1, len(container.Command)):]), container.Args...) {
		p.args = append(p.args, p.local(a))
	}
	vars := map[string]string{}
	for _, e := range container.Env {
		var value string
		switch {
		case e.ValueFrom == nil:
			value = e.Value
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			value = d.Namespace
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP":
			// The process is the pod; it listens on loopback.
			value = "127.0.0.1"
		default:
			return nil, fmt.Errorf("Deployment %s: the sandbox cannot resolve env %s", d.Name, e.Name)
		}
		vars[e.Name] = value
		p.env = append(p.env, e.Name+"="+value)
	}
	// $(VAR) in arguments is the container's environment, as the kubelet
	// expands it.
	for i, a := range p.args {
		for name, value := range vars {
			a = strings.ReplaceAll(a, "$("+name+")", value)
		}
		p.args[i] = a
	}
	return p, nil
}

// listen are the flags that make an agent process listen where the sandbox
// says, on loopback, and reach its API server with its ServiceAccount's
// token: they override its configuration file. The kubelet API keeps its
// port 0 (off) when the chart turned it off, which it shows by publishing
// no address.
func (p *podProcess) listen(probeAddr, metricsAddr string, webhookPort, kubeletPort int) []string {
	args := []string{
		"--health-probe-bind-address=" + probeAddr,
		"--metrics-bind-address=" + metricsAddr,
		"--webhook-port=" + strconv.Itoa(webhookPort),
		"--webhook-bind-host=127.0.0.1",
		"--kubelet-bind-address=127.0.0.1",
		"--kubeconfig=" + p.kubeconfig,
	}
	if slices.ContainsFunc(p.args, func(a string) bool { return strings.HasPrefix(a, "--kubelet-address=") }) {
		args = append(args, "--kubelet-port="+strconv.Itoa(kubeletPort))
	}
	return args
}

// local rewrites the mount paths that s names to the folders that stand in
// for them here.
func (p *podProcess) local(s string) string {
	for path, local := range p.mounts {
		s = strings.ReplaceAll(s, path, local)
	}
	return s
}

// replaceFlags sets --flag=value for each flag present in args.
func replaceFlags(args []string, values map[string]string) []string {
	out := make([]string, 0, len(args))
	for _, a := range args {
		name, _, _ := strings.Cut(a, "=")
		if v, ok := values[name]; ok {
			a = name + "=" + v
		}
		out = append(out, a)
	}
	return out
}

// setSchedulerKubeconfig points the KubeSchedulerConfiguration mounted for
// the scheduler at kubeconfig.
func setSchedulerKubeconfig(p *podProcess, kubeconfig string) error {
	for _, a := range p.args {
		path, ok := strings.CutPrefix(a, "--config=")
		if !ok {
			continue
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		cfg := map[string]any{}
		if err := yaml.Unmarshal(raw, &cfg); err != nil {
			return fmt.Errorf("the release's scheduler configuration: %w", err)
		}
		conn, _ := cfg["clientConnection"].(map[string]any)
		if conn == nil {
			conn = map[string]any{}
		}
		conn["kubeconfig"] = kubeconfig
		cfg["clientConnection"] = conn
		out, err := yaml.Marshal(cfg)
		if err != nil {
			return err
		}
		return os.WriteFile(path, out, 0o600)
	}
	return fmt.Errorf("the release's scheduler has no --config")
}
