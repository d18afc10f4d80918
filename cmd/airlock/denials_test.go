package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/internal/egress/gateway"
)

// TestDenialsReport: the summary counts every denial, names at most
// maxDenialKinds distinct ones, quotes what the sandbox chose (a host with
// control characters cannot write to the terminal), and says nothing when
// nothing was denied (allowed records and refusals without a rule, such as
// a malformed request, are not denials of policy).
func TestDenialsReport(t *testing.T) {
	var d denials
	var empty bytes.Buffer
	d.add(gateway.Record{Host: "ok.test", Port: 443, Allowed: true})
	d.add(gateway.Record{Error: "bad request: malformed"})
	d.report(&empty, false)
	if empty.Len() != 0 {
		t.Fatalf("no denial, yet: %q", empty.String())
	}
	d.add(gateway.Record{Host: "evil\x1b[2J.test", Port: 80, Rule: "not in allowlist"})
	for i := range 7 {
		d.add(gateway.Record{Host: fmt.Sprintf("h%d.test", i), Port: 443, Rule: "not in allowlist"})
	}
	d.add(gateway.Record{Host: "h0.test", Port: 443, Rule: "not in allowlist"})
	var out bytes.Buffer
	d.report(&out, true)
	got := out.String()
	for _, want := range []string{
		"denied 9 connections or requests (every connection and request is in the --net-log file):\n",
		`airlock:   "h0.test:443": not in allowlist (2 times)` + "\n",
		`airlock:   "evil\x1b[2J.test:80": not in allowlist` + "\n",
		`airlock:   "h3.test:443": not in allowlist` + "\n",
		"airlock:   and 3 more\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("want %q in\n%s", want, got)
		}
	}
	if strings.Contains(got, "h4.test") || strings.ContainsRune(got, 0x1b) {
		t.Errorf("past the limit, or a raw control character:\n%q", got)
	}
	if n := strings.Count(got, "\n"); n != 1+5*2+1 {
		t.Errorf("%d lines, want 12:\n%s", n, got)
	}
}
