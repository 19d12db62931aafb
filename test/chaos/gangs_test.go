package chaos

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// TestGangWatch: a member that binds while fewer than its gang's size of
// live members stand elected is a breach; members deleted count for
// nothing.
func TestGangWatch(t *testing.T) {
	member := func(name string, elected bool, node string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{protocol.PodGroupLabel: "g"}, Annotations: map[string]string{}}}
		if elected {
			p.Annotations[protocol.ElectionAnnotation] = protocol.Election{Generation: 1, Target: "t", Nonce: "n-" + name}.Encode()
		}
		p.Spec.NodeName = node
		return p
	}
	g := &GangWatch{size: map[string]int{"g": 3}, members: map[string]map[string]gangMemberSeen{}, bound: map[string]string{}}
	g.observe(member("a", true, ""), false)
	g.observe(member("b", true, ""), false)
	g.observe(member("c", true, ""), false)
	g.observe(member("a", true, "flotilla-t"), false)
	if b := g.Breach(); b != "" {
		t.Fatalf("a whole gang's member bound: breach %q", b)
	}
	if p := g.Partial(); !strings.Contains(p, "runs 1 of its 3") {
		t.Fatalf("one of three bound: partial %q", p)
	}
	// c is deleted; its replacement d is elected; b binds with two live
	// members elected (b and d) of three.
	g.observe(member("c", true, ""), true)
	g.observe(member("d", true, ""), false)
	g.observe(member("b", true, "flotilla-t"), false)
	if b := g.Breach(); b != "" {
		t.Fatalf("b bound beside a, d elected and a bound: breach %q", b)
	}
	// a and b end (deleted): d and e elected are two of three, and f
	// binds unelected.
	g.observe(member("a", true, "flotilla-t"), true)
	g.observe(member("b", true, "flotilla-t"), true)
	g.observe(member("e", true, ""), false)
	g.observe(member("f", false, "flotilla-t"), false)
	if b := g.Breach(); !strings.Contains(b, "f bound") || !strings.Contains(b, "while 2 of") {
		t.Fatalf("f bound with two of three elected: breach %q", b)
	}
	if p := g.Partial(); !strings.Contains(p, "runs 1 of its 3") {
		t.Fatalf("f alone bound of e, d, f: partial %q", p)
	}
	g.observe(member("d", true, "flotilla-t"), false)
	g.observe(member("e", true, "flotilla-t"), false)
	if p := g.Partial(); p != "" {
		t.Fatalf("d, e, f bound: partial %q", p)
	}
	if GangOf(&corev1.Pod{}) != "" {
		t.Error("a pod of no gang has a gang")
	}
}
