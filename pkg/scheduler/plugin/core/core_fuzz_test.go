package core

import (
	"encoding/json"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
)

// FuzzDecide: the allowed and denied annotations are the source's writes
// (or anyone's with update rights on the candidate). Whatever they hold,
// the target allows only on a well-formed allowance naming this very
// reservation (or every one: a pre-allowance) and source pod and no denial
// of that pod, and rejects only on
// a well-formed denial naming that source pod.
func FuzzDecide(f *testing.F) {
	const nonce, sourceUID = "a1b2c3d4e5f60718", "6b0f1d2e-0000-4000-8000-000000000001"
	ok := protocol.Allowance{SourceUID: sourceUID, Generation: 1, Nonce: nonce}.Encode()
	no := protocol.Denial{SourceUID: sourceUID, Generation: 2}.Encode()
	f.Add(nonce, sourceUID, ok, "", true)
	f.Add(nonce, sourceUID, ok, no, true)
	f.Add(nonce, sourceUID, ok, nonce, true)
	f.Add(nonce, sourceUID, "", no, false)
	f.Add(nonce, sourceUID, ok, sourceUID+"/2/x", true)
	f.Add(nonce, sourceUID, ok, "/2", true)
	f.Add("", "", "/0/", "", true)
	f.Add("", sourceUID, sourceUID+"/1/", "", true)
	f.Add("n/x", "u", "u/1/n/x", "", true)
	f.Add(nonce, sourceUID, sourceUID+"/99999999999999999999/"+nonce, "", true)
	f.Add(nonce, sourceUID, sourceUID+"/-1/"+nonce, "", true)
	f.Add(nonce, sourceUID, strings.Repeat("/", 10000), "", true)
	f.Add(nonce, sourceUID, " "+ok, "", true)
	f.Add(nonce, sourceUID, sourceUID+"/3/"+protocol.AnyReservation, "", true)
	f.Add(nonce, sourceUID, sourceUID+"/3/"+protocol.AnyReservation+"*", "", true)
	f.Add(nonce, "", "/3/"+protocol.AnyReservation, "", true)
	f.Fuzz(func(t *testing.T, nonce, uidLabel, allowed, denied string, hasAllowed bool) {
		labels := map[string]string{protocol.CandidateLabel: "true", protocol.SourceUIDLabel: uidLabel}
		annotations := map[string]string{protocol.DeniedAnnotation: denied}
		if hasAllowed {
			annotations[protocol.AllowedAnnotation] = allowed
		}
		d := Decide(nonce, labels, annotations)
		switch d.Verdict {
		case Allow:
			a, err := protocol.ParseAllowance(allowed)
			n, nerr := protocol.ParseDenial(denied)
			if !hasAllowed || err != nil || nonce == "" || (a.Nonce != nonce && a.Nonce != protocol.AnyReservation) || a.SourceUID != uidLabel || (nerr == nil && n.SourceUID == uidLabel) {
				t.Fatalf("reservation %q allowed on allowance %q (uid label %q, denied %q)", nonce, allowed, uidLabel, denied)
			}
		case Reject:
			n, err := protocol.ParseDenial(denied)
			if nonce == "" || err != nil || n.SourceUID != uidLabel || n.SourceUID == "" || d.Reason == "" {
				t.Fatalf("reservation %q rejected on denial %q with reason %q", nonce, denied, d.Reason)
			}
		case Wait:
		default:
			t.Fatalf("unknown verdict %v", d.Verdict)
		}
	})
}

