// Command demo shows Flotilla at work on the clusters that `flotilla-sandbox
// up` started: it is what `make demo` runs after the sandbox is up.
package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

func main() {
	dir := flag.String("dir", ".sandbox/demo", "Folder of the sandbox that `flotilla-sandbox up` started.")
	replicas := flag.Int("replicas", 6, "Replicas of the demo Deployment.")
	flag.Parse()
	if err := run(*dir, int32(*replicas)); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

type cluster struct {
	name       string
	kubeconfig string
	client     kubernetes.Interface
}

func loadClusters(dir string) ([]cluster, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*", "kubeconfig"))
	if err != nil || len(paths) == 0 {
		return nil, fmt.Errorf("no kubeconfigs under %s; is the sandbox up?", dir)
	}
	sort.Strings(paths)
	var out []cluster
	for _, p := range paths {
		cfg, err := clientcmd.BuildConfigFromFlags("", p)
		if err != nil {
			return nil, fmt.Errorf("loading %s: %w", p, err)
		}
		out = append(out, cluster{name: filepath.Base(filepath.Dir(p)), kubeconfig: p, client: kubernetes.NewForConfigOrDie(cfg)})
	}
	return out, nil
}

func run(dir string, replicas int32) error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	clusters, err := loadClusters(dir)
	if err != nil {
		return err
	}
	bin, err := binDir()
	if err != nil {
		return err
	}
	home := clusters[0]
	kubectl := filepath.Join(bin, "kubectl")
	plugin := filepath.Join(bin, "kubectl-flotilla")

	fmt.Printf("\nEvery cluster runs Flotilla's Helm release (helm install flotilla charts/flotilla -n flotilla-system --set clusterName=<name>).\n")
	fmt.Printf("\n1. %s runs pods of namespace demo, opted in, here first and elsewhere when they do not fit:\n", home.name)
	if err := ensureNamespace(ctx, home, kubectl); err != nil {
		return err
	}
	self := "apiVersion: multicluster.flotilla.dev/v1alpha1\nkind: ClusterTarget\nmetadata:\n  name: " + home.name + "\nspec:\n  self: true\n  labels:\n    topology.kubernetes.io/region: " + home.name + "\n"
	if err := runShown(ctx, self, kubectl, "--kubeconfig", home.kubeconfig, "apply", "-f", "-"); err != nil {
		return err
	}
	for _, t := range clusters[1:] {
		fmt.Printf("\n2. %s invites %s into namespace demo; %s joins it:\n", t.name, home.name, home.name)
		file := filepath.Join(dir, t.name+"-invites-"+home.name+".yaml")
		if err := runShown(ctx, "", plugin, "--kubeconfig", t.kubeconfig, "invite", home.name, "--namespaces", "demo", "--create-namespaces", "-o", file); err != nil {
			return err
		}
		if err := runShown(ctx, "", plugin, "--kubeconfig", home.kubeconfig, "join", t.name, "--kubeconfig-from", file, "--labels", "topology.kubernetes.io/region="+t.name); err != nil {
			return err
		}
		_ = os.Remove(file) // it holds a credential
	}

	fmt.Printf("\n3. A Deployment of %d pods of 3 CPUs in %s, whose nodes have 4 CPUs each:\n", replicas, home.name)
	start := time.Now()
	if err := applyDemo(ctx, home.client, replicas); err != nil {
		return err
	}
	pods, err := waitScene(ctx, home, plugin, "3. the Deployment", "hello", int(replicas))
	if err != nil {
		return err
	}
	printPlacement(home, clusters, pods, start)

	if err := policyScene(ctx, home, clusters, kubectl, plugin); err != nil {
		return err
	}

	if err := gangScene(ctx, home, kubectl, plugin); err != nil {
		return err
	}

	fmt.Printf("\n6. What %s knows of its targets:\n", home.name)
	if err := runShown(ctx, "", plugin, "--kubeconfig", home.kubeconfig, "status"); err != nil {
		return err
	}
	fmt.Println("\nkubeconfigs (export KUBECONFIG=<path> to look around):")
	for _, c := range clusters {
		fmt.Printf("  %-4s %s\n", c.name, c.kubeconfig)
	}
	fmt.Printf(`
Try next:
  export PATH=%[1]s:$PATH KUBECONFIG=%[2]s
  kubectl get nodes -L topology.kubernetes.io/region     # a virtual node per target
  kubectl get clustertargets                              # their health
  kubectl -n demo scale deployment hello --replicas=10    # more pods than the three clusters hold
  kubectl flotilla explain -n demo <pending pod>          # each target's answer
  kubectl -n demo get placementpolicies                   # pods each policy governs
Stop the clusters with: make demo-down
`, bin, home.kubeconfig)
	return nil
}

