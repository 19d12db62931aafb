package main

import (
	"fmt"

	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/flotilla-dev/flotilla/pkg/split"
)

// setupSplit runs the on-demand/spot split: its cache on every replica,
// whose webhook places each new pod of a split workload with the Assigner
// returned, and its rebalancer on the leader. policies may be nil: only
// annotations then ask for a split.
func setupSplit(mgr manager.Manager, kube kubernetes.Interface, policies split.Policies) (*split.Assigner, error) {
	assigner, err := split.Setup(mgr, kube, policies)
	if err != nil {
		return nil, fmt.Errorf("setting up the on-demand/spot split: %w", err)
	}
	return assigner, nil
}
