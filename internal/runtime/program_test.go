package runtime

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// A program survives JSON packed: every field of every instruction, in
// order; absent stays absent; a length that is not whole instructions, or
// no instruction at all, is refused rather than installed short.
func TestProgramJSON(t *testing.T) {
	type msg struct {
		P Program `json:"p,omitempty"`
	}
	in := msg{Program{{Code: 0x20, K: 4}, {Code: 0x15, Jt: 1, Jf: 2, K: 0xc000003e}, {Code: 0x06, K: 0x7fff0000}}}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "{\"c\"") || len(b) > 50 {
		t.Errorf("not packed: %s", b)
	}
	var out msg
	if err := json.Unmarshal(b, &out); err != nil || !reflect.DeepEqual(out, in) {
		t.Fatalf("round trip: %+v %v, want %+v", out, err, in)
	}
	if b, _ := json.Marshal(msg{}); string(b) != "{}" {
		t.Errorf("no program encodes as %s", b)
	}
	if err := json.Unmarshal([]byte(`{"p":null}`), &out); err != nil || out.P != nil {
		t.Errorf("null: %+v %v", out.P, err)
	}
	for _, bad := range []string{`{"p":"AAAA"}`, `{"p":""}`, `{"p":"not base64!"}`, `{"p":[1,2]}`} {
		if err := json.Unmarshal([]byte(bad), &out); err == nil {
			t.Errorf("%s decoded: %+v", bad, out.P)
		}
	}
}
