package main

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/flotilla-dev/flotilla/pkg/target"
)

// targetFlags collects repeated --target name=<kubeconfig path>|self flags.
type targetFlags map[string]string

func (t targetFlags) String() string {
	var parts []string
	for k, v := range t {
		parts = append(parts, k+"="+v)
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func (t targetFlags) Set(v string) error {
	name, where, ok := strings.Cut(v, "=")
	if !ok || name == "" || where == "" {
		return fmt.Errorf("want name=<kubeconfig path> or name=self, got %q", v)
	}
	if _, dup := t[name]; dup {
		return fmt.Errorf("target %q given twice", name)
	}
	t[name] = where
	return nil
}

// buildTargets connects to every target. The source's own config serves
// the target named self.
func buildTargets(flags targetFlags, self *rest.Config, sourceCluster string) (*target.Set, error) {
	var targets []*target.Target
	for name, where := range flags {
		cfg, isSelf := self, where == "self"
		if !isSelf {
			var err error
			if cfg, err = clientcmd.BuildConfigFromFlags("", where); err != nil {
				return nil, fmt.Errorf("target %s: loading kubeconfig %s: %w", name, where, err)
			}
			cfg.QPS, cfg.Burst = self.QPS, self.Burst
			cfg.ContentType, cfg.AcceptContentTypes = self.ContentType, self.AcceptContentTypes
		}
		t, err := target.New(name, isSelf, cfg, sourceCluster)
		if err != nil {
			return nil, err
		}
		targets = append(targets, t)
	}
	return target.NewSet(targets...), nil
}
