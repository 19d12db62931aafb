package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// Exit codes, as kubectl's.
const (
	ExitOK    = 0
	ExitError = 1
	ExitUsage = 2
)

// usageError is a mistake in how the command was called: exit code 2.
type usageError struct{ error }

func usageErrorf(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// Main runs the plugin with args (without the program name) and returns
// its exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	// Libraries log through klog and controller-runtime; a command reports
	// what matters itself.
	ctrllog.SetLogger(logr.Discard())
	klog.SetLogger(logr.Discard())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := NewCommand(stdout, stderr)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	fmt.Fprintf(stderr, "error: %v\n", err)
	if ue := (usageError{}); errors.As(err, &ue) {
		fmt.Fprintf(stderr, "See '%s --help' for usage.\n", cmd.CommandPath())
		return ExitUsage
	}
	return ExitError
}

// NewCommand is the root command, kubectl-flotilla.
func NewCommand(stdout, stderr io.Writer) *cobra.Command {
	kube := &kubeFlags{}
	root := &cobra.Command{
		Use:   "kubectl-flotilla",
		Short: "Invite, join and inspect Flotilla clusters",
		Long: `kubectl flotilla connects clusters for Flotilla's multi-cluster scheduling
and explains what it does.

In the target cluster (the one that runs other clusters' pods), invite a
source; in the source cluster (the one whose pods go elsewhere), join the
target with the file the invitation wrote:

  kubectl --context t1 flotilla invite c1 --namespaces shop --create-namespaces -o t1.yaml
  kubectl --context c1 flotilla join t1 --kubeconfig-from t1.yaml
  rm t1.yaml

Then, in either cluster:

  kubectl flotilla status
  kubectl flotilla explain web-0 -n shop

The Flotilla chart must be installed in both clusters, and the source's agent
must run with clusterName c1 (the chart's value clusterName; the name the
invitation gives the source).`,
		Annotations:       map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl flotilla"},
		SilenceUsage:      true,
		SilenceErrors:     true,
		Args:              cobra.ArbitraryArgs,
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageErrorf("unknown command %q", args[0])
			}
			return cmd.Help()
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	kube.bind(root.PersistentFlags())
	root.AddCommand(
		newInviteCommand(kube),
		newJoinCommand(kube),
		newStatusCommand(kube),
		newExplainCommand(kube),
		newMigrateCommand(kube),
	)
	return root
}

// exactArgs is cobra.ExactArgs with a usage error that names the argument.
func exactArgs(what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		switch {
		case len(args) == 0:
			return usageErrorf("%s is required", what)
		case len(args) > 1:
			return usageErrorf("only one %s is accepted, got %s", what, strings.Join(args, " "))
		}
		return nil
	}
}

// noArgs refuses positional arguments with a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErrorf("%s takes no arguments, got %s", cmd.CommandPath(), strings.Join(args, " "))
	}
	return nil
}

// oneOf refuses a flag value outside allowed.
func oneOf(flag, value string, allowed ...string) error {
	for _, a := range allowed {
		if value == a {
			return nil
		}
	}
	return usageErrorf("--%s must be one of %s, got %q", flag, strings.Join(allowed, ", "), value)
}

// changed reports whether a flag was given on the command line.
func changed(fs *pflag.FlagSet, name string) bool {
	f := fs.Lookup(name)
	return f != nil && f.Changed
}
