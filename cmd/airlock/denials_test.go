package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/internal/egress/gateway"
)

// TestDenialsReport: the summary counts every denial and early failure,
// names at most maxDenialKinds distinct ones, quotes what the sandbox chose
// (a host with control characters cannot write to the terminal), cuts long
// errors, and says nothing when nothing was denied or failed early
// (allowed records, and failures after bytes moved, are left to the log).
func TestDenialsReport(t *testing.T) {
	var d denials
	var empty bytes.Buffer
	d.add(gateway.Record{Host: "ok.test", Port: 443, Allowed: true, BytesDown: 10})
	d.add(gateway.Record{Host: "ok.test", Port: 443, Allowed: true, BytesDown: 10, Error: "connection reset by peer"})
	d.report(&empty, false)
	if empty.Len() != 0 {
		t.Fatalf("nothing denied or failed early, yet: %q", empty.String())
	}
	d.add(gateway.Record{Host: "evil\x1b[2J.test", Port: 80, Rule: "not in allowlist"})
	d.add(gateway.Record{Host: "gone.test", Port: 443, Allowed: true, Error: "dial tcp: " + strings.Repeat("x", 300)})
	for i := range 6 {
		d.add(gateway.Record{Host: fmt.Sprintf("h%d.test", i), Port: 443, Rule: "not in allowlist"})
	}
	d.add(gateway.Record{Host: "h0.test", Port: 443, Rule: "not in allowlist"})
	var out bytes.Buffer
	d.report(&out, true)
	got := out.String()
	for _, want := range []string{
		"airlock: the egress gateway denied 8 and could not complete 1 of the sandbox's connections and requests (every connection and request is in the --net-log file):\n",
		`airlock:   "evil\x1b[2J.test:80": denied: not in allowlist` + "\n",
		`airlock:   "gone.test:443": failed: dial tcp: ` + strings.Repeat("x", maxDenialError-len("dial tcp: ")) + "...\n",
		`airlock:   "h0.test:443": denied: not in allowlist (2 times)` + "\n",
		`airlock:     to allow it: --net-allow "h2.test:443" (or the policy's network.allow)` + "\n",
		"airlock:   and 3 more\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("want %q in\n%s", want, got)
		}
	}
	if strings.Contains(got, "h3.test") || strings.ContainsRune(got, 0x1b) {
		t.Errorf("past the limit, or a raw control character:\n%q", got)
	}
	// The header, two lines per denial, one per failure, "and 3 more".
	if n := strings.Count(got, "\n"); n != 1+4*2+1+1 {
		t.Errorf("%d lines, want 11:\n%s", n, got)
	}
}

// TestDenialsPrivateHints: a private address denied for a name says the
// name resolves there and which rule would allow it; one asked for by
// address says which rule would allow it.
func TestDenialsPrivateHints(t *testing.T) {
	var d denials
	d.add(gateway.Record{Host: "mirror.test", Port: 443, Rule: "private address 10.1.2.3 (private)"})
	d.add(gateway.Record{Host: "10.9.8.7", Port: 80, Rule: "private address 10.9.8.7 (private)"})
	var out bytes.Buffer
	d.report(&out, false)
	for _, want := range []string{
		`"mirror.test" resolves to 10.1.2.3 here`, "add --net-allow 10.1.2.3\n",
		"airlock:     a private address is reached only through a rule naming it: --net-allow 10.9.8.7\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("want %q in\n%s", want, out.String())
		}
	}
}
