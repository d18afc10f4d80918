//go:build linux

package serve

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
)

// TestEgress: a daemon sandbox whose inline policy allows one name (and
// the loopback address the test server is on) reaches it through the
// gateway; another name is refused with the rule; a sandbox without
// network has no proxy at all.
func TestEgress(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s", r.Host)
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	d := startDaemon(t, "egress_hosts:\n  api.test: [127.0.0.1]\n  other.test: [127.0.0.1]\n")
	sb := d.create(t, &api.CreateSandboxRequest{Policy: "network:\n  mode: allowlist\n  allow: [api.test, 127.0.0.1]\n"})
	out := d.sh(t, sb.ID, fmt.Sprintf(`curl -s -m 10 http://api.test:%[1]s/; echo; curl -s -m 10 -o /dev/null -w '%%{http_code}' http://other.test:%[1]s/`, u.Port()))
	if out != "hello api.test:"+u.Port()+"\n403" {
		t.Fatalf("egress through the daemon's gateway: %q", out)
	}
	// The daemon's log reaches this test through a pipe, after the gateway
	// has answered (it audits a request once it has written the answer).
	eventually(t, 30*time.Second, "egress audited in the daemon's log", func() bool {
		l := d.Logs()
		return strings.Contains(l, `msg=egress`) && strings.Contains(l, "host=other.test")
	})
	plain := d.create(t, nil)
	res, err := d.c.Exec(ctxT(t), plain.ID, &api.ExecRequest{Argv: []string{"curl", "-s", "-m", "5", "-x", "http://127.0.0.1:3128", "http://api.test:" + u.Port() + "/"}})
	if err != nil || res.ExitCode != 7 {
		t.Fatalf("no-network sandbox reached a proxy: %+v %v", res, err)
	}
}

// TestEgressHostLoopback: a daemon sandbox reaches a service on the
// host's loopback as host.airlock.internal:PORT only on a port the
// configuration's egress_host_ports opens; a policy naming another is
// refused (400) at create and at a policy change. The daemon's own API
// is refused always: by name though listed, and by address through an IP
// rule, next to the control on the service's port.
func TestEgressHostLoopback(t *testing.T) {
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "host service %s", r.Host)
	}))
	defer svc.Close()
	port := svc.Listener.Addr().(*net.TCPAddr).Port
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	apiAddr := l.Addr().(*net.TCPAddr)
	l.Close()
	d := startDaemon(t, fmt.Sprintf("listen: %s\negress_host_ports: [%d, %d]\n", apiAddr, port, apiAddr.Port))
	pol := func(allow string) string { return "network:\n  mode: allowlist\n  allow: [" + allow + "]\n" }
	name := fmt.Sprintf("host.airlock.internal:%d", port)
	sb := d.create(t, &api.CreateSandboxRequest{Policy: pol(name)})
	if out := d.sh(t, sb.ID, "curl -s -m 10 http://"+name+"/"); out != "host service "+name {
		t.Fatalf("the host's service: %q", out)
	}
	_, err = d.c.CreateSandbox(ctxT(t), &api.CreateSandboxRequest{Policy: pol(fmt.Sprintf("host.airlock.internal:%d", port+1))})
	wantCode(t, "a port egress_host_ports does not open", err, http.StatusBadRequest)
	if !strings.Contains(err.Error(), "egress_host_ports") {
		t.Errorf("the refusal does not say what opens it: %v", err)
	}
	_, err = d.c.CreateSandbox(ctxT(t), &api.CreateSandboxRequest{Policy: pol(fmt.Sprintf("host.airlock.internal:%d", apiAddr.Port))})
	wantCode(t, "the daemon's API by name", err, http.StatusBadRequest)
	_, err = d.c.SetNetworkPolicy(ctxT(t), sb.ID, api.NetworkPolicy{Mode: "allowlist", Allow: []string{name, fmt.Sprintf("host.airlock.internal:%d", port+1)}})
	wantCode(t, "a policy change to a port egress_host_ports does not open", err, http.StatusBadRequest)

	byAddr := d.create(t, &api.CreateSandboxRequest{Policy: pol("127.0.0.1")})
	out := d.sh(t, byAddr.ID, fmt.Sprintf(`curl -s -m 10 --noproxy '' -x http://127.0.0.1:3128 -o /dev/null -w '%%{http_code} ' http://127.0.0.1:%d/healthz
curl -s -m 10 --noproxy '' -x http://127.0.0.1:3128 -D - -o /dev/null http://127.0.0.1:%d/healthz | grep -i x-airlock-rule
curl -s -m 10 --noproxy '' -x http://127.0.0.1:3128 http://127.0.0.1:%d/`, apiAddr.Port, apiAddr.Port, port))
	if !strings.Contains(out, "403 ") || !strings.Contains(out, "airlock serve's API, which sandboxes never reach") || !strings.Contains(out, "host service 127.0.0.1:") {
		t.Fatalf("by address: %q", out)
	}
}
