package vnode

import (
	"os"
	"regexp"
	"testing"
)

// TestKubeletVersionIsTheBuild: a virtual node reports the Kubernetes
// release the agent is built against (client-go v0.X.Y is Kubernetes
// v1.X.Y, as go.mod pins it); a move of the libraries that forgets the
// constant fails here.
func TestKubeletVersionIsTheBuild(t *testing.T) {
	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*k8s\.io/client-go v0\.(\S+)$`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("go.mod requires no k8s.io/client-go")
	}
	if want := "v1." + string(m[1]) + "-vk-flotilla"; kubeletVersion != want {
		t.Errorf("kubeletVersion = %q, want %q", kubeletVersion, want)
	}
}
