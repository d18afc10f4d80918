package gateway

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// loopPolicy opens HostLoopback on its ports for loopback addresses, and
// api.test as the default world does.
type loopPolicy struct {
	testPolicy
	ports []int
}

func (p loopPolicy) Host(host string, port int) Decision {
	if host == HostLoopback {
		if slices.Contains(p.ports, port) {
			return Decision{Allow: true, Rule: fmt.Sprintf("%s:%d", host, port)}
		}
		return Decision{Rule: "host loopback port not allowed"}
	}
	return p.testPolicy.Host(host, port)
}

func (p loopPolicy) Addr(host string, ip netip.Addr, port int) Decision {
	if host == HostLoopback {
		if d := p.Host(host, port); !d.Allow || !ip.IsLoopback() {
			return Decision{Rule: "not the host's loopback"}
		}
		return Decision{Allow: true, Rule: "loopback"}
	}
	return p.testPolicy.Addr(host, ip, port)
}

// TestHostLoopback: host.airlock.internal stands for 127.0.0.1 then ::1,
// whatever the resolver says (it is never asked), through the HTTP proxy
// (plain and CONNECT) and SOCKS5, audited with the address dialed; a port
// the policy does not open is denied, dialing and resolving nothing.
func TestHostLoopback(t *testing.T) {
	var cr *countingResolver
	w := newWorld(t, func(c *Config) {
		// A static entry for the name: it must not matter.
		c.Resolver.(*StaticResolver).Hosts[HostLoopback] = []netip.Addr{apiIP}
		cr = &countingResolver{Resolver: c.Resolver}
		c.Resolver = cr
	})
	ap := netip.MustParseAddrPort(w.plain.Listener.Addr().String())
	plainPort := int(ap.Port())
	v6Port := 1 // routed on ::1 only: 127.0.0.1 fails, ::1 answers
	w.route(netip.AddrPortFrom(netip.IPv6Loopback(), uint16(v6Port)), w.plain.Listener.Addr().String())
	w.gw.SetPolicy(loopPolicy{testPolicy: allow(defaultNames), ports: []int{plainPort, v6Port}})
	target := net.JoinHostPort(HostLoopback, strconv.Itoa(plainPort))
	want := "hello " + target

	resp, err := w.httpClient().Get("http://" + target + "/")
	if err != nil {
		t.Fatal(err)
	}
	if body := readBody(t, resp); resp.StatusCode != 200 || body != want {
		t.Fatalf("plain HTTP: %d %q", resp.StatusCode, body)
	}
	c, br, resp := w.connect(target)
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %s", resp.Status)
	}
	if resp, body, err := get(c, br, target, "/"); err != nil || resp.StatusCode != 200 || body != want {
		t.Fatalf("CONNECT: %v %q", err, body)
	}
	c.Close()
	sc, err := w.socksDial(target)
	if err != nil {
		t.Fatal(err)
	}
	if resp, body, err := get(sc, bufio.NewReader(sc), target, "/"); err != nil || resp.StatusCode != 200 || body != want {
		t.Fatalf("SOCKS: %v %q", err, body)
	}
	sc.Close()
	records := w.waitRecords(3)
	for _, r := range records {
		if r.Host != HostLoopback || r.Addr != ap.String() || !r.Allowed {
			t.Errorf("record %+v: want host %s, addr %s, allowed", r, HostLoopback, ap)
		}
	}
	if d := w.dials(); len(d) != 3 || d[0] != ap.String() {
		t.Errorf("dialed %v", d)
	}

	// 127.0.0.1 first, then ::1.
	w.reset()
	v6 := net.JoinHostPort(HostLoopback, strconv.Itoa(v6Port))
	resp, err = w.httpClient().Get("http://" + v6 + "/")
	if err != nil {
		t.Fatal(err)
	}
	if body := readBody(t, resp); resp.StatusCode != 200 || !strings.HasPrefix(body, "hello "+HostLoopback) {
		t.Fatalf("via ::1: %d %q", resp.StatusCode, body)
	}
	if d := w.dials(); !slices.Equal(d, []string{"127.0.0.1:1", "[::1]:1"}) {
		t.Errorf("dialed %v, want 127.0.0.1 then ::1", d)
	}

	// A port the policy does not open: denied, nothing dialed.
	w.reset()
	other := net.JoinHostPort(HostLoopback, strconv.Itoa(plainPort+1))
	resp, err = w.httpClient().Get("http://" + other + "/")
	if err != nil {
		t.Fatal(err)
	}
	readBody(t, resp)
	if _, err := w.socksDial(other); err == nil {
		t.Error("SOCKS to a closed port")
	}
	if resp.StatusCode != 403 || len(w.dials()) != 0 {
		t.Errorf("another port: %d, dialed %v", resp.StatusCode, w.dials())
	}
	cr.mu.Lock()
	defer cr.mu.Unlock()
	if len(cr.names) != 0 {
		t.Errorf("the resolver was asked for %v", cr.names)
	}
}
