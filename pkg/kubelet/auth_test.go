package kubelet

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/flotilla-dev/flotilla/pkg/target"
)

func TestRequestAttributes(t *testing.T) {
	u := &user.DefaultInfo{Name: "kube-apiserver-kubelet-client"}
	for _, tc := range []struct {
		name, method, path, node string
		wantVerb                 string
		wantSubs                 []string
	}{
		{"logs", http.MethodGet, "/containerLogs/ns/web/c", "flotilla-t1", "get", []string{"proxy"}},
		{"exec over websockets", http.MethodGet, "/exec/ns/web/c", "flotilla-t1", "get", []string{"proxy"}},
		{"exec over SPDY", http.MethodPost, "/exec/ns/web/c", "flotilla-t1", "create", []string{"proxy"}},
		{"attach", http.MethodPost, "/attach/ns/web/c", "flotilla-t1", "create", []string{"proxy"}},
		{"port-forward", http.MethodPost, "/portForward/ns/web", "flotilla-t1", "create", []string{"proxy"}},
		{"pod list: pods, then proxy", http.MethodGet, "/pods", "", "get", []string{"pods", "proxy"}},
		{"running pods", http.MethodGet, "/runningpods/", "", "get", []string{"pods", "proxy"}},
		{"stats", http.MethodGet, "/stats/summary", "", "get", []string{"stats"}},
		{"metrics", http.MethodGet, "/metrics/resource", "", "get", []string{"metrics"}},
		{"node logs", http.MethodGet, "/logs/kubelet.log", "", "get", []string{"log"}},
		{"a path that only starts like stats", http.MethodGet, "/statsx", "", "get", []string{"proxy"}},
		{"put", http.MethodPut, "/x", "", "update", []string{"proxy"}},
		{"patch", http.MethodPatch, "/x", "", "patch", []string{"proxy"}},
		{"delete", http.MethodDelete, "/x", "", "delete", []string{"proxy"}},
		{"head reads", http.MethodHead, "/healthz", "", "get", []string{"proxy"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			attrs := requestAttributes(u, tc.method, tc.path, tc.node)
			var subs []string
			for _, a := range attrs {
				if a.GetVerb() != tc.wantVerb || a.GetResource() != "nodes" || a.GetName() != tc.node ||
					a.GetAPIVersion() != "v1" || a.GetAPIGroup() != "" || a.GetNamespace() != "" || !a.IsResourceRequest() || a.GetUser() != u {
					t.Errorf("attributes %+v: want verb %s on nodes/%s of user %s", a, tc.wantVerb, tc.node, u.Name)
				}
				subs = append(subs, a.GetSubresource())
			}
			if !reflect.DeepEqual(subs, tc.wantSubs) {
				t.Errorf("subresources %v, want %v", subs, tc.wantSubs)
			}
		})
	}
}

func TestParsePath(t *testing.T) {
	for _, tc := range []struct {
		path string
		want podPath
	}{
		{"/containerLogs/ns/web/c", podPath{"ns", "web"}},
		{"/exec/ns/web/c", podPath{"ns", "web"}},
		{"/attach/ns/web/c", podPath{"ns", "web"}},
		{"/portForward/ns/web", podPath{"ns", "web"}},
		{"/portForward/ns/web/", podPath{"ns", "web"}},
		{"/exec/ns/web", podPath{}},
		{"/containerLogs/ns//c", podPath{}},
		{"/pods", podPath{}},
		{"/stats/summary", podPath{}},
		{"/", podPath{}},
		{"", podPath{}},
	} {
		if got := parsePath(tc.path); got != tc.want {
			t.Errorf("parsePath(%q) = %+v, want %+v", tc.path, got, tc.want)
		}
	}
}

type fakeAuthn struct {
	user string
	err  error
}

func (f fakeAuthn) AuthenticateRequest(*http.Request) (*authenticator.Response, bool, error) {
	if f.err != nil || f.user == "" {
		return nil, false, f.err
	}
	return &authenticator.Response{User: &user.DefaultInfo{Name: f.user}}, true, nil
}

// fakeAuthz allows user on nodes/proxy of node (""; every node).
type fakeAuthz struct {
	user, node string
	got        []authorizer.Attributes
}

