// Command flotilla-sandbox starts local sandbox clusters that outlive it, for
// the demo and for trying Flotilla by hand.
//
//	flotilla-sandbox up   [--dir D] [--clusters c1,c2,c3] [--nodes 3]
//	flotilla-sandbox down [--dir D]
//	flotilla-sandbox status [--dir D]
//
// `up` starts a supervisor in the background and returns once every cluster
// is ready; the supervisor owns the clusters' processes and stops them when
// `down` sends it SIGTERM (or when it dies).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/flotilla-dev/flotilla/test/sandbox"
)

const (
	pidFile   = "supervisor.pid"
	readyFile = "ready"
	errorFile = "error"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	dir := fs.String("dir", ".sandbox/demo", "Folder for the clusters' data, kubeconfigs and logs.")
	clusters := fs.String("clusters", "c1,c2,c3", "Comma-separated names of the clusters to start.")
	nodes := fs.Int("nodes", 3, "Fake nodes per cluster; node i of cluster c is in zone <c>-z<i%3>, a spot node when i%3 is 2, else on-demand.")
	timeout := fs.Duration("timeout", 5*time.Minute, "How long `up` waits for the clusters.")
	agents := fs.Bool("agents", true, "Install Flotilla's chart in every cluster and run its agent; no targets or invitations (the demo makes them, as a user would).")
	_ = fs.Parse(os.Args[2:])
	abs, err := filepath.Abs(*dir)
	if err != nil {
		fail(err)
	}
	switch os.Args[1] {
	case "up":
		err = up(abs, *clusters, *nodes, *agents, *timeout)
	case "serve":
		err = serve(abs, *clusters, *nodes, *agents)
	case "down":
		err = down(abs)
	case "status":
		err = status(abs)
	default:
		usage()
	}
	if err != nil {
		fail(err)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: flotilla-sandbox up|down|status [--dir D] [--clusters c1,c2,c3] [--nodes N]")
	os.Exit(2)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "flotilla-sandbox:", err)
	os.Exit(1)
}

// up starts the supervisor detached from the terminal and waits for it to
// report ready or failed.
func up(dir, clusters string, nodes int, agents bool, timeout time.Duration) error {
	if pid, alive := supervisor(dir); alive {
		fmt.Printf("sandbox already running in %s (supervisor pid %d)\n", dir, pid)
		return printKubeconfigs(dir)
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	logFile, err := os.Create(filepath.Join(dir, "supervisor.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self, "serve", "--dir", dir, "--clusters", clusters, "--nodes", strconv.Itoa(nodes), "--agents="+strconv.FormatBool(agents))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting supervisor: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, pidFile), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	fmt.Printf("starting clusters %s in %s ...\n", clusters, dir)
	deadline := time.After(timeout)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			msg, _ := os.ReadFile(filepath.Join(dir, errorFile))
			return fmt.Errorf("supervisor exited (%v): %s; see %s", err, strings.TrimSpace(string(msg)), logFile.Name())
		case <-deadline:
			_ = cmd.Process.Signal(syscall.SIGTERM)
			return fmt.Errorf("clusters not ready after %s; see %s", timeout, logFile.Name())
		case <-tick.C:
			if _, err := os.Stat(filepath.Join(dir, readyFile)); err == nil {
				fmt.Printf("sandbox ready (supervisor pid %d); stop it with `make demo-down`\n", cmd.Process.Pid)
				return printKubeconfigs(dir)
			}
		}
	}
}

// serve runs the clusters until SIGTERM or SIGINT.
func serve(dir, clusters string, nodes int, agents bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	opts := sandbox.Options{Dir: dir}
	for _, name := range strings.Split(clusters, ",") {
		spec := sandbox.DemoCluster(strings.TrimSpace(name), nodes)
		opts.Clusters = append(opts.Clusters, spec)
	}
	s, err := sandbox.Start(ctx, opts)
	if err != nil {
		_ = os.WriteFile(filepath.Join(dir, errorFile), []byte(err.Error()), 0o644)
		return err
	}
	if agents {
		for _, c := range s.Clusters {
			if _, err := sandbox.StartAgent(ctx, c, nil); err != nil {
				_ = os.WriteFile(filepath.Join(dir, errorFile), []byte(err.Error()), 0o644)
				_ = s.Stop()
				return err
			}
		}
	}
	if err := os.WriteFile(filepath.Join(dir, readyFile), nil, 0o644); err != nil {
		_ = s.Stop()
		return err
	}
	fmt.Println("sandbox ready")
	<-ctx.Done()
	fmt.Println("stopping sandbox")
	err = s.Stop()
	_ = os.Remove(filepath.Join(dir, readyFile))
	return err
}

func down(dir string) error {
	pid, alive := supervisor(dir)
	if !alive {
		fmt.Printf("no sandbox running in %s\n", dir)
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return fmt.Errorf("signalling supervisor %d: %w", pid, err)
	}
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if _, alive := supervisor(dir); !alive {
			fmt.Printf("sandbox in %s stopped\n", dir)
			_ = os.Remove(filepath.Join(dir, pidFile))
			return nil
		}
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	return errors.New("supervisor did not stop within 60s; killed it (its clusters die with it)")
}

func status(dir string) error {
	pid, alive := supervisor(dir)
	if !alive {
		fmt.Printf("no sandbox running in %s\n", dir)
		return nil
	}
	fmt.Printf("sandbox running in %s (supervisor pid %d)\n", dir, pid)
	return printKubeconfigs(dir)
}

// supervisor reads the supervisor's pid and checks that it is alive.
func supervisor(dir string) (int, bool) {
	raw, err := os.ReadFile(filepath.Join(dir, pidFile))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	// A zombie still answers signal 0; it is reaped by init soon after.
	if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err != nil || strings.Contains(string(stat), ") Z ") {
		return pid, false
	}
	return pid, true
}

func printKubeconfigs(dir string) error {
	matches, err := filepath.Glob(filepath.Join(dir, "*", "kubeconfig"))
	if err != nil {
		return err
	}
	fmt.Println("kubeconfigs:")
	for _, m := range matches {
		fmt.Printf("  %-4s %s\n", filepath.Base(filepath.Dir(m)), m)
	}
	fmt.Printf("logs: %s\n", filepath.Join(dir, "logs"))
	return nil
}