// runShown prints a command as a user would type it, then runs it.
func runShown(ctx context.Context, stdin, name string, args ...string) error {
	shown := append([]string{filepath.Base(name)}, args...)
	if filepath.Base(name) == "kubectl-flotilla" {
		shown[0] = "kubectl flotilla"
	}
	fmt.Printf("  $ %s\n", strings.Join(shown, " "))
	if stdin != "" {
		fmt.Printf("%s", indent(stdin, "      "))
	}
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	fmt.Print(indent(string(out), "    "))
	if err != nil {
		return fmt.Errorf("%s: %w", strings.Join(shown, " "), err)
	}
	return nil
}

func indent(s, prefix string) string {
	if s == "" {
		return ""
	}
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return prefix + strings.Join(lines, "\n"+prefix) + "\n"
}

// binDir is ./bin of the checkout (or $FLOTILLA_BIN).
func binDir() (string, error) {
	if d := os.Getenv("FLOTILLA_BIN"); d != "" {
		return d, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	return filepath.Join(wd, "bin"), nil
}

// ensureNamespace creates the demo namespace in the source, opted in to
// Flotilla; the targets create it themselves (their invitations allow it).
func ensureNamespace(ctx context.Context, home cluster, kubectl string) error {
	ns := "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: demo\n  labels:\n    " + protocol.NamespaceEnabledLabel + ": \"true\"\n"
	return runShown(ctx, ns, kubectl, "--kubeconfig", home.kubeconfig, "apply", "-f", "-")
}

func applyDemo(ctx context.Context, client kubernetes.Interface, replicas int32) error {
	return createDeployment(ctx, client, "hello", replicas, "3")
}

// createDeployment makes, afresh, a Deployment of the demo namespace whose
// pods are opted in to Flotilla and request cpu each.
func createDeployment(ctx context.Context, client kubernetes.Interface, name string, replicas int32, cpu string) error {
	return createDeploymentWith(ctx, client, name, replicas, cpu, nil, nil)
}

// createDeploymentWith is createDeployment with more labels and
// annotations on its pods.
func createDeploymentWith(ctx context.Context, client kubernetes.Interface, name string, replicas int32, cpu string, podLabels, podAnnotations map[string]string) error {
	err := client.AppsV1().Deployments("demo").Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		pods, err := client.CoreV1().Pods("demo").List(ctx, metav1.ListOptions{LabelSelector: "app=" + name + ",!" + protocol.CandidateLabel})
		return err == nil && len(pods.Items) == 0, nil
	}); err != nil {
		return fmt.Errorf("waiting for the previous demo/%s to go away: %w", name, err)
	}
	labels := map[string]string{"app": name, protocol.ElectLabel: "true"}
	template := map[string]string{}
	maps.Copy(template, labels)
	maps.Copy(template, podLabels)
	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: template, Annotations: podAnnotations},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name:  name,
					Image: "registry.example/" + name + ":1",
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
						corev1.ResourceCPU: *resourceQuantity(cpu),
					}},
				}}},
			},
		},
	}
	_, err = client.AppsV1().Deployments("demo").Create(ctx, deploy, metav1.CreateOptions{})
	return err
}

// sceneWait is how long a scene waits for its pods before it says so and
// shows why; sceneTries is how many times it waits.
const (
	sceneWait  = 90 * time.Second
	sceneTries = 2
)

