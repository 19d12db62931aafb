// Package sandbox runs real Kubernetes clusters as local processes for tests,
// the demo and the benchmarks.
//
// Each cluster is an etcd, a kube-apiserver (TLS, token authentication, RBAC),
// a kube-controller-manager, Flotilla's scheduler and kwok, all on 127.0.0.1
// with ports picked at start. kwok keeps the fake nodes that the caller
// describes Ready and runs the pods bound to them. Every process writes its
// log to the sandbox folder; every process is a child of the caller and is
// killed when the caller dies, so an interrupted test leaves nothing behind.
//
// The binaries come from ./bin (make tools, make build), or from the folder in
// $FLOTILLA_BIN.
package sandbox
