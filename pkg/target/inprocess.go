package target

import (
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// inProcessHost stands for the API server of a target reached through a
// clientset given to NewWithClient: a name that never resolves, so that a
// part of the Target that still dials (the ClusterSummary watch, exec
// streams) fails plainly instead of reaching some other server.
const inProcessHost = "https://flotilla-in-process.invalid"

// NewWithClient prepares a target whose clientset is client instead of
// one built from c.REST: for tests, which give it a fake clientset
// (k8s.io/client-go/kubernetes/fake), and for in-process callers that hold
// a clientset of the target already. Every call the Target makes through
// its clientset goes to client: its candidates (created, watched by the
// informers Start starts, annotated, read, revoked and deleted), the probe
// and the token renewal.
//
// The ClusterSummary watch and the streams of RESTConfig use no
// clientset: they still connect with c.REST, which may be nil when they
// are not used (they then fail to connect).
func NewWithClient(c Config, client kubernetes.Interface) (*Target, error) {
	if client == nil {
		return nil, fmt.Errorf("target %s: no client", c.Name)
	}
	if c.REST == nil {
		c.REST = &rest.Config{Host: inProcessHost}
	}
	t, err := New(c)
	if err != nil {
		return nil, err
	}
	t.client = client
	return t, nil
}