func (f *fakeAuthz) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	f.got = append(f.got, a)
	if a.GetUser().GetName() == f.user && a.GetSubresource() == "proxy" && (f.node == "" || a.GetName() == f.node) {
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, "no rule", nil
}

func (f *fakeAuthz) ConditionsAwareAuthorize(ctx context.Context, a authorizer.Attributes) authorizer.ConditionsAwareDecision {
	return authorizer.ConditionsAwareDecisionFromParts(f.Authorize(ctx, a))
}

func (f *fakeAuthz) EvaluateConditions(context.Context, authorizer.ConditionsAwareDecision, authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return authorizer.DecisionDeny, "", authorizer.ErrorConditionEvaluationNotSupported
}

// TestAuthenticated checks the order a kubelet answers in: 401 without a
// caller, 403 without nodes/proxy on the pod's virtual node, then 404 for
// what is missing, before any handler runs.
func TestAuthenticated(t *testing.T) {
	pods := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{})
	bound := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "u1"}, Spec: corev1.PodSpec{NodeName: "flotilla-t1"}}
	_ = pods.Add(bound)
	tgt, err := target.New(target.Config{Name: "t1", REST: &rest.Config{Host: "https://t1.invalid"}, SourceCluster: "src"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		authn     fakeAuthn
		authz     *fakeAuthz
		path      string
		wantCode  int
		wantNode  string
		wantReach bool
	}{
		{name: "no credentials", authn: fakeAuthn{}, authz: &fakeAuthz{user: "api"}, path: "/containerLogs/ns/web/c", wantCode: http.StatusUnauthorized},
		{name: "bad credentials", authn: fakeAuthn{err: errors.New("bad token")}, authz: &fakeAuthz{user: "api"}, path: "/containerLogs/ns/web/c", wantCode: http.StatusUnauthorized},
		{name: "no nodes/proxy", authn: fakeAuthn{user: "alice"}, authz: &fakeAuthz{user: "api"}, path: "/containerLogs/ns/web/c", wantCode: http.StatusForbidden, wantNode: "flotilla-t1"},
		{name: "nodes/proxy on another node", authn: fakeAuthn{user: "api"}, authz: &fakeAuthz{user: "api", node: "flotilla-t2"}, path: "/exec/ns/web/c", wantCode: http.StatusForbidden, wantNode: "flotilla-t1"},
		{name: "allowed on the pod's node, target not listed yet", authn: fakeAuthn{user: "api"}, authz: &fakeAuthz{user: "api", node: "flotilla-t1"}, path: "/exec/ns/web/c", wantCode: http.StatusServiceUnavailable, wantNode: "flotilla-t1"},
		{name: "allowed, unknown pod", authn: fakeAuthn{user: "api"}, authz: &fakeAuthz{user: "api"}, path: "/exec/ns/nope/c", wantCode: http.StatusNotFound},
		{name: "unknown pod asks for every node", authn: fakeAuthn{user: "api"}, authz: &fakeAuthz{user: "api", node: "flotilla-t1"}, path: "/exec/ns/nope/c", wantCode: http.StatusForbidden},
		{name: "allowed, not a pod path", authn: fakeAuthn{user: "api"}, authz: &fakeAuthz{user: "api"}, path: "/pods", wantCode: http.StatusTeapot, wantReach: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Server{
				delegs: &delegates{pods: pods, targets: target.NewSet(tgt), sourceCluster: "src"},
				authn:  tc.authn,
				authz:  tc.authz,
			}
			reached := false
			h := s.authenticated(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				reached = true
				if r.Header.Get("Authorization") != "" {
					t.Error("the caller's credentials reached the handler")
				}
				w.WriteHeader(http.StatusTeapot)
			}))
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodGet, tc.path, nil)
			req.Header.Set("Authorization", "Bearer secret")
			h.ServeHTTP(rec, req)
			if rec.Code != tc.wantCode || reached != tc.wantReach {
				t.Fatalf("code %d (reached handler: %v), want %d (%v): %s", rec.Code, reached, tc.wantCode, tc.wantReach, rec.Body)
			}
			for _, a := range tc.authz.got {
				if a.GetName() != tc.wantNode {
					t.Errorf("authorized on node %q, want %q", a.GetName(), tc.wantNode)
				}
			}
		})
	}
}
