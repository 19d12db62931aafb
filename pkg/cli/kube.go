package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// DefaultAgentNamespace is where the Flotilla chart runs the agent.
const DefaultAgentNamespace = "flotilla-system"

// kubeFlags are kubectl's connection flags.
type kubeFlags struct {
	kubeconfig string
	context    string
	namespace  string
}

func (k *kubeFlags) bind(fs *pflag.FlagSet) {
	fs.StringVar(&k.kubeconfig, "kubeconfig", "", "Path to the kubeconfig file; default $KUBECONFIG or ~/.kube/config, as kubectl.")
	fs.StringVar(&k.context, "context", "", "The kubeconfig context to use; default its current context.")
	fs.StringVarP(&k.namespace, "namespace", "n", "", "The namespace; default the context's namespace.")
}

// clients talk to the cluster of the command line's kubeconfig and context.
type clients struct {
	// where names the cluster in messages: its context.
	where     string
	namespace string
	rest      *rest.Config
	kube      kubernetes.Interface
	cr        client.Client
}

var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = v1alpha1.AddToScheme(s)
	return s
}()

func (k *kubeFlags) clients() (*clients, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = k.kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: k.context}
	overrides.Context.Namespace = k.namespace
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := cc.ClientConfig()
	if err != nil {
		if clientcmd.IsEmptyConfig(err) {
			return nil, errors.New("no kubeconfig found: pass --kubeconfig, set $KUBECONFIG, or write ~/.kube/config")
		}
		return nil, fmt.Errorf("reading the kubeconfig: %w", err)
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, fmt.Errorf("reading the kubeconfig's namespace: %w", err)
	}
	where := k.context
	if where == "" {
		if raw, err := cc.RawConfig(); err == nil {
			where = raw.CurrentContext
		}
	}
	if where == "" {
		where = cfg.Host
	}
	cfg.UserAgent = "kubectl-flotilla"
	c := &clients{where: where, namespace: ns, rest: cfg}
	if c.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, fmt.Errorf("creating a client for %s: %w", where, err)
	}
	if c.cr, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return nil, fmt.Errorf("creating a client for %s: %w", where, err)
	}
	return c, nil
}

// notInstalled reports whether err says that the API server does not know
// a Flotilla kind: its CRDs are not installed.
func notInstalled(err error) bool {
	if meta.IsNoMatchError(err) {
		return true
	}
	var status apierrors.APIStatus
	return errors.As(err, &status) && apierrors.IsNotFound(err) && status.Status().Details != nil && status.Status().Details.Name == ""
}

// explainAPIError adds to err what to do about the usual causes: the chart
// is not installed, or the user may not do what the command does.
func (c *clients) explainAPIError(err error, doing string) error {
	switch {
	case err == nil:
		return nil
	case notInstalled(err):
		return fmt.Errorf("%s in %s: Flotilla's CRDs are not installed there: install the Flotilla chart in this cluster (charts/flotilla, namespace %s): %w",
			doing, c.where, DefaultAgentNamespace, err)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("%s in %s: you may not: ask for the rights, or use a context that has them: %w", doing, c.where, err)
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("%s in %s: the cluster refused your credentials: log in again or pick another --context: %w", doing, c.where, err)
	}
	return fmt.Errorf("%s in %s: %w", doing, c.where, err)
}
