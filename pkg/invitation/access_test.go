package invitation

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
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
