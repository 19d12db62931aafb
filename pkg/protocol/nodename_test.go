package protocol

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestVirtualNodeName(t *testing.T) {
	long := strings.Repeat("n", 60)
	for _, tt := range []struct {
		namespace, target, want string
	}{
		// A ClusterTarget's node keeps its name: pods are bound to it.
		{"", "c2", "flotilla-c2"},
		{"", "a-b", "flotilla-a-b"},
		{"", "eu.west", "flotilla-eu.west"},
		{"team", "c2", "flotilla.team.c2"},
		{"a", "b", "flotilla.a.b"},
		{"a", "x-y", "flotilla.a.x-y"},
		{"a-x", "y", "flotilla.a-x.y"},
		{"a", "b.c", "flotilla.a.b.c"},
		{"", strings.Repeat("c", 60), "flotilla-" + strings.Repeat("c", 43) + "-a7b8246dd6"},
		{long, "t", "flotilla." + strings.Repeat("n", 37) + "-a5a17365de4a83d8"},
	} {
		if got := VirtualNodeName(tt.namespace, tt.target); got != tt.want {
			t.Errorf("VirtualNodeName(%q, %q) = %q, want %q", tt.namespace, tt.target, got, tt.want)
		}
	}
}

// The pairs of the issue, and others a tenant could pick to land on a
// node that is not its own: each pair names two nodes.
func TestVirtualNodeNamesOfTrickyPairsDiffer(t *testing.T) {
	n52 := strings.Repeat("n", 52)
	for _, tt := range []struct {
		why    string
		a, b   [2]string // namespace, name
		legacy bool      // the old form gave both one node
	}{
		{"x-y of a, y of a-x", [2]string{"a", "x-y"}, [2]string{"a-x", "y"}, true},
		{"b of a, ClusterTarget a-b", [2]string{"a", "b"}, [2]string{"", "a-b"}, true},
		{"b.c of a, c of a.b (no namespace has a dot)", [2]string{"a", "b.c"}, [2]string{"a-b", "c"}, false},
		{"a Target named as a ClusterTarget's node", [2]string{"a", "b"}, [2]string{"", "a.b"}, false},
		{"ClusterTarget named as a Target's node", [2]string{"", ".a.b"}, [2]string{"a", "b"}, false},
		{"dots and dashes swapped", [2]string{"a", "b-c"}, [2]string{"a", "b.c"}, false},
		{"hashed long namespace, one character apart", [2]string{n52 + "a", "t"}, [2]string{n52 + "b", "t"}, false},
		{"hashed, the cut falls inside the namespace", [2]string{n52, "x"}, [2]string{n52 + "x", ""}, false},
		{"a short name spelled as another's hashed form", [2]string{"a", "b"}, [2]string{"a", strings.TrimPrefix(VirtualNodeName("a", strings.Repeat("b", 60)), "flotilla.a.")}, false},
		{"a short name spelled as another's hashed form, dot for dash", [2]string{"a", strings.Repeat("b", 60)},
			[2]string{"a", strings.Replace(strings.TrimPrefix(VirtualNodeName("a", strings.Repeat("b", 60)), "flotilla.a-"), "-", ".", 1)}, false},
	} {
		na, nb := VirtualNodeName(tt.a[0], tt.a[1]), VirtualNodeName(tt.b[0], tt.b[1])
		if na == nb {
			t.Errorf("%s: %v and %v share node %q", tt.why, tt.a, tt.b, na)
		}
		if tt.legacy && legacyOrCluster(tt.a) != legacyOrCluster(tt.b) {
			t.Errorf("%s: the old form gave them one node, this test's premise", tt.why)
		}
	}
}

func legacyOrCluster(t [2]string) string {
	if t[0] == "" {
		return VirtualNodeName("", t[1])
	}
	return LegacyVirtualNodeName(t[0], t[1])
}

