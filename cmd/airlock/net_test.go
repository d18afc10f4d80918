package main

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
)

func TestParseSince(t *testing.T) {
	now := time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"10m":                  now.Add(-10 * time.Minute),
		"1h30m":                now.Add(-90 * time.Minute),
		"2025-01-02T03:04:05Z": time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
	} {
		if got, err := parseSince(in, now); err != nil || !got.Equal(want) {
			t.Errorf("parseSince(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "5x", "-10m", "yesterday", "2025-01-02"} {
		if _, err := parseSince(in, now); err == nil || !strings.Contains(err.Error(), "--since") {
			t.Errorf("parseSince(%q): %v, want an error naming --since", in, err)
		}
	}
}

func TestRules(t *testing.T) {
	if got := addRules([]string{"a", "b"}, []string{"b", "c", "c"}); !reflect.DeepEqual(got, []string{"a", "b", "c"}) {
		t.Errorf("addRules: %q", got)
	}
	if got := dropRules([]string{"a", "b", "c"}, []string{"b", "x"}); !reflect.DeepEqual(got, []string{"a", "c"}) {
		t.Errorf("dropRules: %q", got)
	}
	if got := dropRules(nil, []string{"b"}); len(got) != 0 {
		t.Errorf("dropRules(nil): %q", got)
	}
}

func TestNetworkLine(t *testing.T) {
	for n, want := range map[int64]string{0: "0B", 1023: "1023B", 1536: "1.5K", 5 << 20: "5.0M", 3 << 30: "3.0G"} {
		if got := sizeOf(n); got != want {
			t.Errorf("sizeOf(%d) = %q, want %q", n, got, want)
		}
	}
	ev := api.NetworkEvent{Cursor: "1", Time: time.Now(), Proto: "http", Method: "GET", Host: "::1", Port: 80, Path: "/x",
		Allowed: false, Rule: "deny evil.test", BytesUp: 10, BytesDown: 2048, DurationMs: 12.3456, Error: "closed: the new policy denies it"}
	line := networkLine(ev)
	for _, want := range []string{" deny ", "deny evil.test", " GET ", "[::1]:80", " /x ", "10B", "2.0K", "12ms", "closed: the new policy denies it"} {
		if !strings.Contains(line, want) {
			t.Errorf("line %q lacks %q", line, want)
		}
	}
	if h := networkLine(api.NetworkEvent{}); !strings.HasPrefix(h, "TIME") || !strings.Contains(h, "HOST:PORT") {
		t.Errorf("header %q", h)
	}
}
