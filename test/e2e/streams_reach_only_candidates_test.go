package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/invitation"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/test/sandbox"
)

const streamsNS = "streams"

// TestStreamsReachOnlyCandidates holds the invited identity's kubeconfig,
// as a source's admin (or whoever took it) does, and calls the target's
// API server directly: it may read the logs of, and exec, attach and
// port-forward to, its own running delegate, and nothing else of the
// invited namespace: not a target's pod named like a candidate, not a pod
// carrying another source's candidate labels, not its own candidate before
// it binds nor after its delegate is gone. Meanwhile kubectl logs and exec
// on the source pod (the protocol's own calls) work, and each delegate's
// start and stop costs the target's agent at most one write.
func TestStreamsReachOnlyCandidates(t *testing.T) {
	t.Parallel()
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{
		{Name: "src", WithoutScheduler: true},
		{Name: "tgt", Nodes: []sandbox.NodeSpec{{}}},
	}})
	ctx := t.Context()
	src, tgt := s.Cluster("src"), s.Cluster("tgt")
	srcClient, tgtAdmin := src.Client(), tgt.Client()
	createNamespace(t, srcClient, streamsNS)
	tgtAgent, err := sandbox.StartAgent(ctx, tgt, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.InstallRelease(ctx, sandbox.ReleaseOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := src.Invite(ctx, tgt, streamsNS); err != nil {
		t.Fatal(err)
	}
	if err := src.WaitTargetReady(ctx, tgt.Name, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	invited := invitedCallerOf(t, tgt, "src", streamsNS)
	streamsRole := invitation.Invitation{Kind: "ClusterSource", Name: "src"}.StreamsName()
	nodes, err := tgtAdmin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) == 0 {
		t.Fatalf("the target's nodes: %v %v", nodes, err)
	}
	node := nodes.Items[0].Name

	// The source's pod and its delegate, running.
	web := optedInPod("web", "100m")
	web, err = srcClient.CoreV1().Pods(streamsNS).Create(ctx, web, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	delegate := protocol.CandidateName("src", tgt.Name, streamsNS, web.Name, string(web.UID))
	bound := watchBound(t, tgtAdmin, streamsNS, delegate)
	var last error
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		last = invited.logs(ctx, delegate)
		return last == nil, nil
	}); err != nil {
		t.Fatalf("the delegate's logs not granted: %v: %v", last, err)
	}
	t.Logf("the delegate's logs were granted %s after the test saw it bound", time.Since(bound).Round(time.Millisecond))
	waitPod(t, srcClient, streamsNS, web.Name, "running on flotilla-tgt", func(p *corev1.Pod) bool {
		return p.Spec.NodeName == "flotilla-tgt" && p.Status.Phase == corev1.PodRunning
	})

	// The target's own pods in the invited namespace, running on its node:
	// one named as candidates are, one carrying another source's labels.
	targetsOwn := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-0123456789", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{NodeName: node, AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
	}
	othersCandidate := candidatePod("other-abcdef0123", "other")
	othersCandidate.Spec.NodeName = node
	for _, p := range []*corev1.Pod{targetsOwn, othersCandidate} {
		if _, err := tgtAdmin.CoreV1().Pods(streamsNS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitPod(t, tgtAdmin, streamsNS, p.Name, "running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	}

	t.Run("its own delegate: logs, exec, attach, port-forward", func(t *testing.T) {
		if err := invited.logs(ctx, delegate); err != nil {
			t.Errorf("logs: %v", err)
		}
		if out, err := invited.exec(ctx, delegate, "echo ran in $SANDBOX_CLUSTER"); err != nil || out != "ran in tgt\n" {
			t.Errorf("exec: %q, %v", out, err)
		}
		// kwok serves no attach: anything but a refusal is the grant.
		if err := invited.attach(ctx, delegate); apierrors.IsForbidden(err) {
			t.Errorf("attach: %v", err)
		}
		if err := invited.portForward(ctx, delegate); err != nil {
			t.Errorf("port-forward: %v", err)
		}
	})

	t.Run("kubectl logs and exec on the source pod", func(t *testing.T) {
		kubectl := func(args ...string) string {
			t.Helper()
			ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			var stdout, stderr bytes.Buffer
			cmd := exec.CommandContext(ctx, filepath.Join(src.BinDir(), "kubectl"), append([]string{"--kubeconfig", src.Kubeconfig, "-n", streamsNS}, args...)...)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("kubectl %s: %v: %s", strings.Join(args, " "), err, stderr.String())
			}
			return stdout.String()
		}
		if got := kubectl("logs", web.Name); got != sandbox.PodLogLines {
			t.Errorf("kubectl logs: %q", got)
		}
		if got := kubectl("exec", web.Name, "--", "sh", "-c", "echo ran in $SANDBOX_CLUSTER"); got != "ran in tgt\n" {
			t.Errorf("kubectl exec: %q", got)
		}
	})

	t.Run("a target's pod named like a candidate, and another source's candidate, are refused", func(t *testing.T) {
		for _, name := range []string{targetsOwn.Name, othersCandidate.Name} {
			invited.refused(t, name)
		}
	})

	t.Run("its own candidate is refused until it binds and once its delegate is gone", func(t *testing.T) {
		toobig := optedInPod("toobig", "1000")
		toobig, err := srcClient.CoreV1().Pods(streamsNS).Create(ctx, toobig, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		waiting := protocol.CandidateName("src", tgt.Name, streamsNS, toobig.Name, string(toobig.UID))
		waitFor(t, 60*time.Second, "the waiting candidate in the target", func() (bool, string) {
			_, err := tgtAdmin.CoreV1().Pods(streamsNS).Get(ctx, waiting, metav1.GetOptions{})
			return err == nil, fmt.Sprint(err)
		})
		invited.refused(t, waiting)

		if err := srcClient.CoreV1().Pods(streamsNS).Delete(ctx, web.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 60*time.Second, "the delegate gone and its grant with it", func() (bool, string) {
			if _, err := tgtAdmin.CoreV1().Pods(streamsNS).Get(ctx, delegate, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, fmt.Sprintf("delegate: %v", err)
			}
			err := invited.logs(ctx, delegate)
			return apierrors.IsForbidden(err), fmt.Sprintf("logs: %v", err)
		})
		invited.refused(t, delegate)
		role, err := tgtAdmin.RbacV1().Roles(streamsNS).Get(ctx, streamsRole, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(role.Rules) != 0 {
			t.Errorf("with no delegate, Role %s grants %+v", streamsRole, role.Rules)
		}
	})

	t.Run("a delegate's start and its stop cost at most one write each", func(t *testing.T) {
		const n = 4
		before := roleWrites(t, tgtAgent)
		var names []string
		for i := range n {
			p, err := srcClient.CoreV1().Pods(streamsNS).Create(ctx, optedInPod(fmt.Sprintf("burst-%d", i), "100m"), metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, protocol.CandidateName("src", tgt.Name, streamsNS, p.Name, string(p.UID)))
		}
		granted := func(want bool) func() (bool, string) {
			return func() (bool, string) {
				role, err := tgtAdmin.RbacV1().Roles(streamsNS).Get(ctx, streamsRole, metav1.GetOptions{})
				if err != nil {
					return false, err.Error()
				}
				var listed []string
				for _, r := range role.Rules {
					listed = append(listed, r.ResourceNames...)
				}
				for _, name := range names {
					if strings.Contains(strings.Join(listed, ","), name) != want {
						return false, fmt.Sprintf("the Role names %v", listed)
					}
				}
				return true, ""
			}
		}
		waitFor(t, 60*time.Second, "every delegate granted", granted(true))
		started := roleWrites(t, tgtAgent) - before
		for i := range n {
			if err := srcClient.CoreV1().Pods(streamsNS).Delete(ctx, fmt.Sprintf("burst-%d", i), metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, 60*time.Second, "every grant withdrawn", granted(false))
		stopped := roleWrites(t, tgtAgent) - before - started
		t.Logf("%d delegates: %d Role writes as they started, %d as they stopped", n, started, stopped)
		if started < 1 || started > n || stopped < 1 || stopped > n {
			t.Errorf("%d delegates took %d writes to grant and %d to withdraw; want 1 to %d each", n, started, stopped, n)
		}
	})
}

// waitStreamsGranted waits until target grants the source cluster (invited
// by sandbox.Invite) the logs and streams of the delegate of sourcePod:
// the invitation's streams Role names it. The target's agent grants them
// when it sees the delegate bound, a write after the binding, so that a
// test that reads logs as soon as the pod runs waits for it first.
func waitStreamsGranted(t *testing.T, target kubernetes.Interface, source, targetName string, sourcePod *corev1.Pod) {
	t.Helper()
	role := invitation.Invitation{Kind: "ClusterSource", Name: source}.StreamsName()
	delegate := protocol.CandidateName(source, targetName, sourcePod.Namespace, sourcePod.Name, string(sourcePod.UID))
	waitFor(t, 30*time.Second, "the target granting the streams of "+delegate, func() (bool, string) {
		r, err := target.RbacV1().Roles(sourcePod.Namespace).Get(t.Context(), role, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, rule := range r.Rules {
			if !slices.Contains(rule.ResourceNames, delegate) {
				return false, fmt.Sprintf("Role %s grants %+v", role, r.Rules)
			}
		}
		return len(r.Rules) > 0, "no rule"
	})
}

// watchBound waits for pod namespace/name to be bound and returns when the
// watch told it.
func watchBound(t *testing.T, c kubernetes.Interface, namespace, name string) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	w, err := c.CoreV1().Pods(namespace).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		if p, ok := ev.Object.(*corev1.Pod); ok && p.Spec.NodeName != "" {
			return time.Now()
		}
	}
	t.Fatalf("%s/%s not bound: %v", namespace, name, ctx.Err())
	return time.Time{}
}

// invitedCaller calls the target's API server as the invited identity.
type invitedCaller struct {
	cfg       *rest.Config
	kube      kubernetes.Interface
	namespace string
}

// invitedCallerOf reads the kubeconfig the target's agent wrote for
// ClusterSource name.
func invitedCallerOf(t *testing.T, tgt *sandbox.Cluster, name, namespace string) invitedCaller {
	t.Helper()
	cs := &v1alpha1.ClusterSource{}
	if err := tgt.CRClient().Get(t.Context(), client.ObjectKey{Name: name}, cs); err != nil {
		t.Fatal(err)
	}
	secret, err := tgt.Client().CoreV1().Secrets(sandbox.AgentNamespace).Get(t.Context(), cs.Status.KubeconfigSecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(secret.Data[invitation.KubeconfigKey])
	if err != nil {
		t.Fatal(err)
	}
	return invitedCaller{cfg: cfg, kube: kubernetes.NewForConfigOrDie(cfg), namespace: namespace}
}

func (c invitedCaller) logs(ctx context.Context, pod string) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	_, err := c.kube.CoreV1().Pods(c.namespace).GetLogs(pod, &corev1.PodLogOptions{}).DoRaw(ctx)
	return err
}

// exec runs script with sh -c over SPDY, whose refusal carries the API
// server's Status (forbidden).
func (c invitedCaller) exec(ctx context.Context, pod, script string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	u := c.kube.CoreV1().RESTClient().Post().Resource("pods").Namespace(c.namespace).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Command: []string{"sh", "-c", script}, Stdout: true, Stderr: true}, scheme.ParameterCodec).URL()
	ex, err := remotecommand.NewSPDYExecutor(c.cfg, http.MethodPost, u)
	if err != nil {
		return "", err
	}
	var stdout, stderr bytes.Buffer
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
	return stdout.String(), err
}

func (c invitedCaller) attach(ctx context.Context, pod string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	u := c.kube.CoreV1().RESTClient().Post().Resource("pods").Namespace(c.namespace).Name(pod).SubResource("attach").
		VersionedParams(&corev1.PodAttachOptions{Stdout: true}, scheme.ParameterCodec).URL()
	ex, err := remotecommand.NewSPDYExecutor(c.cfg, http.MethodPost, u)
	if err != nil {
		return err
	}
	return ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: io.Discard})
}