// Every pair of distinct targets built from the characters that make names
// ambiguous, at lengths on both sides of the hashing threshold, gets two
// nodes, and each is a node name the API server takes.
func TestVirtualNodeNamesAreOneToOne(t *testing.T) {
	var pieces []string
	var grow func(prefix string, n int)
	grow = func(prefix string, n int) {
		if prefix != "" {
			pieces = append(pieces, prefix)
		}
		if n == 0 {
			return
		}
		for _, c := range []string{"a", "b", "-", "."} {
			grow(prefix+c, n-1)
		}
	}
	grow("", 4)
	var namespaces, names []string
	for _, p := range pieces {
		for _, pad := range []string{"", strings.Repeat("p", 40), strings.Repeat("p", 50), strings.Repeat("p", 53)} {
			if len(validation.IsDNS1123Label(p+pad)) == 0 {
				namespaces = append(namespaces, p+pad)
			}
			if len(validation.IsDNS1123Subdomain(pad+p)) == 0 {
				names = append(names, pad+p)
			}
		}
	}
	seen := map[string][2]string{}
	add := func(ns, name string) {
		node := VirtualNodeName(ns, name)
		if errs := validation.IsDNS1123Subdomain(node); len(errs) > 0 || len(node) > 63 {
			t.Fatalf("VirtualNodeName(%q, %q) = %q: not a node name: %v", ns, name, node, errs)
		}
		if errs := validation.IsValidLabelValue(node); len(errs) > 0 {
			t.Fatalf("VirtualNodeName(%q, %q) = %q: not a hostname label value: %v", ns, name, node, errs)
		}
		if other, ok := seen[node]; ok {
			t.Fatalf("%v and %v share node %q", other, [2]string{ns, name}, node)
		}
		seen[node] = [2]string{ns, name}
	}
	for _, name := range names {
		if len("flotilla-"+name) <= 63 { // see FuzzVirtualNodeName for hashed ClusterTargets
			add("", name)
		}
	}
	for _, ns := range namespaces {
		for _, name := range names {
			add(ns, name)
		}
	}
	if len(seen) < 100000 {
		t.Fatalf("only %d targets tried", len(seen))
	}
}

// Two distinct targets, one of them at least namespaced (what a tenant
// makes), never share a node; the node name is always valid.
func FuzzVirtualNodeName(f *testing.F) {
	f.Add("a", "x-y", "a-x", "y")
	f.Add("a", "b", "", "a-b")
	f.Add("a", "b.c", "a.b", "c")
	f.Add(strings.Repeat("n", 53), "t", strings.Repeat("n", 53), "t.u")
	f.Fuzz(func(t *testing.T, ns1, name1, ns2, name2 string) {
		valid := func(ns, name string) bool {
			return len(validation.IsDNS1123Subdomain(name)) == 0 && (ns == "" || len(validation.IsDNS1123Label(ns)) == 0)
		}
		if !valid(ns1, name1) || !valid(ns2, name2) {
			return
		}
		a, b := VirtualNodeName(ns1, name1), VirtualNodeName(ns2, name2)
		for _, n := range []string{a, b} {
			if len(validation.IsDNS1123Subdomain(n)) > 0 || len(validation.IsValidLabelValue(n)) > 0 {
				t.Fatalf("%q is not a node name", n)
			}
		}
		if (ns1 != ns2 || name1 != name2) && (ns1 != "" || ns2 != "") && a == b {
			t.Fatalf("%s/%s and %s/%s share node %q", ns1, name1, ns2, name2, a)
		}
	})
}

func TestNodeOwner(t *testing.T) {
	for _, o := range []NodeOwner{{Name: "a-b"}, {Namespace: "a", Name: "b"}, {Namespace: "a", Name: "b.c"}} {
		got, err := ParseNodeOwner(o.String())
		if err != nil || got != o {
			t.Errorf("ParseNodeOwner(%q) = %v, %v; want %v", o.String(), got, err, o)
		}
		if OwnerOfTargetName(o.TargetName()) != o {
			t.Errorf("OwnerOfTargetName(%q) = %v, want %v", o.TargetName(), OwnerOfTargetName(o.TargetName()), o)
		}
	}
	for _, bad := range []string{"", "ClusterTarget/", "Target/a", "Target/a/b/c", "Node/x"} {
		if _, err := ParseNodeOwner(bad); err == nil {
			t.Errorf("ParseNodeOwner(%q) took it", bad)
		}
	}
}
