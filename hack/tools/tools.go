//go:build tools

// Package tools pins the Kubernetes control-plane binaries that the sandbox
// runs. hack/tools.sh builds them from this module so that their versions are
// fixed by go.mod and go.sum rather than by whatever is on the machine.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
