package manager

import (
	"errors"
	"testing"

	"github.com/airlock-dev/airlock/internal/errdefs"
)

func TestCursor(t *testing.T) {
	for _, s := range []string{"0.0", "12.7", "18446744073709551615.1"} {
		c, err := ParseCursor(s)
		if err != nil || c.String() != s {
			t.Errorf("%q: %v %v", s, c, err)
		}
	}
	if c, err := ParseCursor(""); err != nil || c != (Cursor{}) {
		t.Errorf("empty cursor: %v %v", c, err)
	}
	for _, s := range []string{"1", "a.b", "1.2.3", "-1.0", "1.", "12;DROP", "18446744073709551616.0"} {
		if _, err := ParseCursor(s); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("%q: want ErrInvalid, got %v", s, err)
		}
	}
}

func TestProcIDAndSignal(t *testing.T) {
	for s, want := range map[string]bool{"p1": true, "p42": true, "p0": true, "p01": false, "p": false, "1": false, "px": false, "p-1": false} {
		if _, ok := parseProcID(s); ok != want {
			t.Errorf("parseProcID(%q) = %v", s, ok)
		}
	}
	for s, want := range map[string]int{"TERM": 15, "sigkill": 9, "SIGINT": 2, "9": 9, "64": 64} {
		if sig, err := ParseSignal(s); err != nil || int(sig) != want {
			t.Errorf("ParseSignal(%q) = %v %v", s, sig, err)
		}
	}
	for _, s := range []string{"", "0", "65", "NOPE", "-9"} {
		if _, err := ParseSignal(s); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("ParseSignal(%q): want ErrInvalid, got %v", s, err)
		}
	}
}
