package kubelet

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/klog/v2"
)

// What the kubelet API needs in the source cluster to check its callers, as
// a kubelet does with --authentication-token-webhook and
// --authorization-mode=Webhook: review tokens and access, and read the
// client CA the API server publishes for delegated authentication.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
// +kubebuilder:rbac:groups="",namespace=kube-system,resources=configmaps,resourceNames=extension-apiserver-authentication,verbs=get;list;watch

// The client CA: the API server's own --client-ca-file, which signs the
// certificate it presents to kubelets (--kubelet-client-certificate).
const (
	clientCANamespace = "kube-system"
	clientCAConfigMap = "extension-apiserver-authentication"
	clientCAKey       = "client-ca-file"
)

// The kubelet's defaults for caching reviews.
const (
	authnCacheTTL      = 2 * time.Minute
	authzAllowCacheTTL = 5 * time.Minute
	authzDenyCacheTTL  = 30 * time.Second
	reviewTimeout      = 10 * time.Second
)

// reviewBackoff is the API servers' own for their review webhooks
// (k8s.io/apiserver's DefaultAuthWebhookRetryBackoff), without importing
// the generic server for it.
func reviewBackoff() *wait.Backoff {
	return &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}
}

// setupAuth builds the delegating authenticator (client certificates of the
// source's client CA, then TokenReview) and authorizer (SubjectAccessReview).
func (s *Server) setupAuth() error {
	clientCA, err := dynamiccertificates.NewDynamicCAFromConfigMapController("kubelet-api-client-ca", clientCANamespace, clientCAConfigMap, clientCAKey, s.cfg.Kube)
	if err != nil {
		return fmt.Errorf("kubelet API: watching the client CA: %w", err)
	}
	s.starters = append(s.starters, func(ctx context.Context) {
		_ = clientCA.RunOnce(ctx)
		go clientCA.Run(ctx, 1)
	})
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                          &apiserver.AnonymousAuthConfig{Enabled: false},
		TokenAccessReviewClient:            s.cfg.Kube.AuthenticationV1(),
		TokenAccessReviewTimeout:           reviewTimeout,
		WebhookRetryBackoff:                reviewBackoff(),
		CacheTTL:                           authnCacheTTL,
		ClientCertificateCAContentProvider: clientCA,
	}.New()
	if err != nil {
		return fmt.Errorf("kubelet API: authentication: %w", err)
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: s.cfg.Kube.AuthorizationV1(),
		AllowCacheTTL:             authzAllowCacheTTL,
		DenyCacheTTL:              authzDenyCacheTTL,
		WebhookRetryBackoff:       reviewBackoff(),
	}.New()
	if err != nil {
		return fmt.Errorf("kubelet API: authorization: %w", err)
	}
	s.authn, s.authz = authn, authz
	return nil
}

