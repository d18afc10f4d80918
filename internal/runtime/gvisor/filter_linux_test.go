package gvisor

import (
	"encoding/base64"
	"slices"
	"testing"

	"github.com/airlock-dev/airlock/internal/runtime"
)

// TestFilterEncoding: the program the supervisor hands to the init decodes
// to the same instructions, and a truncated or empty one is refused.
func TestFilterEncoding(t *testing.T) {
	prog := []runtime.SockFilter{{Code: 0x20, K: 4}, {Code: 0x15, Jt: 1, Jf: 2, K: 0xc000003e}, {Code: 0x6, K: 0x7fff0000}}
	raw := encodeFilter(prog)
	if len(raw) != 8*len(prog) {
		t.Fatalf("%d bytes for %d instructions", len(raw), len(prog))
	}
	got, err := decodeFilter(raw)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(prog) {
		t.Fatalf("decoded %d instructions, want %d", len(got), len(prog))
	}
	for i, in := range prog {
		if g := got[i]; g.Code != in.Code || g.Jt != in.Jt || g.Jf != in.Jf || g.K != in.K {
			t.Fatalf("instruction %d: %+v, want %+v", i, g, in)
		}
	}
	for _, bad := range [][]byte{nil, raw[:len(raw)-1]} {
		if _, err := decodeFilter(bad); err == nil {
			t.Fatalf("%d bytes decoded", len(bad))
		}
	}
}

// TestArgvEncoding: a one-shot command's arguments travel as given (empty
// ones, spaces, newlines); a value without the final NUL or not base64 is
// refused.
func TestArgvEncoding(t *testing.T) {
	for _, argv := range [][]string{{"true"}, {"sh", "-c", "echo a  b\n", "", "x"}, {""}, nil} {
		got, err := decodeArgv(EncodeArgv(argv))
		if err != nil || !slices.Equal(got, argv) {
			t.Errorf("%q: got %q, %v", argv, got, err)
		}
	}
	for _, bad := range []string{base64.StdEncoding.EncodeToString([]byte("true")), "not base64!"} {
		if got, err := decodeArgv(bad); err == nil {
			t.Errorf("%q: decoded as %q, want an error", bad, got)
		}
	}
}
