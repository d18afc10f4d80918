package egress

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/egress/gateway"
	"github.com/airlock-dev/airlock/internal/egress/rules"
	"github.com/airlock-dev/airlock/internal/errdefs"
	"github.com/airlock-dev/airlock/internal/policy"
)

// loopWorld is a gateway started as a sandbox's would be, with host
// access, and its audit.
type loopWorld struct {
	gw            *Gateway
	httpAddr, sck string
	mu            sync.Mutex
	records       []gateway.Record
}

func startLoop(t *testing.T, n policy.Network, host HostAccess) (*loopWorld, error) {
	t.Helper()
	w := &loopWorld{}
	var ls []net.Listener
	for range 2 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		ls = append(ls, l)
	}
	w.httpAddr, w.sck = ls[0].Addr().String(), ls[1].Addr().String()
	var err error
	w.gw, err = Start(&listenersOnly{ls: ls}, n, Options{Sandbox: "test", Host: host, Audit: func(r gateway.Record) {
		w.mu.Lock()
		w.records = append(w.records, r)
		w.mu.Unlock()
	}})
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { w.gw.Close() })
	return w, nil
}

func (w *loopWorld) get(t *testing.T, socks bool, rawURL string) (int, string, http.Header) {
	t.Helper()
	pu, _ := url.Parse("http://" + w.httpAddr)
	if socks {
		pu, _ = url.Parse("socks5h://" + w.sck)
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}
	defer c.CloseIdleConnections()
	resp, err := c.Get(rawURL)
	if err != nil {
		return 0, err.Error(), nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func loopNet(allow ...string) policy.Network {
	return policy.Network{Mode: policy.NetworkAllowlist, Allow: allow}
}

// TestHostLoopbackAccess: a service on the host's loopback, reached as
// host.airlock.internal:PORT through both proxies with a rule naming the
// port; another port is denied. The host's access decides which ports a
// policy may name at all, and its own API is refused by name and by
// address, each next to its control.
func TestHostLoopbackAccess(t *testing.T) {
	svc, other := newUpstream(t, nil), newUpstream(t, nil) // plain HTTP on 127.0.0.1
	rule := fmt.Sprintf("%s:%d", rules.HostLoopback, svc.port)
	w, err := startLoop(t, loopNet(rule), HostAccess{AnyPort: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, socks := range []bool{false, true} {
		st, body, _ := w.get(t, socks, "http://"+rule+"/x")
		if st != 200 || body != "ok GET /x" || svc.last(t).host != rule {
			t.Fatalf("socks=%v: %d %q", socks, st, body)
		}
		st, body, hdr := w.get(t, socks, fmt.Sprintf("http://%s:%d/x", rules.HostLoopback, other.port))
		if st == 200 || other.count() != 0 {
			t.Fatalf("socks=%v: another port: %d %q", socks, st, body)
		}
		if !socks && !strings.Contains(hdr.Get("X-Airlock-Rule"), "only an allow rule naming it with the port") {
			t.Fatalf("another port: rule %q", hdr.Get("X-Airlock-Rule"))
		}
	}
	// The allowed request's record: an allowed request is recorded when
	// its connection ends, so the denied one's record may come first.
	var r gateway.Record
	found := false
	for deadline := time.Now().Add(10 * time.Second); !found && time.Now().Before(deadline); {
		w.mu.Lock()
		for _, rec := range w.records {
			if rec.Allowed && rec.Port == svc.port {
				r, found = rec, true
				break
			}
		}
		w.mu.Unlock()
		if !found {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if !found || r.Host != rules.HostLoopback || r.Addr != fmt.Sprintf("127.0.0.1:%d", svc.port) || r.Rule != rule {
		w.mu.Lock()
		t.Fatalf("audit of the allowed request (found %v): %+v; all: %+v", found, r, w.records)
	}

	// airlock serve's way: only the ports its configuration lists.
	serve := HostAccess{Ports: []int{svc.port}}
	if _, err := startLoop(t, loopNet(fmt.Sprintf("%s:%d", rules.HostLoopback, other.port)), serve); err == nil ||
		!errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "not open to sandboxes here") {
		t.Fatalf("a port the host does not open: %v", err)
	}
	w2, err := startLoop(t, loopNet(rule), serve)
	if err != nil {
		t.Fatalf("control, a port it opens: %v", err)
	}
	if err := w2.gw.SetNetwork(loopNet(rule, fmt.Sprintf("%s:%d", rules.HostLoopback, other.port))); err == nil {
		t.Fatal("SetNetwork opened a port the host does not")
	}
	if _, err := startLoop(t, loopNet(rule), HostAccess{}); err == nil {
		t.Fatal("the zero HostAccess opened a port")
	}

	// The daemon's own API is refused by name even where listed, and by
	// address whatever the IP rules; another port is the control.
	api := HostAccess{AnyPort: true, Ports: []int{svc.port}, Refused: ListenerEndpoints(svc.srv.Listener.Addr(), "the test API")}
	if _, err := startLoop(t, loopNet(rule), api); err == nil || !strings.Contains(err.Error(), "the test API") {
		t.Fatalf("the API by name: %v", err)
	}
	w3, err := startLoop(t, loopNet("127.0.0.0/8"), api)
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"127.0.0.1", "127.0.0.2"} {
		st, _, hdr := w3.get(t, false, fmt.Sprintf("http://%s:%d/x", host, svc.port))
		if st != 403 || !strings.Contains(hdr.Get("X-Airlock-Rule"), "the test API, which sandboxes never reach") {
			t.Fatalf("the API by address %s: %d %v", host, st, hdr)
		}
	}
	if st, body, _ := w3.get(t, false, fmt.Sprintf("http://127.0.0.1:%d/x", other.port)); st != 200 {
		t.Fatalf("control, another port by address: %d %q", st, body)
	}
}

func TestListenerEndpoints(t *testing.T) {
	has := func(es []Endpoint, ip string, port int) bool {
		for _, e := range es {
			if e.matches(netip.MustParseAddr(ip), port) {
				return true
			}
		}
		return false
	}
	es := ListenerEndpoints(&net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 7070}, "api")
	if !has(es, "127.0.0.1", 7070) || !has(es, "127.0.0.9", 7070) || !has(es, "::1", 7070) || has(es, "127.0.0.1", 7071) || has(es, "10.0.0.1", 7070) {
		t.Errorf("loopback listener: %+v", es)
	}
	es = ListenerEndpoints(&net.TCPAddr{IP: net.IPv6zero, Port: 7070}, "api")
	if !has(es, "127.0.0.1", 7070) || !has(es, "::", 7070) {
		t.Errorf("unspecified listener: %+v", es)
	}
	es = ListenerEndpoints(&net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 7070}, "api")
	if !has(es, "192.0.2.7", 7070) || has(es, "127.0.0.1", 7070) {
		t.Errorf("one address: %+v", es)
	}
}

func TestAddHostReserved(t *testing.T) {
	hosts := map[string][]netip.Addr{}
	if err := AddHost(hosts, "Host.Airlock.Internal.", "10.0.0.5"); err == nil || !strings.Contains(err.Error(), "maps host.airlock.internal to the host's loopback itself") {
		t.Errorf("mapping host.airlock.internal: %v", err)
	}
	if err := AddHost(hosts, "db.internal", "10.0.0.5"); err != nil || len(hosts["db.internal"]) != 1 {
		t.Errorf("control: %v %v", err, hosts)
	}
}

// The gateway maps the name the rules open.
func TestHostLoopbackName(t *testing.T) {
	if gateway.HostLoopback != rules.HostLoopback {
		t.Fatalf("gateway %q, rules %q", gateway.HostLoopback, rules.HostLoopback)
	}
}