// FuzzDecodeArgs: args are decoded strictly whatever the profile holds,
// and args it accepts name no field but permitTimeoutSeconds and
// topologyKeys; the keys it validates are label keys.
func FuzzDecodeArgs(f *testing.F) {
	for _, seed := range []struct{ raw, contentType string }{
		{`{"permitTimeoutSeconds":30}`, runtime.ContentTypeJSON},
		{`{}`, ""},
		{`null`, ""},
		{`{"permitTimeoutSecond":30}`, runtime.ContentTypeJSON},
		{`{"PermitTimeoutSeconds":30}`, runtime.ContentTypeJSON},
		{`{"permitTimeoutSeconds":30,"permitTimeoutSeconds":31}`, runtime.ContentTypeJSON},
		{`{"permitTimeoutSeconds":1e400}`, runtime.ContentTypeJSON},
		{`{"permitTimeoutSeconds":"30"}`, runtime.ContentTypeJSON},
		{"permitTimeoutSeconds: 30\n", runtime.ContentTypeYAML},
		{"permitTimeoutSeconds: 30\npermitTimeoutSeconds: 31\n", runtime.ContentTypeYAML},
		{"a: &a [x, x, x, x]\nb: &b [*a, *a, *a, *a]\nc: &c [*b, *b, *b, *b]\nd: [*c, *c, *c, *c]\n", runtime.ContentTypeYAML},
		{"permitTimeoutSeconds: 30", runtime.ContentTypeProtobuf},
		{`{"topologyKeys":["topology.kubernetes.io/zone"]}`, runtime.ContentTypeJSON},
		{"topologyKeys: [a, a, 'b c', \"\"]\n", runtime.ContentTypeYAML},
		{`{"topologyKeys":null}`, runtime.ContentTypeJSON},
		{strings.Repeat("[", 10000), runtime.ContentTypeJSON},
		{strings.Repeat("- ", 10000), runtime.ContentTypeYAML},
	} {
		f.Add(seed.raw, seed.contentType)
	}
	f.Fuzz(func(t *testing.T, raw, contentType string) {
		args, err := DecodeArgs(&runtime.Unknown{Raw: []byte(raw), ContentType: contentType})
		if err != nil {
			return
		}
		_, _ = args.PermitTimeout()
		if keys, err := args.Topology(); err == nil {
			for _, k := range keys {
				if !protocol.ValidTopologyKey(k) {
					t.Fatalf("args %q accepted the topology key %q", raw, k)
				}
			}
		}
		if raw == "" {
			return
		}
		js := []byte(raw)
		if contentType == runtime.ContentTypeYAML {
			if js, err = yaml.YAMLToJSON(js); err != nil {
				t.Fatalf("args %q accepted, but they are not YAML: %v", raw, err)
			}
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(js, &fields); err != nil {
			t.Fatalf("args %q (%s) accepted, but they are not an object: %v", raw, contentType, err)
		}
		for name := range fields {
			if name != "permitTimeoutSeconds" && name != "topologyKeys" {
				t.Fatalf("args %q (%s) accepted with field %q", raw, contentType, name)
			}
		}
	})
}

// FuzzReservationEnded: the state annotation is the plugin's own write,
// but any client with update rights on the candidate can change it; a
// queueing hint never panics and requeues only on a new Unreserved state.
func FuzzReservationEnded(f *testing.F) {
	f.Add(`{"phase":"Reserved","nonce":"n1"}`, `{"phase":"Unreserved","nonce":"n1","reason":"denied"}`)
	f.Add(`{"phase":"Unreserved","nonce":"n1"}`, `{"phase":"Unreserved","nonce":"n1"}`)
	f.Add(``, `{"phase":"Unreserved"`)
	f.Add(``, `{"phase":"Unreserved","phase":"Reserved"}`)
	f.Add(``, strings.Repeat(`{"a":`, 5000))
	f.Fuzz(func(t *testing.T, before, after string) {
		pod := func(state string) *v1.Pod {
			return &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "uid", Annotations: map[string]string{protocol.StateAnnotation: state}}}
		}
		if !ReservationEnded(pod(before), pod(before), pod(after)) {
			return
		}
		var s protocol.State
		if before == after || json.Unmarshal([]byte(after), &s) != nil || s.Phase != protocol.PhaseUnreserved {
			t.Fatalf("requeued on state %q after %q", after, before)
		}
	})
}