// waitScene waits for want Running pods of demo/app. Should they not all
// run within sceneWait, it says so and shows what explain says of one that
// does not, then waits once more; the error names the scene.
func waitScene(ctx context.Context, home cluster, plugin, scene, app string, want int) ([]corev1.Pod, error) {
	for try := 1; ; try++ {
		wctx, cancel := context.WithTimeout(ctx, sceneWait)
		pods, err := waitRunning(wctx, home.client, app, want)
		cancel()
		if err == nil {
			return pods, nil
		}
		fmt.Printf("\nScene %s: the pods of demo/%s are not all Running after %s. What explain says of one that is not:\n", scene, app, sceneWait)
		explainWaiting(ctx, home, plugin, app)
		if try == sceneTries || ctx.Err() != nil {
			return nil, fmt.Errorf("scene %s: %w", scene, err)
		}
		fmt.Printf("\nWaiting %s more.\n", sceneWait)
	}
}

// explainWaiting runs kubectl flotilla explain on the first pod of
// demo/app that is not Running.
func explainWaiting(ctx context.Context, home cluster, plugin, app string) {
	list, err := home.client.CoreV1().Pods("demo").List(ctx, metav1.ListOptions{LabelSelector: "app=" + app + ",!" + protocol.CandidateLabel})
	if err != nil {
		fmt.Printf("listing the pods of demo/%s: %v\n", app, err)
		return
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	for _, p := range list.Items {
		if p.Status.Phase != corev1.PodRunning {
			if err := runShown(ctx, "", plugin, "--kubeconfig", home.kubeconfig, "explain", "-n", "demo", p.Name); err != nil {
				fmt.Printf("explain: %v\n", err)
			}
			return
		}
	}
}

func waitRunning(ctx context.Context, client kubernetes.Interface, app string, want int) ([]corev1.Pod, error) {
	var pods []corev1.Pod
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		list, err := client.CoreV1().Pods("demo").List(ctx, metav1.ListOptions{LabelSelector: "app=" + app + ",!" + protocol.CandidateLabel})
		if err != nil {
			return false, nil
		}
		running := 0
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		pods = list.Items
		return running == want && len(list.Items) == want, nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for %d Running pods of demo/%s: %w", want, app, err)
	}
	return pods, nil
}

func printPlacement(home cluster, clusters []cluster, pods []corev1.Pod, start time.Time) {
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	fmt.Printf("\nWhere each pod of demo/hello landed (created in %s):\n\n", home.name)
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tVIRTUAL NODE\tCLUSTER\tNODE THERE\tPHASE\tRUNNING AFTER")
	perCluster := map[string]int{}
	for _, p := range pods {
		clusterName := strings.TrimPrefix(p.Spec.NodeName, "flotilla-")
		perCluster[clusterName]++
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", p.Name, p.Spec.NodeName, clusterName, delegateNode(clusters, clusterName, &p), p.Status.Phase, runningAfter(&p, start))
	}
	tw.Flush()
	fmt.Printf("\nper cluster: %v; all %d Running %s after the Deployment was created\n", perCluster, len(pods), time.Since(start).Round(100*time.Millisecond))
}

// delegateNode finds the node that runs the source pod's delegate in its
// cluster, through the candidate labels.
func delegateNode(clusters []cluster, name string, src *corev1.Pod) string {
	for _, c := range clusters {
		if c.name != name {
			continue
		}
		list, err := c.client.CoreV1().Pods(src.Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: protocol.SourceUIDLabel + "=" + string(src.UID)})
		if err != nil || len(list.Items) != 1 {
			return "?"
		}
		return list.Items[0].Spec.NodeName
	}
	return "?"
}

func runningAfter(p *corev1.Pod, start time.Time) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			// Conditions carry whole seconds.
			if d := c.LastTransitionTime.Sub(start.Truncate(time.Second)); d >= time.Second {
				return d.Round(time.Second).String()
			}
			return "<1s"
		}
	}
	return "-"
}

// webPolicy spreads demo/web across the regions (one per cluster) and keeps
// at most two of its pods on on-demand nodes.
const webPolicy = `apiVersion: multicluster.flotilla.dev/v1alpha1
kind: PlacementPolicy
metadata:
  name: web
  namespace: demo
spec:
  podSelector:
    matchLabels: {app: web}
  spreadConstraints:
  - topologyKey: topology.kubernetes.io/region
    maxSkew: 1
    whenUnsatisfiable: DoNotSchedule
  capacityType:
    maxOnDemand: 2
`

