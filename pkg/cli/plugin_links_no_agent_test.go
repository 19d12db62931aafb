package cli

import (
	"os/exec"
	"strings"
	"testing"
)

// agentPackages are what the kubectl plugin must not link: the agent's
// controllers and what only they need (a controller-runtime manager, the
// virtual kubelet). The plugin reads Flotilla's objects through the names
// of pkg/protocol and the API types, so that it stays small and a change
// inside the agent cannot change what it does.
var agentPackages = []string{
	"github.com/flotilla-dev/flotilla/pkg/agent",
	"github.com/flotilla-dev/flotilla/pkg/candidate",
	"github.com/flotilla-dev/flotilla/pkg/cleanup",
	"github.com/flotilla-dev/flotilla/pkg/invitation",
	"github.com/flotilla-dev/flotilla/pkg/kubelet",
	"github.com/flotilla-dev/flotilla/pkg/local",
	"github.com/flotilla-dev/flotilla/pkg/objects",
	"github.com/flotilla-dev/flotilla/pkg/policy",
	"github.com/flotilla-dev/flotilla/pkg/reservation",
	"github.com/flotilla-dev/flotilla/pkg/split",
	"github.com/flotilla-dev/flotilla/pkg/summary",
	"github.com/flotilla-dev/flotilla/pkg/target",
	"github.com/flotilla-dev/flotilla/pkg/vnode",
	"github.com/flotilla-dev/flotilla/pkg/webhook",
	"sigs.k8s.io/controller-runtime/pkg/manager",
	"github.com/virtual-kubelet/virtual-kubelet",
}

// TestPluginLinksNoAgentPackage lists what cmd/kubectl-flotilla links and
// fails on any agent package, or any package under one.
func TestPluginLinksNoAgentPackage(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on $PATH to list the plugin's packages")
	}
	out, err := exec.Command(goTool, "list", "-deps", "github.com/flotilla-dev/flotilla/cmd/kubectl-flotilla").Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list -deps: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, agent := range agentPackages {
			if dep == agent || strings.HasPrefix(dep, agent+"/") {
				t.Errorf("the plugin links %s", dep)
			}
		}
	}
}
