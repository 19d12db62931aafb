package target

import (
	"k8s.io/client-go/rest"

	"github.com/flotilla-dev/flotilla/pkg/kubeconfig"
)

// ErrKubeconfigRefused wraps what a kubeconfig asks that the agent will not
// do (pkg/kubeconfig).
var ErrKubeconfigRefused = kubeconfig.ErrRefused

// RESTConfigFromKubeconfig reads a peer's kubeconfig as client-go resolves
// it, refusing anything beyond "connect to this server with this inline
// credential" (pkg/kubeconfig).
func RESTConfigFromKubeconfig(data []byte) (*rest.Config, error) {
	return kubeconfig.RESTConfig(data)
}
