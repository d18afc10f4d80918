package main

import (
	"strings"
	"testing"
	"time"
)

func TestEgressVerdict(t *testing.T) {
	for _, c := range []struct {
		r    egressRow
		want string
	}{
		{egressRow{unit: "MB/s", direct: 1000, gateway: 800, target: 0.8, hasTgt: true, nDirect: 1, nGateway: 1}, ">= 0.80x: ok"},
		{egressRow{unit: "MB/s", direct: 1000, gateway: 799, target: 0.8, hasTgt: true, nDirect: 1, nGateway: 1}, ">= 0.80x: FAIL"},
		{egressRow{unit: "µs", added: true, direct: 50, gateway: 1050, target: 1000, hasTgt: true, nDirect: 1, nGateway: 1}, "added <= 1000 µs: ok"},
		{egressRow{unit: "µs", added: true, direct: 50, gateway: 1051, target: 1000, hasTgt: true, nDirect: 1, nGateway: 1}, "added <= 1000 µs: FAIL"},
		{egressRow{unit: "µs", added: true, direct: 50, gateway: 60, nDirect: 1, nGateway: 1}, "-"},
		{egressRow{unit: "MB/s", target: 0.8, hasTgt: true}, "no data"},
	} {
		if got := c.r.verdict(); got != c.want {
			t.Errorf("%+v: verdict %q, want %q", c.r, got, c.want)
		}
	}
	d, g, cmp := egressRow{unit: "µs", added: true, direct: 60, gateway: 45, nDirect: 1, nGateway: 1}.cells()
	if d != "60 µs" || g != "45 µs" || cmp != "-15 µs" {
		t.Errorf("cells: %q %q %q", d, g, cmp)
	}
}

// A tiny run of the whole mode: every row is there, with data, and the
// gateway saw every kind of traffic and denied nothing.
func TestEgressTinyRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers and a gateway on loopback")
	}
	res, err := egressBench(egressOpts{sizeMiB: 1, reps: 1, samples: 5, clients: 2, duration: 150 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.errors != 0 || res.denied != 0 || len(res.warnings) != 0 {
		t.Errorf("errors %d, denied %d, warnings %q", res.errors, res.denied, res.warnings)
	}
	var b strings.Builder
	printEgress(&b, res)
	out := b.String()
	for _, row := range []string{
		"| download 1 MiB, HTTP, via HTTP proxy (absolute URI) |",
		"| download 1 MiB, HTTP, via SOCKS5 |",
		"| download 1 MiB, HTTPS, via CONNECT |",
		"| download 1 MiB, HTTPS, inspected (TLS terminated, sent on over TLS) |",
		"| download 1 MiB, HTTPS, inspected with a credential (body scrubbed) |",
		"| GET, kept-alive HTTP, via HTTP proxy, p50 |",
		"| GET, kept-alive HTTP, via HTTP proxy, p99 |",
		"| GET, kept-alive HTTP, via SOCKS5, p50 |",
		"| GET, kept-alive HTTP, via SOCKS5, p99 |",
		"| GET, new TCP+TLS connection, via CONNECT, p50 |",
		"| GET, new TCP+TLS connection, via CONNECT, p99 |",
		"| GET, kept-alive HTTPS, inspected, p50 |",
		"| GET, kept-alive HTTPS, inspected, p99 |",
		"| new connections/s, HTTP, 2 clients, via HTTP proxy |",
		"| new connections/s, HTTPS, 2 clients, via CONNECT |",
	} {
		if !strings.Contains(out, row) {
			t.Errorf("no row %q in\n%s", row, out)
		}
	}
	if len(res.rows) != 15 || strings.Contains(out, "n/a") || strings.Contains(out, "no data") {
		t.Errorf("%d rows, or rows without data:\n%s", len(res.rows), out)
	}
}
