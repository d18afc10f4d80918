package errdefs

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

// Short input is quoted exactly as %q does; long input is cut to its start
// with its length, never split inside a character.
func TestQuote(t *testing.T) {
	for _, s := range []string{"", "sb-0123456789abcdef", "a\"b\x00c", strings.Repeat("x", MaxEcho)} {
		if got, want := Quote(s), fmt.Sprintf("%q", s); got != want {
			t.Errorf("Quote(%q) = %s, want %s", s, got, want)
		}
	}
	long := "sb-" + strings.Repeat("a", 9997)
	got := Quote(long)
	if want := fmt.Sprintf("%q... (10000 bytes)", long[:MaxEcho]); got != want {
		t.Errorf("Quote(10000 bytes) = %s, want %s", got, want)
	}
	// A two-byte character straddling the cut is left out whole.
	multi := strings.Repeat("x", MaxEcho-1) + "é" + strings.Repeat("y", 100)
	got = Quote(multi)
	if want := fmt.Sprintf("%q... (%d bytes)", strings.Repeat("x", MaxEcho-1), len(multi)); got != want {
		t.Errorf("Quote(multi-byte at the cut) = %s, want %s", got, want)
	}
}

// Clip leaves messages up to MaxMessage alone and cuts longer ones to
// MaxMessage bytes plus a note of what was left out.
func TestClip(t *testing.T) {
	short := strings.Repeat("m", MaxMessage)
	if Clip(short) != short {
		t.Error("Clip changed a message of MaxMessage bytes")
	}
	long := "sandbox: " + strings.Repeat("é", 5000)
	got := Clip(long)
	if !strings.HasPrefix(got, "sandbox: ééé") || len(got) > MaxMessage+64 || !utf8.ValidString(got) {
		t.Errorf("Clip(%d bytes) = %d bytes, valid UTF-8 %v: %.80q...", len(long), len(got), utf8.ValidString(got), got)
	}
	if !strings.HasSuffix(got, " more bytes left out)") {
		t.Errorf("Clip does not say it cut: ...%q", got[len(got)-40:])
	}
}
