package scheduler

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/flotilla-dev/flotilla/pkg/debugstate"
	"github.com/flotilla-dev/flotilla/pkg/scheduler/plugin"
)

// serveDebugState adds --flotilla-debug-bind-address to the command and,
// when it is set, serves the plugin's /debug/state there from the start.
// kube-scheduler's secure port cannot take another handler (its mux is
// built inside the app, with no option for one), so the state has a plain
// HTTP listener of its own, off unless asked for.
func serveDebugState(command *cobra.Command) {
	var addr string
	command.Flags().StringVar(&addr, "flotilla-debug-bind-address", "",
		"Address (host:port) of a plain HTTP listener serving the Flotilla plugin's state as JSON at "+debugstate.Path+" (waiting candidates, quota accounting); empty disables it. It has no authentication: bind it to 127.0.0.1 and reach it with kubectl port-forward.")
	run := command.RunE
	command.RunE = func(cmd *cobra.Command, args []string) error {
		if addr != "" {
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("--flotilla-debug-bind-address: %w", err)
			}
			mux := http.NewServeMux()
			mux.Handle(debugstate.Path, plugin.State)
			srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
			go func() {
				if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
					klog.Background().Error(err, "Serving the Flotilla debug state stopped", "address", addr)
				}
			}()
			defer srv.Close()
			klog.Background().Info("Serving the Flotilla debug state", "address", ln.Addr().String(), "path", debugstate.Path)
		}
		return run(cmd, args)
	}
}
