//go:build linux

package serve

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
)

// TestEgressRestart: egress survives a daemon killed with SIGKILL. After
// the restart the same requests from inside the sandbox go through the
// gateway again (HTTP proxy and SOCKS5), a name the policy does not allow
// is still refused, and both are audited by the new daemon. Fail closed: a
// sandbox in which a process took the proxy's address while no daemon ran
// is not served by anything else; it is failed with the reason and removed.
func TestEgressRestart(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s", r.Host)
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	d := startDaemon(t, "egress_hosts:\n  api.test: [127.0.0.1]\n  other.test: [127.0.0.1]\n")
	pol := "network:\n  mode: allowlist\n  allow: [api.test, 127.0.0.1]\n"
	sb := d.create(t, &api.CreateSandboxRequest{Policy: pol})
	squat := d.create(t, &api.CreateSandboxRequest{Policy: pol})

	script := fmt.Sprintf(`curl -s -m 10 http://api.test:%[1]s/; echo; `+
		`curl -s -m 10 -x socks5h://127.0.0.1:1080 http://api.test:%[1]s/; echo; `+
		`curl -s -m 10 -o /dev/null -w '%%{http_code}' http://other.test:%[1]s/`, u.Port())
	want := fmt.Sprintf("hello api.test:%[1]s\nhello api.test:%[1]s\n403", u.Port())
	if out := d.sh(t, sb.ID, script); out != want {
		t.Fatalf("egress before the restart: %q, want %q", out, want)
	}
	// In the other sandbox, a process that binds the HTTP proxy's address
	// as soon as nothing holds it.
	if _, err := d.c.StartProcess(ctxT(t), squat.ID, &api.ExecRequest{Argv: []string{"python3", "-c", `
import socket, time
while True:
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", 3128)); s.listen(); break
    except OSError:
        s.close(); time.sleep(0.02)
time.sleep(1000)
`}}); err != nil {
		t.Fatal(err)
	}

	d.stop(syscall.SIGKILL)
	// While no daemon runs: the squatter gets the address (host-side
	// oracle: the sandbox's own TCP table).
	squatPid := statePid(t, d, squat.ID)
	eventually(t, 15*time.Second, "the squatter to bind 127.0.0.1:3128", func() bool {
		return listensOn(squatPid, 3128)
	})
	logged := len(d.Logs())
	d.start()

	ctx := ctxT(t)
	got, err := d.c.GetSandbox(ctx, sb.ID)
	if err != nil || got.State != api.StateRunning {
		t.Fatalf("sandbox after the restart: %+v %v", got, err)
	}
	if out := d.sh(t, sb.ID, script); out != want {
		t.Fatalf("egress after the restart: %q, want %q", out, want)
	}
	// The log comes through a pipe, after the gateway has answered (on a
	// failure the daemon's log is printed whole).
	eventually(t, 30*time.Second, "egress after the restart audited by the new daemon", func() bool {
		after := d.Logs()[logged:]
		return strings.Contains(after, "msg=egress") && strings.Contains(after, "host=api.test") && strings.Contains(after, "host=other.test")
	})

	got, err = d.c.GetSandbox(ctx, squat.ID)
	if err != nil || got.State != api.StateFailed || !strings.Contains(got.Reason, "127.0.0.1:3128") || !strings.Contains(got.Reason, "in use") {
		t.Fatalf("sandbox whose proxy address was taken: %+v %v", got, err)
	}
	for _, e := range d.stateEntries() {
		if "sb-"+e == squat.ID {
			t.Fatal("the failed sandbox's state is still on the host")
		}
	}
	eventually(t, 10*time.Second, "the failed sandbox's init to end", func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", squatPid))
		return err != nil || strings.Contains(string(b), ") Z ")
	})
}

// listensOn reports a TCP socket listening on port in pid's network
// namespace.
func listensOn(pid, port int) bool {
	for _, f := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, f))
		if err != nil {
			return false
		}
		for _, line := range strings.Split(string(b), "\n") {
			fs := strings.Fields(line)
			if len(fs) > 3 && strings.HasSuffix(fs[1], fmt.Sprintf(":%04X", port)) && fs[3] == "0A" {
				return true
			}
		}
	}
	return false
}
