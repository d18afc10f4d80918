package native_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/sandbox"
)

// Spec.Listen: a socket bound inside the sandbox's network namespace whose
// connections reach the supervisor (the egress gateway's bridge), and that
// the sandbox cannot take over; the control is a port nobody listens on.
func TestListenInsideSandbox(t *testing.T) {
	needRoot(t)
	spec, err := sandbox.Spec(&policy.Policy{}, sandbox.Opts{})
	if err != nil {
		t.Fatal(err)
	}
	spec.Listen = []string{"127.0.0.1:3128", "[::1]:1080"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb, err := privateRuntime(t).Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(context.Background())
	ls := sb.(runtime.Listeners).Listeners()
	if len(ls) != 2 {
		t.Fatalf("got %d listeners", len(ls))
	}
	for _, l := range ls {
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				b := make([]byte, 4)
				io.ReadFull(c, b)
				c.Write([]byte("pong:" + string(b)))
				c.Close()
			}
		}()
	}
	script := `
import socket, sys
for host, port in (("127.0.0.1", 3128), ("::1", 1080)):
    s = socket.create_connection((host, port), timeout=5)
    s.sendall(b"ping"); print(s.recv(16).decode())
try:
    socket.create_connection(("127.0.0.1", 3129), timeout=5)
    print("3129 open")
except OSError as e:
    print("3129", e.errno)
try:
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", 3128)); s.listen(); print("took over")
except OSError as e:
    print("bind", e.errno)
`
	out, st := run(t, sb, "python3", "-c", script)
	want := "pong:ping\npong:ping\n3129 111\nbind 98\n" // ECONNREFUSED, EADDRINUSE
	if st.Code != 0 || out != want {
		t.Fatalf("got %q (%+v), want %q", out, st, want)
	}
	if !strings.Contains(ls[0].Addr().String(), "127.0.0.1:3128") {
		t.Fatalf("listener address %s", ls[0].Addr())
	}
}
