// Package kubelet serves the kubelet API of the agent's virtual nodes: the
// source cluster's API server calls it, as it would a node's kubelet, for
// the logs, exec, attach and port-forward of a source pod, and the agent
// proxies each call to the pod's delegate through the target's API server,
// with the target's own credentials (the invited identity).
//
// Callers are authenticated and authorized the way a kubelet run with
// --authentication-token-webhook and --authorization-mode=Webhook does:
// client certificates signed by the source's client CA, or bearer tokens
// (TokenReview), and a SubjectAccessReview of nodes/proxy on the virtual
// node the pod is bound to.
package kubelet

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/flotilla-dev/flotilla/pkg/target"
)

// Config describes the kubelet API server of the virtual nodes.
type Config struct {
	// BindAddress is the host to listen on; empty: every address.
	BindAddress string
	// Port is the port to listen on (the nodes' daemonEndpoints).
	Port int
	// Address is the IP the virtual nodes publish as InternalIP; it goes
	// into the self-signed serving certificate.
	Address string
	// CertFile and KeyFile are a serving certificate to use instead of a
	// self-signed one (a mounted Secret); they are read again when they
	// change.
	CertFile, KeyFile string

	// Kube is the source cluster's clientset: TokenReviews,
	// SubjectAccessReviews and the client CA.
	Kube kubernetes.Interface
	// SourcePods is the agent's shared informer over source pods.
	SourcePods toolscache.SharedIndexInformer
	// Targets are the running targets, one per virtual node.
	Targets *target.Set
	// SourceCluster is this cluster's name, which names delegates.
	SourceCluster string
}

// Timeouts of the streams, the kubelet's defaults.
const (
	streamIdleTimeout     = 4 * time.Hour
	streamCreationTimeout = 30 * time.Second
)

// Server serves the kubelet API. It is a manager Runnable that runs on the
// leader only: only the leader has the targets (and their credentials), and
// the virtual nodes publish the leader's address.
type Server struct {
	cfg     Config
	delegs  *delegates
	authn   authenticator.Request
	authz   authorizer.Authorizer
	handler http.Handler
	tls     *tls.Config
	// starters run with the server's context: the watchers of the client
	// CA and of the serving certificate files.
	starters []func(ctx context.Context)
}

// New prepares a server; Start serves.
func New(cfg Config) (*Server, error) {
	if cfg.Port <= 0 || cfg.Port > 65535 {
		return nil, fmt.Errorf("kubelet API: port %d out of range", cfg.Port)
	}
	if cfg.Kube == nil || cfg.SourcePods == nil || cfg.Targets == nil {
		return nil, errors.New("kubelet API: a clientset, the source pod informer and the targets are required")
	}
	s := &Server{cfg: cfg, delegs: &delegates{pods: cfg.SourcePods.GetIndexer(), targets: cfg.Targets, sourceCluster: cfg.SourceCluster}}
	var err error
	if err = s.setupAuth(); err != nil {
		return nil, err
	}
	if s.tls, err = s.servingTLS(); err != nil {
		return nil, err
	}
	p := proxy{delegates: s.delegs}
	s.handler = api.PodHandler(api.PodHandlerConfig{
		RunInContainer:        p.exec,
		AttachToContainer:     p.attach,
		PortForward:           p.portForward,
		GetContainerLogs:      p.logs,
		StreamIdleTimeout:     streamIdleTimeout,
		StreamCreationTimeout: streamCreationTimeout,
	}, false)
	return s, nil
}

// Start serves until ctx ends.
func (s *Server) Start(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("kubelet-api")
	for _, start := range s.starters {
		start(ctx)
	}
	addr := net.JoinHostPort(s.cfg.BindAddress, strconv.Itoa(s.cfg.Port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("kubelet API: listening on %s: %w", addr, err)
	}
	srv := &http.Server{
		Handler:           s.authenticated(s.handler),
		TLSConfig:         s.tls,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	logger.Info("Serving the kubelet API of the virtual nodes", "address", addr, "publishedAddress", s.cfg.Address)
	if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("kubelet API: %w", err)
	}
	return nil
}

// NeedLeaderElection: the server runs on the leader, which has the targets.
func (s *Server) NeedLeaderElection() bool { return true }