// portForward opens a port-forward connection to the pod and closes it.
func (c invitedCaller) portForward(ctx context.Context, pod string) error {
	u := c.kube.CoreV1().RESTClient().Post().Resource("pods").Namespace(c.namespace).Name(pod).SubResource("portforward").URL()
	transport, upgrader, err := spdy.RoundTripperFor(c.cfg)
	if err != nil {
		return err
	}
	hc := &http.Client{Transport: transport, Timeout: 20 * time.Second}
	conn, _, err := spdy.NewDialer(upgrader, hc, http.MethodPost, u).Dial(portforward.PortForwardProtocolV1Name)
	if err != nil {
		return err
	}
	return conn.Close()
}

// refused checks that logs, exec, attach and port-forward of pod are all
// refused as Forbidden.
func (c invitedCaller) refused(t *testing.T, pod string) {
	t.Helper()
	ctx := t.Context()
	_, execErr := c.exec(ctx, pod, "echo reached")
	for what, err := range map[string]error{
		"logs":         c.logs(ctx, pod),
		"exec":         execErr,
		"attach":       c.attach(ctx, pod),
		"port-forward": c.portForward(ctx, pod),
	} {
		if !forbidden(err) {
			t.Errorf("%s of %s/%s: %v, want Forbidden", what, c.namespace, pod, err)
		}
	}
}

// forbidden reports whether err is the API server's Forbidden: a Status
// for a plain request, and for a stream the text of that Status, which
// client-go's SPDY dialer (k8s.io/streaming, since 1.37) passes on as the
// reason its upgrade failed instead of decoding it.
func forbidden(err error) bool {
	if apierrors.IsForbidden(err) {
		return true
	}
	return err != nil && strings.HasPrefix(err.Error(), "unable to upgrade connection: ") && strings.Contains(err.Error(), " is forbidden: User ")
}

var roleWritesLine = regexp.MustCompile(`(?m)^flotilla_invitation_stream_role_writes_total\{operation="(?:create|update)",result="success"\} (\d+)`)

// roleWrites is how many streams Roles the agent wrote.
func roleWrites(t *testing.T, agent *sandbox.Agent) int {
	t.Helper()
	body, err := get(http.DefaultClient, "http://"+agent.MetricsAddr+"/metrics", "")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range roleWritesLine.FindAllStringSubmatch(body, -1) {
		v, _ := strconv.Atoi(m[1])
		n += v
	}
	return n
}
