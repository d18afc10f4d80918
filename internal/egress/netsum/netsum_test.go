package netsum

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// TestDenialsReport: the summary counts every denial and early failure,
// names at most DefaultMax distinct ones, quotes what the sandbox chose
// (a host with control characters cannot write to the terminal), cuts long
// errors, and says nothing when nothing was denied or failed early
// (allowed records, and failures after bytes moved, are left to the log).
func TestDenialsReport(t *testing.T) {
	var d Summary
	var empty bytes.Buffer
	d.Add(Record{Host: "ok.test", Port: 443, Allowed: true, BytesDown: 10})
	d.Add(Record{Host: "ok.test", Port: 443, Allowed: true, BytesDown: 10, Error: "connection reset by peer"})
	d.Print(&empty, Report{Of: "the sandbox's connections and requests", Where: "every connection and request is in the --net-log file", Allow: "--net-allow", Policy: "the policy's network.allow"})
	if empty.Len() != 0 {
		t.Fatalf("nothing denied or failed early, yet: %q", empty.String())
	}
	d.Add(Record{Host: "evil\x1b[2J.test", Port: 80, Rule: "not in allowlist"})
	d.Add(Record{Host: "gone.test", Port: 443, Allowed: true, Error: "dial tcp: " + strings.Repeat("x", 300)})
	for i := range 6 {
		d.Add(Record{Host: fmt.Sprintf("h%d.test", i), Port: 443, Rule: "not in allowlist"})
	}
	d.Add(Record{Host: "h0.test", Port: 443, Rule: "not in allowlist"})
	var out bytes.Buffer
	d.Print(&out, Report{Of: "the sandbox's connections and requests", Where: "every connection and request is in the --net-log file", Allow: "--net-allow", Policy: "the policy's network.allow"})
	got := out.String()
	for _, want := range []string{
		"airlock: the egress gateway denied 8 and could not complete 1 of the sandbox's connections and requests (every connection and request is in the --net-log file):\n",
		`airlock:   "evil\x1b[2J.test:80": denied: not in allowlist` + "\n",
		`airlock:   "gone.test:443": failed: dial tcp: ` + strings.Repeat("x", maxError-len("dial tcp: ")) + "...\n",
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
	var d Summary
	d.Add(Record{Host: "mirror.test", Port: 443, Rule: "private address 10.1.2.3 (private)"})
	d.Add(Record{Host: "10.9.8.7", Port: 80, Rule: "private address 10.9.8.7 (private)"})
	var out bytes.Buffer
	d.Print(&out, Report{Allow: "--net-allow"})
	for _, want := range []string{
		`"mirror.test" resolves to 10.1.2.3 here`, "add --net-allow 10.1.2.3\n",
		"airlock:     a private address is reached only through a rule naming it: --net-allow 10.9.8.7\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("want %q in\n%s", want, out.String())
		}
	}
}

// TestSummaryMaxAndHint: Max bounds the kinds kept (the rest are counted,
// not named); the hint uses the caller's command and omits the policy's
// place when there is none (airlock exec's sandboxes change theirs with
// airlock net).
func TestSummaryMaxAndHint(t *testing.T) {
	d := Summary{Max: 2}
	for i := range 4 {
		if !d.Add(Record{Host: fmt.Sprintf("h%d.test", i), Port: 443, Rule: "not in allowlist"}) {
			t.Fatalf("a denial was not counted")
		}
	}
	if d.Add(Record{Host: "ok.test", Port: 443, Allowed: true, Rule: "allow ok.test"}) {
		t.Fatal("an allowed record was counted")
	}
	if k := d.Kinds(); len(k) != 2 || k[0].Target() != "h0.test:443" || k[1].Count != 1 {
		t.Fatalf("kinds %+v", k)
	}
	var out bytes.Buffer
	d.Print(&out, Report{Of: "x", Where: "y", Allow: "airlock net sb-1 allow"})
	for _, want := range []string{
		"airlock: the egress gateway denied 4 of x (y):\n",
		`airlock:     to allow it: airlock net sb-1 allow "h1.test:443"` + "\n",
		"airlock:   and 2 more\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("want %q in\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "(or ") {
		t.Errorf("a policy place named without one:\n%s", out.String())
	}
}
