package protocol

import (
	"encoding/json"
	"strings"
	"testing"
)

// The annotations below are written by a peer (a source writes the
// allowance a target's scheduler reads; a target writes the state the
// source reads) or read back by the agent that wrote them (the election).
// Whatever they hold, parsing returns an error or a value that encodes
// back to itself; it never panics.

func FuzzParseElection(f *testing.F) {
	for _, seed := range []string{
		"", "0//", "3/c2/abc", "5/shop/eu/n", "9223372036854775807/t/n",
		"-1/a/b", "x/y/z", "1/c2", "/", "//", "1///", "+1/t/n", "01/t/n",
		"99999999999999999999/t/n", "1/" + strings.Repeat("/", 1000) + "n",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		e, err := ParseElection(v)
		if err != nil {
			return
		}
		if e.Generation < 0 {
			t.Fatalf("ParseElection(%q) accepted a negative generation: %+v", v, e)
		}
		if strings.Contains(e.Nonce, "/") {
			t.Fatalf("ParseElection(%q) gave a nonce with a '/': %+v", v, e)
		}
		if v != "" && len(e.Target)+len(e.Nonce) >= len(v) {
			t.Fatalf("ParseElection(%q) gave more than it read: %+v", v, e)
		}
		back, err := ParseElection(e.Encode())
		if err != nil || back != e {
			t.Fatalf("ParseElection(%q) = %+v, which encodes as %q and parses back as %+v, %v", v, e, e.Encode(), back, err)
		}
	})
}

// FuzzElectionEncode checks the other direction: every election the agent
// may write (a valid nonce, a target of any name) reads back as written.
func FuzzElectionEncode(f *testing.F) {
	f.Add(int64(0), "", "")
	f.Add(int64(3), "c2", "a1b2c3d4e5f60718")
	f.Add(int64(5), "shop/eu", "n")
	f.Add(int64(1), "t", "a/b")
	f.Add(int64(1), "t/", "")
	f.Fuzz(func(t *testing.T, gen int64, target, nonce string) {
		if gen < 0 || (nonce != "" && !ValidNonce(nonce)) || (target == "" && nonce != "") {
			return
		}
		e := Election{Generation: gen, Target: target, Nonce: nonce}
		back, err := ParseElection(e.Encode())
		if err != nil || back != e {
			t.Fatalf("%+v encodes as %q and parses back as %+v, %v", e, e.Encode(), back, err)
		}
	})
}

func FuzzParseAllowance(f *testing.F) {
	for _, seed := range []string{
		"", "uid-1/7/n1", "uid//n", "uid/x/n", "/1/n", "uid/1/", "u/1/n/with/slashes",
		"u/-1/n", "u/+1/n", "u/99999999999999999999/n", "u/1/" + strings.Repeat("a", 4096),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		a, err := ParseAllowance(v)
		if err != nil {
			return
		}
		if a.SourceUID == "" || a.Nonce == "" || strings.Contains(a.SourceUID, "/") {
			t.Fatalf("ParseAllowance(%q) accepted %+v", v, a)
		}
		back, err := ParseAllowance(a.Encode())
		if err != nil || back != a {
			t.Fatalf("ParseAllowance(%q) = %+v, which encodes as %q and parses back as %+v, %v", v, a, a.Encode(), back, err)
		}
	})
}

// FuzzParseDenial is the denial the source writes on a candidate it will
// not elect now, as the target's plugin reads it: an accepted denial names
// a source pod and a generation ≥ 0, and encodes back to itself.
func FuzzParseDenial(f *testing.F) {
	for _, seed := range []string{
		"", "uid-1/7", "uid/", "/1", "uid/x", "uid/1/n", "u/-1", "u/+1", "u/99999999999999999999", strings.Repeat("u", 4096) + "/1",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d, err := ParseDenial(v)
		if err != nil {
			return
		}
		if d.SourceUID == "" || d.Generation < 0 || strings.Contains(d.SourceUID, "/") {
			t.Fatalf("ParseDenial(%q) accepted %+v", v, d)
		}
		back, err := ParseDenial(d.Encode())
		if err != nil || back != d {
			t.Fatalf("ParseDenial(%q) = %+v, which encodes as %q and parses back as %+v, %v", v, d, d.Encode(), back, err)
		}
	})
}

// FuzzState is the state annotation a target's scheduler writes, as the
// source reads it: JSON that decodes either fails or survives a round trip.
func FuzzState(f *testing.F) {
	for _, seed := range []string{
		`{"phase":"Reserved","nonce":"a1b2c3d4e5f60718","node":"n1","score":42}`,
		`{"phase":"Unreserved","nonce":"n","reason":"permit timed out"}`,
		`{"phase":"Bound","nonce":"n","node":"n1"}`,
		`{}`, `null`, `[]`, `"Reserved"`, `{"phase":1}`, `{"score":1e400}`, `{"score":-9223372036854775808}`,
		`{"phase":"Reserved","phase":"Bound"}`, `{"nonce":"a/b"}`, `{"phase":"\u0000"}`,
		`{"phase":"Reserved","nonce":"` + strings.Repeat("a", 1<<16) + `"}`,
		strings.Repeat("[", 100000),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		var s State
		if json.Unmarshal([]byte(raw), &s) != nil {
			return
		}
		out, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("state %+v decoded from %q does not encode: %v", s, raw, err)
		}
		var back State
		if err := json.Unmarshal(out, &back); err != nil || !sameState(back, s) {
			t.Fatalf("state %+v encodes as %s and decodes as %+v, %v", s, out, back, err)
		}
		if s.Nonce != "" && ValidNonce(s.Nonce) && strings.Contains(s.Nonce, "/") {
			t.Fatalf("ValidNonce accepted %q, which an election record cannot carry", s.Nonce)
		}
	})
}
