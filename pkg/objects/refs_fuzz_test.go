package objects

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// FuzzOf: the spec is the source pod's saved spec, which its owner wrote.
// Whatever it references, Of lists each ConfigMap and Secret once, named,
// sorted, and only objects the spec names somewhere; a reference is
// optional only when every use of the object is.
func FuzzOf(f *testing.F) {
	for _, seed := range []string{
		`{"volumes":[{"name":"v","configMap":{"name":"cm","optional":true}},{"name":"s","secret":{"secretName":"sec"}}],` +
			`"containers":[{"name":"c","env":[{"name":"E","valueFrom":{"configMapKeyRef":{"name":"cm","key":"k"}}}],` +
			`"envFrom":[{"secretRef":{"name":"sec","optional":true}}]}],"imagePullSecrets":[{"name":"pull"},{"name":""}]}`,
		`{"volumes":[{"name":"p","projected":{"sources":[{"configMap":{"name":"a"},"secret":{"name":"a"}}]}}]}`,
		`{"ephemeralContainers":[{"name":"d","env":[{"name":"X","valueFrom":{"secretKeyRef":{"name":"s","key":"k","optional":false}}}]}]}`,
		`{"volumes":[{"name":"v","configMap":{"name":"x"},"secret":{"secretName":"x"}}]}`,
		`{"initContainers":[{"envFrom":[{"configMapRef":{"name":"x"},"secretRef":{"name":"x"}}]}]}`,
		`{}`, `null`, `{"volumes":null}`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		var spec corev1.PodSpec
		if json.Unmarshal([]byte(raw), &spec) != nil {
			return
		}
		refs := Of(&spec)
		named, err := json.Marshal(spec)
		if err != nil {
			t.Fatalf("spec %q does not encode: %v", raw, err)
		}
		for i, r := range refs {
			if r.Name == "" || (r.Kind != ConfigMap && r.Kind != Secret) {
				t.Fatalf("Of(%q) lists %+v", raw, r)
			}
			if i > 0 && (refs[i-1].Kind > r.Kind || refs[i-1].Kind == r.Kind && refs[i-1].Name >= r.Name) {
				t.Fatalf("Of(%q) is not sorted or lists an object twice: %v", raw, refs)
			}
			quoted, _ := json.Marshal(r.Name)
			if !strings.Contains(string(named), string(quoted)) {
				t.Fatalf("Of(%q) lists %s, which the spec does not name", raw, r)
			}
		}
		again := Of(&spec)
		if len(again) != len(refs) {
			t.Fatalf("Of(%q) is not deterministic: %v then %v", raw, refs, again)
		}
		for i := range refs {
			if again[i] != refs[i] {
				t.Fatalf("Of(%q) is not deterministic: %v then %v", raw, refs, again)
			}
		}
	})
}