// policyScene shows a PlacementPolicy at work: a Deployment spread evenly
// across the clusters' regions, two of its pods on on-demand nodes and the
// rest on spot, and explain's view of one pod.
func policyScene(ctx context.Context, home cluster, clusters []cluster, kubectl, plugin string) error {
	const replicas = 6
	fmt.Printf("\n4. A PlacementPolicy: demo/web spread across regions (maxSkew 1), at most 2 of its pods on on-demand nodes:\n")
	if err := runShown(ctx, webPolicy, kubectl, "--kubeconfig", home.kubeconfig, "apply", "-f", "-"); err != nil {
		return err
	}
	start := time.Now()
	if err := createDeployment(ctx, home.client, "web", replicas, "250m"); err != nil {
		return err
	}
	pods, err := waitScene(ctx, home, plugin, "4. the PlacementPolicy", "web", replicas)
	if err != nil {
		return err
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	fmt.Printf("\nWhere each pod of demo/web landed:\n\n")
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tCLUSTER (REGION)\tNODE THERE\tCAPACITY OF THAT NODE\tPOD'S PLACE")
	perCluster, perCapacity := map[string]int{}, map[string]int{}
	for _, p := range pods {
		name := strings.TrimPrefix(p.Spec.NodeName, "flotilla-")
		node := delegateNode(clusters, name, &p)
		capacity := nodeLabel(ctx, clusters, name, node, protocol.DefaultCapacityNodeLabel)
		perCluster[name]++
		perCapacity[capacity]++
		place := p.Labels[protocol.CapacityTypeLabel]
		if slot := p.Labels[protocol.OnDemandSlotLabel]; slot != "" {
			place += " (slot " + slot + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.Name, name, node, capacity, place)
	}
	tw.Flush()
	fmt.Printf("\nper cluster: %v; per capacity type: %v; all %d Running %s after the Deployment was created\n",
		perCluster, perCapacity, len(pods), time.Since(start).Round(100*time.Millisecond))
	fmt.Printf("\nWhat the policy makes of each target for one of them:\n")
	return runShown(ctx, "", plugin, "--kubeconfig", home.kubeconfig, "explain", "-n", "demo", pods[0].Name)
}

// gangScene shows a gang: four workers of one pod group, placed all or
// nothing, in one cluster.
func gangScene(ctx context.Context, home cluster, kubectl, plugin string) error {
	const replicas = 4
	fmt.Printf("\n5. A gang: %d workers of 200m CPU, pod group train (label %s), all or nothing in one cluster (annotations %s=%d, %s=%s):\n",
		replicas, protocol.PodGroupLabel, protocol.GangMinMemberAnnotation, replicas, protocol.GangModeAnnotation, protocol.GangOneCluster)
	start := time.Now()
	err := createDeploymentWith(ctx, home.client, "train", replicas, "200m",
		map[string]string{protocol.PodGroupLabel: "train"},
		map[string]string{protocol.GangMinMemberAnnotation: fmt.Sprint(replicas), protocol.GangModeAnnotation: protocol.GangOneCluster})
	if err != nil {
		return err
	}
	pods, err := waitScene(ctx, home, plugin, "5. the gang", "train", replicas)
	if err != nil {
		return err
	}
	perCluster := map[string]int{}
	for _, p := range pods {
		perCluster[strings.TrimPrefix(p.Spec.NodeName, "flotilla-")]++
	}
	fmt.Printf("\nper cluster: %v; all %d Running %s after the Deployment was created\n", perCluster, len(pods), time.Since(start).Round(100*time.Millisecond))
	fmt.Printf("\nThe gang, as explain sees it from one of its members:\n")
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	return runShown(ctx, "", plugin, "--kubeconfig", home.kubeconfig, "explain", "-n", "demo", pods[0].Name)
}

// nodeLabel reads one label of a node of the named cluster, "?" when it
// cannot.
func nodeLabel(ctx context.Context, clusters []cluster, name, node, key string) string {
	for _, c := range clusters {
		if c.name != name {
			continue
		}
		n, err := c.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return "?"
		}
		return orQuestion(n.Labels[key])
	}
	return "?"
}

func orQuestion(s string) string {
	if s == "" {
		return "?"
	}
	return s
}
