package sandbox

import (
	"context"
	"flag"
	"os"
	"sync"

	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/flotilla-dev/flotilla/pkg/agent"
)

var (
	setLogger sync.Once
	// inProcessLog is where klog writes in this process once an agent runs
	// in it: klog is one per process, so every in-process agent and the
	// test's own client-go share the first agent's file.
	inProcessLog string
)

// runAgentInProcess starts the agent of args, the command line the chart
// gives its pod (with the sandbox's listen flags), in this process, as
// cmd/agent would: pkg/agent's Flags read the configuration file and the
// overrides, NewManager and Setup make the agent. It runs until ctx ends.
// Its log goes to logPath (see inProcessLog).
func runAgentInProcess(ctx context.Context, args []string, logPath string) error {
	fs := flag.NewFlagSet("flotilla-agent", flag.ContinueOnError)
	var flags agent.Flags
	flags.Bind(fs)
	kubeconfig := fs.String("kubeconfig", "", "")
	// klog's flags (the chart's --v) are the process's: one test process
	// holds one set.
	fs.String("v", "", "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c, err := flags.Config(fs)
	if err != nil {
		return err
	}
	restCfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return err
	}
	var logErr error
	setLogger.Do(func() {
		f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			logErr = err
			return
		}
		klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
		klog.InitFlags(klogFlags)
		logErr = klogFlags.Set("logtostderr", "false")
		klog.SetOutput(f)
		inProcessLog = logPath
		ctrl.SetLogger(klog.NewKlogr())
	})
	if logErr != nil {
		return logErr
	}
	mgr, err := agent.NewManager(restCfg, c)
	if err != nil {
		return err
	}
	if err := agent.Setup(mgr, c); err != nil {
		return err
	}
	go func() {
		if err := mgr.Start(ctx); err != nil {
			klog.ErrorS(err, "agent in process stopped", "cluster", c.ClusterName)
		}
	}()
	return nil
}
