package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/test/sandbox"
)

const kubeletNS = "kubelet"

// TestKubelet runs kubectl logs, exec and port-forward against the source
// cluster on a pod that runs in a target reached through an invitation, as
// a user who may only use pods, pods/log, pods/exec and pods/portforward
// in one namespace: the source's API server calls the agent's kubelet API
// (the pod's virtual node), which proxies to the delegate through the
// target's API server with the invited identity, where kwok serves the
// streams. The agent's kubelet API refuses callers without nodes/proxy.
func TestKubelet(t *testing.T) {
	t.Parallel()
	s := sandbox.ForTest(t, sandbox.Options{Clusters: []sandbox.ClusterSpec{
		{Name: "src", WithoutScheduler: true},
		{Name: "tgt", Nodes: []sandbox.NodeSpec{{}}},
	}})
	ctx := t.Context()
	src, tgt := s.Cluster("src"), s.Cluster("tgt")
	srcClient := src.Client()
	createNamespace(t, srcClient, kubeletNS)
	if _, err := sandbox.StartAgent(ctx, tgt, nil); err != nil {
		t.Fatal(err)
	}
	r, err := src.InstallRelease(ctx, sandbox.ReleaseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Invite(ctx, tgt, kubeletNS); err != nil {
		t.Fatal(err)
	}
	if err := src.WaitTargetReady(ctx, tgt.Name, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	pod, err := srcClient.CoreV1().Pods(kubeletNS).Create(ctx, optedInPod("web", "100m"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitPod(t, srcClient, kubeletNS, pod.Name, "running on flotilla-tgt", func(p *corev1.Pod) bool {
		return p.Spec.NodeName == "flotilla-tgt" && p.Status.Phase == corev1.PodRunning
	})
	waitStreamsGranted(t, tgt.Client(), src.Name, tgt.Name, pod)
	node, err := srcClient.CoreV1().Nodes().Get(ctx, "flotilla-tgt", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprintf("127.0.0.1:%d", node.Status.DaemonEndpoints.KubeletEndpoint.Port), r.Agent.KubeletAddr; got != want {
		t.Fatalf("the virtual node publishes %s (addresses %v), the agent serves at %s", got, node.Status.Addresses, want)
	}

	user := kubeletUser(t, src)
	kubectl := func(ctx context.Context, args ...string) *exec.Cmd {
		return exec.CommandContext(ctx, filepath.Join(src.BinDir(), "kubectl"), append([]string{"--kubeconfig", user.kubeconfig, "-n", kubeletNS}, args...)...)
	}
	run := func(t *testing.T, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		var stdout, stderr bytes.Buffer
		cmd := kubectl(ctx, args...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("kubectl %s: %v\nstdout: %s\nstderr: %s\nagent log: %s", strings.Join(args, " "), err, stdout.String(), stderr.String(), r.Agent.LogPath())
		}
		return stdout.String()
	}

	// start runs kubectl until ctx ends (then waits for it), for commands
	// that do not end by themselves.
	start := func(t *testing.T, ctx context.Context, args ...string) (io.Reader, *bytes.Buffer) {
		t.Helper()
		cmd := kubectl(ctx, args...)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		stderr := &bytes.Buffer{}
		cmd.Stderr = stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Wait() })
		return out, stderr
	}

	t.Run("logs", func(t *testing.T) {
		if got := run(t, "logs", pod.Name); got != sandbox.PodLogLines {
			t.Errorf("kubectl logs: %q, want %q", got, sandbox.PodLogLines)
		}
		if got := run(t, "logs", "--tail=1", pod.Name); got != "sandbox log line 3\n" {
			t.Errorf("kubectl logs --tail=1: %q", got)
		}
	})

	t.Run("logs -f streams what the container writes", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		defer cancel()
		out, stderr := start(t, ctx, "logs", "-f", pod.Name)
		lines := make(chan string)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
		next := func(want string) {
			t.Helper()
			select {
			case got, ok := <-lines:
				if !ok {
					t.Fatalf("kubectl logs -f ended before %q: %s", want, stderr.String())
				}
				if got != want {
					t.Fatalf("kubectl logs -f: %q, want %q", got, want)
				}
			case <-ctx.Done():
				t.Fatalf("kubectl logs -f: no %q: %v: %s", want, ctx.Err(), stderr.String())
			}
		}
		for _, l := range strings.Split(strings.TrimSpace(sandbox.PodLogLines), "\n") {
			next(l)
		}
		if err := tgt.AppendPodLog("written while following\n"); err != nil {
			t.Fatal(err)
		}
		next("written while following")
	})

	t.Run("exec runs in the target", func(t *testing.T) {
		// kwok runs the command with SANDBOX_CLUSTER set to its cluster.
		if got := run(t, "exec", pod.Name, "--", "sh", "-c", "echo ran in $SANDBOX_CLUSTER"); got != "ran in tgt\n" {
			t.Errorf("kubectl exec: %q", got)
		}
	})

	t.Run("port-forward", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		defer cancel()
		out, stderr := start(t, ctx, "port-forward", "pod/"+pod.Name, ":8080")
		forwarding := regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) -> 8080`)
		sc := bufio.NewScanner(out)
		var port string
		for port == "" && sc.Scan() {
			if m := forwarding.FindStringSubmatch(sc.Text()); m != nil {
				port = m[1]
			}
		}
		if port == "" {
			t.Fatalf("kubectl port-forward did not listen: %s", stderr.String())
		}
		go func() { _, _ = io.Copy(io.Discard, out) }()
		conn, err := net.DialTimeout("tcp", "127.0.0.1:"+port, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
		// kwok forwards the port to cat: what goes in comes back.
		if _, err := conn.Write([]byte("ping through the target\n")); err != nil {
			t.Fatal(err)
		}
		got, err := bufio.NewReader(conn).ReadString('\n')
		if err != nil || got != "ping through the target\n" {
			t.Fatalf("port-forward echoed %q, %v (kubectl: %s)", got, err, stderr.String())
		}
	})

	t.Run("the kubelet API refuses callers without nodes/proxy", func(t *testing.T) {
		url := "https://" + r.Agent.KubeletAddr + "/containerLogs/" + kubeletNS + "/" + pod.Name + "/app"
		// No API server checks a kubelet's serving certificate here.
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		for _, tc := range []struct {
			name, token string
			want        int
		}{
			{"no credentials", "", http.StatusUnauthorized},
			{"a token the API server does not know", "not-a-token", http.StatusUnauthorized},
			{"a user with pods/log but no nodes/proxy", user.token, http.StatusForbidden},
		} {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want || strings.Contains(string(body), "sandbox log line") {
				t.Errorf("%s: %d %q, want %d and no log", tc.name, resp.StatusCode, body, tc.want)
			}
		}
	})
}

// kubeletTestUser is a ServiceAccount of the source that may use pods and
// their logs, exec and port-forward in kubeletNS, and nothing else.
type kubeletTestUser struct {
	token, kubeconfig string
}

func kubeletUser(t *testing.T, c *sandbox.Cluster) kubeletTestUser {
	t.Helper()
	ctx := t.Context()
	client := c.Client()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "developer"}}
	if _, err := client.CoreV1().ServiceAccounts(kubeletNS).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "developer"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"pods/log"}, Verbs: []string{"get"}},
			{APIGroups: []string{""}, Resources: []string{"pods/exec", "pods/portforward"}, Verbs: []string{"get", "create"}},
		},
	}
	if _, err := client.RbacV1().Roles(kubeletNS).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "developer"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: kubeletNS, Name: sa.Name}},
	}
	if _, err := client.RbacV1().RoleBindings(kubeletNS).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := client.CoreV1().ServiceAccounts(kubeletNS).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["src"] = &clientcmdapi.Cluster{Server: c.Host, CertificateAuthorityData: c.RESTConfig().CAData}
	kc.AuthInfos["developer"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["src"] = &clientcmdapi.Context{Cluster: "src", AuthInfo: "developer", Namespace: kubeletNS}
	kc.CurrentContext = "src"
	path := filepath.Join(t.TempDir(), "developer.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return kubeletTestUser{token: tr.Status.Token, kubeconfig: path}
}
