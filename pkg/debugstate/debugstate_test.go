package debugstate

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestBounded(t *testing.T) {
	for name, tc := range map[string]struct {
		items          []int
		limit          int
		total, omitted int
		kept           int
	}{
		"empty is [] not null": {items: nil, limit: 3},
		"under the limit":      {items: []int{1, 2}, limit: 3, total: 2, kept: 2},
		"at the limit":         {items: []int{1, 2, 3}, limit: 3, total: 3, kept: 3},
		"over the limit":       {items: []int{1, 2, 3, 4, 5}, limit: 3, total: 5, omitted: 2, kept: 3},
		"default limit":        {items: make([]int, DefaultLimit+7), total: DefaultLimit + 7, omitted: 7, kept: DefaultLimit},
	} {
		t.Run(name, func(t *testing.T) {
			l := Bounded(tc.items, tc.limit)
			if l.Total != tc.total || l.Omitted != tc.omitted || len(l.Items) != tc.kept || l.Items == nil {
				t.Errorf("Bounded(%d items, %d) = total %d, omitted %d, %d kept (nil %t); want %d, %d, %d",
					len(tc.items), tc.limit, l.Total, l.Omitted, len(l.Items), l.Items == nil, tc.total, tc.omitted, tc.kept)
			}
			if tc.kept > 0 && l.Items[0] != tc.items[0] {
				t.Errorf("the first items are not the ones kept")
			}
		})
	}
}

func TestHandler(t *testing.T) {
	r := NewRegistry()
	r.Register("targets", func() any { return []string{"a", "b"} })
	r.Register("broken", func() any { return errors.New("cache not synced") })
	r.Register("panics", func() any { panic("nil map") })
	r.Register("leader", func() any { return true })

	get := func(t *testing.T, url string) (int, string) {
		t.Helper()
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, url, nil))
		return w.Code, w.Body.String()
	}

	code, body := get(t, Path)
	if code != http.StatusOK {
		t.Fatalf("GET %s = %d: %s", Path, code, body)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, body)
	}
	if got["leader"] != true || len(got["targets"].([]any)) != 2 {
		t.Errorf("providers' answers missing: %s", body)
	}
	if e := got["broken"].(map[string]any)["error"]; e != "cache not synced" {
		t.Errorf("an error is shown as its message, got %v", e)
	}
	if e, _ := got["panics"].(map[string]any)["error"].(string); !strings.Contains(e, "nil map") {
		t.Errorf("a panicking provider is shown as an error, got %v", got["panics"])
	}
	// Keys in sorted order, the same answer twice.
	if i, j := strings.Index(body, `"broken"`), strings.Index(body, `"targets"`); i < 0 || j < i {
		t.Errorf("keys not sorted:\n%s", body)
	}
	if _, again := get(t, Path); again != body {
		t.Errorf("two answers differ:\n%s\n%s", body, again)
	}

	_, body = get(t, Path+"?name=leader,nothing")
	got = nil
	_ = json.Unmarshal([]byte(body), &got)
	if len(got) != 2 || got["leader"] != true || got["nothing"] == nil {
		t.Errorf("?name= answers only those named (and says which are unknown): %s", body)
	}

	w := httptest.NewRecorder()
	r.ServeHTTP(w, httptest.NewRequest(http.MethodPost, Path, nil))
	if w.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST = %d, want 405", w.Code)
	}
}
