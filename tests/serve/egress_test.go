//go:build linux

package serve

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

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
	if !strings.Contains(d.logs.String(), `msg=egress`) || !strings.Contains(d.logs.String(), "host=other.test") {
		t.Fatal("egress not audited in the daemon's log")
	}
	plain := d.create(t, nil)
	res, err := d.c.Exec(ctxT(t), plain.ID, &api.ExecRequest{Argv: []string{"curl", "-s", "-m", "5", "-x", "http://127.0.0.1:3128", "http://api.test:" + u.Port() + "/"}})
	if err != nil || res.ExitCode != 7 {
		t.Fatalf("no-network sandbox reached a proxy: %+v %v", res, err)
	}
}
