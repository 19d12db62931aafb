package scheduler

import (
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"github.com/flotilla-dev/flotilla/pkg/scheduler/plugin"
)

// plugins lists the out-of-tree plugins registered with the scheduler. The
// Flotilla candidate plugin registers here; profiles enable it by name.
func plugins() []app.Option {
	return []app.Option{app.WithPlugin(plugin.Name, plugin.New)}
}
