package mcpserver

import (
	"testing"

	"github.com/airlock-dev/airlock/api"
)

func TestCutAt(t *testing.T) {
	for _, c := range []struct {
		data string
		room int
		want int
	}{
		{"hello", 10, 5}, {"hello", 5, 5}, {"hello", 3, 3}, {"hello", 0, 0},
		{"héllo", 2, 1}, // 'é' is 2 bytes at 1..2: not split
		{"héllo", 3, 3}, // room ends after 'é'
		{"€uro", 1, 3},  // the first character whole, though longer than room
		{"a€uro", 2, 1}, // back to the start of '€'
	} {
		if got := cutAt([]byte(c.data), c.room); got != c.want {
			t.Errorf("cutAt(%q, %d) = %d, want %d", c.data, c.room, got, c.want)
		}
	}
}

func TestCursorAt(t *testing.T) {
	out := api.OutputEvent{Kind: api.EventStdout, Offset: 100, Data: []byte("0123456789"), Cursor: "110.7"}
	if c, ok := cursorAt(out, 4); !ok || c != "104.7" {
		t.Errorf("stdout: %q %v", c, ok)
	}
	errEv := api.OutputEvent{Kind: api.EventStderr, Offset: 7, Data: []byte("abc"), Cursor: "110.10"}
	if c, ok := cursorAt(errEv, 1); !ok || c != "110.8" {
		t.Errorf("stderr: %q %v", c, ok)
	}
	if _, ok := cursorAt(api.OutputEvent{Kind: api.EventStdout, Cursor: "opaque"}, 1); ok {
		t.Error("a cursor of another shape was taken apart")
	}
}