// authenticated lets through only requests whose caller is authenticated
// and allowed on the virtual node, as the kubelet does; a request on a pod
// is then checked for a delegate to reach, so that what is missing is an
// HTTP error before any stream is upgraded.
func (s *Server) authenticated(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		logger := klog.FromContext(req.Context())
		resp, ok, err := s.authn.AuthenticateRequest(req)
		if err != nil || !ok {
			if err != nil {
				logger.V(2).Info("Kubelet API: authentication failed", "err", err, "remote", req.RemoteAddr)
			}
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		// Tokens and certificates go no further than here.
		req.Header.Del("Authorization")
		target := parsePath(req.URL.Path)
		node := ""
		if target.pod != "" {
			node = s.delegs.nodeOf(target.namespace, target.pod)
		}
		attrs := requestAttributes(resp.User, req.Method, req.URL.Path, node)
		allowed := false
		var reasons []string
		for _, a := range attrs {
			decision, reason, err := s.authz.Authorize(req.Context(), a)
			if err != nil {
				logger.Error(err, "Kubelet API: authorization failed", "user", resp.User.GetName(), "verb", a.GetVerb(), "subresource", a.GetSubresource())
				http.Error(w, fmt.Sprintf("authorization failed: %v", err), http.StatusInternalServerError)
				return
			}
			if decision == authorizer.DecisionAllow {
				allowed = true
				break
			}
			if reason != "" {
				reasons = append(reasons, reason)
			}
		}
		if !allowed {
			msg := fmt.Sprintf("Forbidden (user=%s, verb=%s, resource=nodes, subresource(s)=%v, name=%q)", resp.User.GetName(), attrs[0].GetVerb(), subresources(attrs), node)
			if len(reasons) > 0 {
				msg += ": " + strings.Join(reasons, "; ")
			}
			logger.V(2).Info("Kubelet API: request forbidden", "user", resp.User.GetName(), "path", req.URL.Path, "node", node)
			http.Error(w, msg, http.StatusForbidden)
			return
		}
		if target.pod != "" {
			if _, err := s.delegs.resolve(target.namespace, target.pod); err != nil {
				writeResolveError(w, err)
				return
			}
		}
		next.ServeHTTP(w, req.WithContext(withQuery(req.Context(), req.URL.Query())))
	})
}

// requestAttributes maps a request to what it needs to be allowed, as the
// kubelet does (pkg/kubelet/server/auth.go with KubeletFineGrainedAuthz):
// resource nodes, name the node, the verb from the HTTP method, subresource
// stats, metrics or log for those paths, pods then proxy (either allows)
// for the pod listings, proxy for everything else: exec, attach,
// portForward, containerLogs. An empty node (a request on no pod of a
// virtual node) asks for every node.
func requestAttributes(u user.Info, method, path, node string) []authorizer.Attributes {
	verb := ""
	switch method {
	case http.MethodPost:
		verb = "create"
	case http.MethodGet, http.MethodHead:
		verb = "get"
	case http.MethodPut:
		verb = "update"
	case http.MethodPatch:
		verb = "patch"
	case http.MethodDelete:
		verb = "delete"
	}
	var subs []string
	switch {
	case isSubpath(path, "/pods"), isSubpath(path, "/runningpods"):
		subs = []string{"pods", "proxy"}
	case isSubpath(path, "/stats"):
		subs = []string{"stats"}
	case isSubpath(path, "/metrics"):
		subs = []string{"metrics"}
	case isSubpath(path, "/logs"):
		subs = []string{"log"}
	default:
		subs = []string{"proxy"}
	}
	attrs := make([]authorizer.Attributes, 0, len(subs))
	for _, sub := range subs {
		attrs = append(attrs, authorizer.AttributesRecord{
			User:            u,
			Verb:            verb,
			APIVersion:      "v1",
			Resource:        "nodes",
			Subresource:     sub,
			Name:            node,
			ResourceRequest: true,
			Path:            path,
		})
	}
	return attrs
}

func subresources(attrs []authorizer.Attributes) []string {
	out := make([]string, 0, len(attrs))
	for _, a := range attrs {
		out = append(out, a.GetSubresource())
	}
	return out
}

func isSubpath(subpath, path string) bool {
	path = strings.TrimSuffix(path, "/")
	return subpath == path || (strings.HasPrefix(subpath, path) && subpath[len(path)] == '/')
}

// podPath is the pod a request is about, from its path.
type podPath struct {
	namespace, pod string
}

// parsePath finds the pod of /containerLogs/{ns}/{pod}/{container},
// /exec|attach/{ns}/{pod}/{container} and /portForward/{ns}/{pod}; the zero
// value for any other path.
func parsePath(path string) podPath {
	parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
	if len(parts) < 3 || parts[1] == "" || parts[2] == "" {
		return podPath{}
	}
	switch parts[0] {
	case "containerLogs", "exec", "attach":
		if len(parts) < 4 {
			return podPath{}
		}
	case "portForward":
	default:
		return podPath{}
	}
	return podPath{namespace: parts[1], pod: parts[2]}
}
