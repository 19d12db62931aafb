package scheduler

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/apiserver/pkg/server"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/cli/globalflag"
	basecompatibility "k8s.io/component-base/compatibility"
	"k8s.io/component-base/featuregate"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/component-base/term"
	"k8s.io/component-base/version/verflag"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
)

// NewCommand is the scheduler's command: kube-scheduler's, with the Flotilla
// plugin registered and its debug state served (--flotilla-debug-bind-address).
func NewCommand() *cobra.Command {
	command := newCommand(plugins()...)
	serveDebugState(command)
	return command
}

// newCommand is kube-scheduler's command (app.NewSchedulerCommand) with one
// step between setting the scheduler up and running it: quietOnDeleted.
// The app builds and runs the scheduler in one unexported function, so
// this command does the same steps itself, with the app's exported Setup
// and Run; every flag is kube-scheduler's.
func newCommand(registryOptions ...app.Option) *cobra.Command {
	opts := options.NewOptions()
	cmd := &cobra.Command{
		Use:  "flotilla-scheduler",
		Long: "kube-scheduler with the Flotilla plugins compiled in. It takes every flag of kube-scheduler.",
		PersistentPreRunE: func(*cobra.Command, []string) error {
			// Feature gates are set before RunE.
			return opts.ComponentGlobalsRegistry.Set()
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return run(cmd, opts, registryOptions...)
		},
		Args: cobra.NoArgs,
	}
	nfs := opts.Flags
	verflag.AddFlags(nfs.FlagSet("global"))
	globalflag.AddGlobalFlags(nfs.FlagSet("global"), cmd.Name(), logs.SkipLoggingConfigurationFlags())
	fs := cmd.Flags()
	for _, f := range nfs.FlagSets {
		fs.AddFlagSet(f)
	}
	cols, _, _ := term.TerminalSize(cmd.OutOrStdout())
	cliflag.SetUsageAndHelpFunc(cmd, *nfs, cols)
	return cmd
}

// run sets the scheduler up and runs it, as kube-scheduler does.
func run(cmd *cobra.Command, opts *options.Options, registryOptions ...app.Option) error {
	verflag.PrintAndExitIfRequested()
	fg := opts.ComponentGlobalsRegistry.FeatureGateFor(basecompatibility.DefaultKubeComponent)
	if err := logsapi.ValidateAndApply(opts.Logs, fg); err != nil {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		os.Exit(1)
	}
	cliflag.PrintFlags(cmd.Flags())

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-server.SetupSignalHandler()
		cancel()
	}()
	cc, sched, err := app.Setup(ctx, opts, registryOptions...)
	if err != nil {
		return err
	}
	quietOnDeleted(sched)
	fg.(featuregate.MutableFeatureGate).AddMetrics()
	opts.ComponentGlobalsRegistry.AddMetrics()
	return app.Run(ctx, cc, sched)
}
