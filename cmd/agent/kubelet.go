package main

import (
	"flag"
	"fmt"
	"net"

	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/flotilla-dev/flotilla/pkg/kubelet"
	"github.com/flotilla-dev/flotilla/pkg/target"
)

// kubeletOptions are the flags of the virtual nodes' kubelet API.
type kubeletOptions struct {
	port        int
	bindAddress string
	address     string
	certFile    string
	keyFile     string
}

func (o *kubeletOptions) bind(fs *flag.FlagSet) {
	fs.IntVar(&o.port, "kubelet-port", 10250, "Port of the kubelet API of the virtual nodes (logs, exec, attach, port-forward of source pods), published in their daemonEndpoints; 0 disables it.")
	fs.StringVar(&o.bindAddress, "kubelet-bind-address", "", "Address the kubelet API binds to; empty means all.")
	fs.StringVar(&o.address, "kubelet-address", "", "IP the virtual nodes publish as their InternalIP, where the API server reaches the kubelet API: the agent pod's IP (the chart passes $(POD_IP)). Empty: the nodes publish no address and logs and exec fail.")
	fs.StringVar(&o.certFile, "kubelet-tls-cert-file", "", "Serving certificate of the kubelet API (PEM), with --kubelet-tls-private-key-file; read again when it changes. Empty: a self-signed certificate for --kubelet-address, made at start.")
	fs.StringVar(&o.keyFile, "kubelet-tls-private-key-file", "", "Private key of --kubelet-tls-cert-file (PEM).")
}

func (o *kubeletOptions) validate() error {
	if o.port < 0 || o.port > 65535 {
		return fmt.Errorf("--kubelet-port %d: want a port, or 0 to disable", o.port)
	}
	if o.address != "" && net.ParseIP(o.address) == nil {
		return fmt.Errorf("--kubelet-address %q: want an IP address (a node's InternalIP)", o.address)
	}
	if (o.certFile == "") != (o.keyFile == "") {
		return fmt.Errorf("--kubelet-tls-cert-file and --kubelet-tls-private-key-file go together")
	}
	return nil
}

// published is the address and port the virtual nodes publish: none when
// the API is off.
func (o *kubeletOptions) published() (string, int32) {
	if o.port == 0 {
		return "", 0
	}
	return o.address, int32(o.port)
}

// setupKubelet serves the kubelet API of the virtual nodes on the leader,
// which runs them and holds the targets' connections.
func setupKubelet(mgr manager.Manager, kube kubernetes.Interface, sourcePods toolscache.SharedIndexInformer, targets *target.Set, opts options) error {
	o := opts.kubelet
	if o.port == 0 {
		return nil
	}
	srv, err := kubelet.New(kubelet.Config{
		BindAddress:   o.bindAddress,
		Port:          o.port,
		Address:       o.address,
		CertFile:      o.certFile,
		KeyFile:       o.keyFile,
		Kube:          kube,
		SourcePods:    sourcePods,
		Targets:       targets,
		SourceCluster: opts.clusterName,
	})
	if err != nil {
		return err
	}
	return mgr.Add(srv)
}
