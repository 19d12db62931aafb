package invitation

import (
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

func sample(kind string) Invitation {
	inv := Invitation{Kind: kind, Name: "c1", AgentNamespace: "flotilla-system", Namespaces: []string{"shop"}}
	if kind == "Source" {
		inv.Namespace = "shop"
	}
	inv.Spec.ClusterName = "c1"
	inv.Spec.Identity.ManagedServiceAccount = &v1alpha1.ManagedServiceAccount{}
	return inv
}

func TestNames(t *testing.T) {
	long := sample("Source")
	long.Namespace = strings.Repeat("n", 63)
	long.Name = strings.Repeat("x", 200)
	for _, inv := range []Invitation{sample("ClusterSource"), sample("Source"), long} {
		if errs := validation.IsValidLabelValue(inv.ID()); len(errs) > 0 {
			t.Errorf("ID %q is not a label value: %v", inv.ID(), errs)
		}
		for _, name := range []string{inv.objectName(), inv.KubeconfigSecretName()} {
			if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
				t.Errorf("name %q: %v", name, errs)
			}
		}
	}
	if a, b := sample("Source").ID(), sample("ClusterSource").ID(); a == b {
		t.Errorf("a Source and a ClusterSource of the same name share ID %q", a)
	}
	ns, sa := sample("ClusterSource").ServiceAccount()
	if ns != "flotilla-system" || sa != "flotilla-source-c1" {
		t.Errorf("ClusterSource's managed ServiceAccount %s/%s", ns, sa)
	}
	if ns, _ := sample("Source").ServiceAccount(); ns != "shop" {
		t.Errorf("a Source's managed ServiceAccount lives in %s, not its namespace", ns)
	}
	if got := sample("ClusterSource").Username(); got != "system:serviceaccount:flotilla-system:flotilla-source-c1" {
		t.Errorf("username %q", got)
	}
}

func TestPolicy(t *testing.T) {
	inv := sample("ClusterSource")
	p := inv.Policy()
	if got := p.Spec.MatchConditions[0].Expression; got != `request.userInfo.username == "system:serviceaccount:flotilla-system:flotilla-source-c1"` {
		t.Errorf("the policy applies to %s", got)
	}
	strict := len(p.Spec.Validations)
	inv.Spec.AllowPrivileged = true
	if loose := len(inv.Policy().Spec.Validations); loose >= strict {
		t.Errorf("allowPrivileged keeps %d of %d validations", loose, strict)
	}
	for _, v := range p.Spec.Validations {
		if !strings.Contains(v.Message, "c1") {
			t.Errorf("message %q does not name the source", v.Message)
		}
	}
	// The role never lets the source read Secrets or ConfigMaps.
	for _, rule := range inv.Role("shop").Rules {
		for _, r := range rule.Resources {
			if r == "secrets" || r == "configmaps" {
				for _, verb := range rule.Verbs {
					if verb == "get" || verb == "list" || verb == "watch" {
						t.Errorf("the role lets the source %s %s", verb, r)
					}
				}
			}
		}
	}
	if tr := inv.TokenRole(); len(tr.Rules) != 1 || len(tr.Rules[0].ResourceNames) != 1 || tr.Rules[0].ResourceNames[0] != "flotilla-source-c1" {
		t.Errorf("the token role is not limited to the invited ServiceAccount: %+v", tr.Rules)
	}
}

// TestStreams checks what the source may do with the streams of its
// delegates: read logs and open exec, attach and port-forward (the streams
// Role, streams.go), and the policy lets streams reach only names the
// candidates have.
func TestStreams(t *testing.T) {
	inv := sample("ClusterSource")
	granted := map[string][]string{}
	delegate := StreamPod{Name: "web-0123456789", Candidate: true, SourceCluster: "c1", SchedulerName: protocol.SchedulerName, NodeName: "node-1"}
	for _, rule := range inv.StreamsRole("shop", StreamRules("c1", []StreamPod{delegate})).Rules {
		for _, r := range rule.Resources {
			granted[r] = append(granted[r], rule.Verbs...)
		}
	}
	// A stream over websockets is a GET, authorized as get and create.
	for r, wants := range map[string][]string{"pods/log": {"get"}, "pods/exec": {"get", "create"}, "pods/attach": {"get", "create"}, "pods/portforward": {"get", "create"}} {
		for _, want := range wants {
			if !slices.Contains(granted[r], want) {
				t.Errorf("the role does not grant %s %s (grants %v)", want, r, granted[r])
			}
		}
	}
	p := inv.Policy()
	connect := false
	for _, rule := range p.Spec.MatchConstraints.ResourceRules {
		if slices.Contains(rule.Operations, admissionregistrationv1.Connect) {
			connect = true
			if !reflect.DeepEqual(rule.Resources, streamSubresources) {
				t.Errorf("CONNECT is checked on %v, want %v", rule.Resources, streamSubresources)
			}
		}
	}
	if !connect {
		t.Error("the policy does not check streams (CONNECT)")
	}
	// A CONNECT carries no pod: every check of objects must pass it by,
	// and the last checks its name.
	vs := p.Spec.Validations
	for _, v := range vs[:len(vs)-1] {
		if !strings.HasPrefix(v.Expression, "request.operation == 'CONNECT' || (") {
			t.Errorf("validation %q would read a pod from a stream's options", v.Expression)
		}
	}
	if last := vs[len(vs)-1].Expression; !strings.Contains(last, candidateNamePattern) {
		t.Errorf("the last validation %q does not check the stream's pod name", last)
	}
	name := regexp.MustCompile(candidateNamePattern)
	for _, tc := range []struct {
		pod  string
		want bool
	}{
		{protocol.CandidateName("c1", "t1", "shop", "web", "uid-1"), true},
		{protocol.CandidateName("c1", "t1", "shop", strings.Repeat("long-", 20), "uid-2"), true},
		{"web-7d4b9c8f6d-x2k9p", false},  // a Deployment's pod
		{"db-0", false},                  // a StatefulSet's
		{"backup-28935720-abcde", false}, // a CronJob's Job's
		{"web", false},
	} {
		if got := name.MatchString(tc.pod); got != tc.want {
			t.Errorf("stream to %q allowed: %v, want %v", tc.pod, got, tc.want)
		}
	}
}
