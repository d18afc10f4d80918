package mcpserver

import (
	"encoding/json"
	"strings"
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

func TestJSONCost(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
	}{
		{"abc", 3}, {"a\nb", 4}, {`"\`, 4}, {"\x01", 6}, {"<a&b>", 20},
		{"é", 2}, {"日本", 6}, {"\u2028", 6}, {"\xff", 3},
	} {
		if got := jsonCost([]byte(c.in)); got != c.want {
			t.Errorf("jsonCost(%q) = %d, want %d", c.in, got, c.want)
		}
		// The cost is what encoding/json writes between the quotes.
		b, _ := json.Marshal(strings.ToValidUTF8(c.in, "\uFFFD"))
		if c.in != "\xff" && len(b)-2 != c.want {
			t.Errorf("json.Marshal(%q) is %d bytes, jsonCost says %d", c.in, len(b)-2, c.want)
		}
	}
}

func TestCutCost(t *testing.T) {
	for _, c := range []struct {
		data string
		room int
		want int
	}{
		{"abc", 10, 3}, {"abc", 2, 2}, {"\x01\x01", 6, 1}, {"\x01\x01", 11, 1}, {"\x01\x01", 12, 2},
		{"a日", 3, 1}, // '日' costs 3: not split
		{"日", 1, 3},  // the first character whole, though it costs more than room
		{"abc", 0, 0},
	} {
		if got := cutCost([]byte(c.data), c.room); got != c.want {
			t.Errorf("cutCost(%q, %d) = %d, want %d", c.data, c.room, got, c.want)
		}
	}
}
