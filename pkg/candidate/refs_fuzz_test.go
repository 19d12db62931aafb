package candidate

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// FuzzReferenceCopies: the saved spec is the source pod's owner's. Whatever
// it names, the candidate Build makes for another cluster names only the
// source's copies (what the target's policy admits), each a valid name;
// the saved spec stays as it was.
func FuzzReferenceCopies(f *testing.F) {
	for _, seed := range []string{
		`{"volumes":[{"name":"v","configMap":{"name":"cm"},"secret":{"secretName":"s"}},{"name":"p","projected":{"sources":[{"configMap":{"name":"a"},"secret":{"name":"b"}}]}}],` +
			`"containers":[{"name":"c","env":[{"name":"E","valueFrom":{"configMapKeyRef":{"name":"cm","key":"k"},"secretKeyRef":{"name":"s","key":"k"}}}],` +
			`"envFrom":[{"configMapRef":{"name":"x"},"secretRef":{"name":"y"}}]}],"imagePullSecrets":[{"name":"pull"},{"name":""}]}`,
		`{"initContainers":[{"envFrom":[{"secretRef":{"name":"Not_Valid"}}]}],"ephemeralContainers":[{"name":"d","env":[{"name":"X","valueFrom":{"secretKeyRef":{"name":"` + strings.Repeat("a", 250) + `"}}}]}]}`,
		`{}`,
	} {
		f.Add(seed)
	}
	prefix := protocol.CopyNamePrefix("c1")
	f.Fuzz(func(t *testing.T, raw string) {
		var spec corev1.PodSpec
		if json.Unmarshal([]byte(raw), &spec) != nil {
			return
		}
		source := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", UID: "u"}}
		setSpec(t, source, spec)
		before := source.DeepCopy()
		c, err := Build(source, "c1", "t1", "shop", false, false)
		if err != nil {
			return
		}
		VisitObjectReferences(&c.Spec, func(r ObjectReference) {
			if *r.Name == "" {
				return
			}
			if !strings.HasPrefix(*r.Name, prefix) || len(validation.IsDNS1123Subdomain(*r.Name)) > 0 {
				t.Fatalf("the candidate of %s names %s %q", raw, r.Kind, *r.Name)
			}
		})
		if !equality.Semantic.DeepEqual(source, before) {
			t.Fatalf("Build changed the source pod")
		}
	})
}
