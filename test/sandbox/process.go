package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Process is one supervised child: it can be stopped, killed and started
// again with the same arguments, so a test can simulate an outage or a crash.
type Process struct {
	name    string
	binary  string
	args    []string
	env     []string // added to the sandbox's own environment
	logPath string
	// onStart is called with the name and pid right after each start (ClusterSpec.OnProcessStart).
	onStart func(name string, pid int) error

	// restarts is set for a process that stands in for a pod whose
	// containers the kubelet restarts (restartPolicy Always: the release's
	// agent and scheduler): when it exits on its own (not by Stop or
	// Kill), it is started again after a back-off, as kubelet does.
	restarts bool

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	// stopped is set by Stop and Kill, until Start: a restart due after
	// a back-off does not happen.
	stopped bool
	// backoff is the wait before the next restart (restartBackoff).
	backoff time.Duration
}

// The kubelet's back-off between restarts of a container that keeps
// exiting: 10 s, doubled at each exit up to 5 min, and back to 10 s once
// it ran for 10 min (variables for the package's own test).
var (
	restartBackoff    = 10 * time.Second
	maxRestartBackoff = 5 * time.Minute
	restartResetAfter = 10 * time.Minute
)

func newProcess(name, binary, logPath string, args ...string) *Process {
	return &Process{name: name, binary: binary, args: args, logPath: logPath}
}

// start launches the process. Its output is appended to its log file, so the
// log of a restarted process keeps what came before.
func (p *Process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("%s is already running (pid %d)", p.name, p.cmd.Process.Pid)
	}
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("opening log of %s: %w", p.name, err)
	}
	fmt.Fprintf(logFile, "==== %s starting: %s %q\n", time.Now().Format(time.RFC3339Nano), p.binary, p.args)
	cmd := exec.Command(p.binary, p.args...)
	if len(p.env) > 0 {
		cmd.Env = append(os.Environ(), p.env...)
	}
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Its own process group, so that stop reaches anything it forks.
		Setpgid: true,
		// Killed with us: an interrupted or crashed test leaves no process.
		Pdeathsig: syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("starting %s: %w", p.name, err)
	}
	if p.onStart != nil {
		if err := p.onStart(p.name, cmd.Process.Pid); err != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
			logFile.Close()
			return fmt.Errorf("starting %s: %w", p.name, err)
		}
	}
	exited := make(chan struct{})
	started := time.Now()
	go func() {
		err := cmd.Wait()
		if p.restarts {
			p.exitedOnItsOwn(cmd, started, err, logFile)
		}
		logFile.Close()
		close(exited)
	}()
	p.cmd, p.exited, p.stopped = cmd, exited, false
	return nil
}

// exitedOnItsOwn starts a process that restarts (Process.restarts) again
// after its back-off, unless Stop or Kill ended it (they forget cmd before
// they signal it) or ends it meanwhile. It says so in the process's log.
func (p *Process) exitedOnItsOwn(cmd *exec.Cmd, started time.Time, err error, logFile *os.File) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != cmd || p.stopped {
		return
	}
	if time.Since(started) >= restartResetAfter || p.backoff == 0 {
		p.backoff = restartBackoff
	}
	wait := p.backoff
	p.backoff = min(2*p.backoff, maxRestartBackoff)
	fmt.Fprintf(logFile, "==== %s exited on its own (%v); starting it again in %s, as the kubelet would\n", time.Now().Format(time.RFC3339Nano), err, wait)
	time.AfterFunc(wait, func() {
		p.mu.Lock()
		again := p.cmd == cmd && !p.stopped
		if again {
			p.cmd, p.exited = nil, nil
		}
		p.mu.Unlock()
		if again {
			_ = p.start()
		}
	})
}

// running reports whether the process was started and has not exited.
func (p *Process) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// pid is the process id, or 0 when it is not running.
func (p *Process) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// stop sends SIGTERM to the process group and waits for the exit; after the
// grace period it sends SIGKILL. A grace of zero kills at once (a crash).
func (p *Process) stop(grace time.Duration) error {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.cmd, p.exited, p.stopped = nil, nil, true
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	pgid := cmd.Process.Pid
	if grace > 0 {
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-exited:
			return nil
		case <-time.After(grace):
		}
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	select {
	case <-exited:
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.name, pgid)
	}
}

func (p *Process) String() string { return filepath.Base(p.binary) + "/" + p.name }

// Start starts the process again after Stop or Kill, with the same arguments.
func (p *Process) Start() error { return p.start() }

// Stop sends SIGTERM and waits; after the grace period it kills.
func (p *Process) Stop() error { return p.stop(stopGrace) }

// Kill kills the process at once, as a crash would.
func (p *Process) Kill() error { return p.stop(0) }

// Pause stops the process and its group with SIGSTOP: it keeps its sockets
// and memory and answers nothing, as a process in a long pause or on a frozen
// machine would. Resume continues it.
func (p *Process) Pause() error { return p.signal(syscall.SIGSTOP) }

// Resume continues a paused process with SIGCONT.
func (p *Process) Resume() error { return p.signal(syscall.SIGCONT) }

// signal sends sig to the process group.
func (p *Process) signal(sig syscall.Signal) error {
	pid := p.pid()
	if pid == 0 {
		return fmt.Errorf("%s is not running", p.name)
	}
	if err := syscall.Kill(-pid, sig); err != nil {
		return fmt.Errorf("sending %s to %s (pid %d): %w", sig, p.name, pid, err)
	}
	return nil
}

// PID is the process id, or 0 when the process is not running.
func (p *Process) PID() int { return p.pid() }

// Running reports whether the process is up.
func (p *Process) Running() bool { return p.running() }

// LogPath is the file the process writes its output to.
func (p *Process) LogPath() string { return p.logPath }
