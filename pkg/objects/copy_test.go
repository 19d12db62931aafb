package objects

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/client-go/rest"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/target"
)

func TestClassify(t *testing.T) {
	tg, err := target.New(target.Config{Name: "t1", REST: &rest.Config{Host: "https://127.0.0.1:1"}, SourceCluster: "src"})
	if err != nil {
		t.Fatal(err)
	}
	cm := schema.GroupResource{Resource: "configmaps"}
	tests := []struct {
		name     string
		err      error
		refused  bool
		inTheWay bool
	}{
		{name: "written", err: nil},
		{name: "gone: the caller makes it again", err: apierrors.NewNotFound(cm, "cfg")},
		// A failed JSON-patch test and the admission policy's denial.
		{name: "someone else's object", err: apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "cfg", nil), refused: true, inTheWay: true},
		{name: "not allowed to write", err: apierrors.NewForbidden(cm, "cfg", errors.New("RBAC")), refused: true},
		{name: "unreachable: retried", err: fmt.Errorf("dial tcp: connection refused")},
	}
	c := &Copier{SourceCluster: "src"}
	copyName := protocol.CopyName("src", "cfg")
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := c.classify(tg, "shop", ConfigMap, "cfg", tc.err)
			var refused *RefusedError
			if errors.As(got, &refused) != tc.refused {
				t.Fatalf("classify(%v) = %v, refused want %v", tc.err, got, tc.refused)
			}
			if tc.refused && (refused.InTheWay != tc.inTheWay || !strings.Contains(got.Error(), "target t1") || !strings.Contains(got.Error(), "ConfigMap shop/"+copyName) || !strings.Contains(got.Error(), " cfg") || refused.Name != copyName) {
				t.Errorf("classify(%v) = %q: want target, copy, object and in the way %v", tc.err, got, tc.inTheWay)
			}
			if tc.err == nil && got != nil || apierrors.IsNotFound(tc.err) && !apierrors.IsNotFound(got) {
				t.Errorf("classify(%v) = %v: want it passed through", tc.err, got)
			}
		})
	}
}

func TestOwnersRememberedPerCopyAndCandidate(t *testing.T) {
	tg, err := target.New(target.Config{Name: "t1", REST: &rest.Config{Host: "https://127.0.0.1:1"}, SourceCluster: "src"})
	if err != nil {
		t.Fatal(err)
	}
	c := &Copier{owned: cache.NewExpiring()}
	a, b := candidatePod("a"), candidatePod("b")
	c.remember(tg, "shop", Secret, "db", []*corev1.Pod{a})
	if !c.remembered(tg, "shop", Secret, "db", []*corev1.Pod{a}) {
		t.Error("a written owner is not remembered")
	}
	for _, tc := range []struct {
		kind   Kind
		name   string
		owners []*corev1.Pod
	}{{Secret, "db", []*corev1.Pod{a, b}}, {ConfigMap, "db", []*corev1.Pod{a}}, {Secret, "other", []*corev1.Pod{a}}} {
		if c.remembered(tg, "shop", tc.kind, tc.name, tc.owners) {
			t.Errorf("%s %s with %d owners counted as written", tc.kind, tc.name, len(tc.owners))
		}
	}
}

func TestMissingErrorNamesEachObject(t *testing.T) {
	err := &MissingError{Namespace: "shop", Refs: []Ref{{Kind: Secret, Name: "db"}, {Kind: ConfigMap, Name: "cfg"}}}
	for _, want := range []string{"Secret shop/db", "ConfigMap shop/cfg"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not name %s", err, want)
		}
	}
}

func candidatePod(uid string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-" + uid, UID: types.UID(uid)}}
}

// TestCopiesAreNamedForTheirSource: a copy carries the name only this
// source's copies carry (the one its candidates reference), and the
// labels that make it this source's.
func TestCopiesAreNamedForTheirSource(t *testing.T) {
	c := &Copier{SourceCluster: "src"}
	m := c.meta(&original{Kind: Secret, Name: "db"}, "shop", []*corev1.Pod{candidatePod("a")})
	if m.Name != protocol.CopyName("src", "db") || !strings.HasPrefix(m.Name, protocol.CopyNamePrefix("src")) || m.Namespace != "shop" {
		t.Errorf("the copy of Secret db is %s/%s", m.Namespace, m.Name)
	}
	if m.Labels[protocol.CopyLabel] != "true" || m.Labels[protocol.SourceClusterLabel] != "src" || len(m.OwnerReferences) != 1 {
		t.Errorf("the copy's metadata: %+v", m)
	}
}

// TestCopyType: a copy never has a type the target's controllers act on,
// or that the invitation's policy refuses.
func TestCopyType(t *testing.T) {
	for in, want := range map[corev1.SecretType]corev1.SecretType{
		corev1.SecretTypeServiceAccountToken: corev1.SecretTypeOpaque,
		corev1.SecretTypeBootstrapToken:      corev1.SecretTypeOpaque,
		corev1.SecretTypeOpaque:              corev1.SecretTypeOpaque,
		corev1.SecretTypeTLS:                 corev1.SecretTypeTLS,
		corev1.SecretTypeDockerConfigJson:    corev1.SecretTypeDockerConfigJson,
		"":                                   "",
	} {
		if got := copyType(in); got != want {
			t.Errorf("copyType(%q) = %q, want %q", in, got, want)
		}
	}
}
