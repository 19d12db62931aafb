package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// KubernetesVersion is the release of the pinned control plane (make
// tools) and of the libraries Flotilla is built with (make build).
const KubernetesVersion = "v1.37.2"

// CurrentMinor is KubernetesVersion's minor, "1.37".
func CurrentMinor() string {
	v := strings.TrimPrefix(KubernetesVersion, "v")
	return v[:strings.LastIndex(v, ".")]
}

// controlPlaneBinary is the path of a control-plane binary (kube-apiserver,
// kube-controller-manager) of the cluster's minor: bin/ for the current
// one, bin/<minor>/ for an older one (make tools-versions).
func (c *Cluster) controlPlaneBinary(name string) (string, error) {
	if c.spec.Minor == "" || c.spec.Minor == CurrentMinor() {
		return filepath.Join(c.binDir, name), nil
	}
	p := filepath.Join(c.binDir, c.spec.Minor, name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("cluster %s: no %s for Kubernetes %s (make tools-versions builds it): %w", c.Name, name, c.spec.Minor, err)
	}
	return p, nil
}

// schedulerBinaryOf is the flotilla-scheduler build of a minor: make build's
// for the current one, bin/flotilla-scheduler-<minor> (make
// build-schedulers) for an older one.
func (c *Cluster) schedulerBinaryOf(minor string) (string, error) {
	if minor == "" || minor == CurrentMinor() {
		return filepath.Join(c.binDir, "flotilla-scheduler"), nil
	}
	p := filepath.Join(c.binDir, "flotilla-scheduler-"+minor)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("cluster %s: no flotilla-scheduler for Kubernetes %s (make build-schedulers builds it): %w", c.Name, minor, err)
	}
	return p, nil
}

// schedulerBinary is the build a release's scheduler image names: the
// chart tags it <version>-k8s<minor> (a tag without it is the current
// minor's), and the sandbox runs that minor's build, as a cluster would
// pull that image.
func (c *Cluster) schedulerBinary(image string) (string, error) {
	minor := ""
	tag := image[strings.LastIndex(image, ":")+1:]
	if i := strings.LastIndex(tag, "-k8s"); i >= 0 {
		minor = tag[i+len("-k8s"):]
	}
	return c.schedulerBinaryOf(minor)
}
