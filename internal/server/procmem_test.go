//go:build linux

package server

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/internal/buildtest"
	"github.com/airlock-dev/airlock/internal/manager"
	"github.com/airlock-dev/airlock/internal/runtime/native"
	"github.com/airlock-dev/airlock/internal/store"
)

// TestProcessMemoryAPI measures the daemon's heap (server, manager and
// runtime in this process, the API over a unix socket through the Go SDK)
// per finished process: AIRLOCK_PROCMEM=2000,4000 commands. A measurement,
// not a check; it needs root.
func TestProcessMemoryAPI(t *testing.T) {
	ns := os.Getenv("AIRLOCK_PROCMEM")
	if ns == "" || os.Geteuid() != 0 {
		t.Skip("a measurement: set AIRLOCK_PROCMEM=2000,4000 (as root)")
	}
	dir, err := os.MkdirTemp("", "airlock-server-procmem-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o711)
	bin := filepath.Join(dir, "airlock")
	if err := buildtest.Airlock(bin); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	st, err := store.Open(ctx, filepath.Join(dir, "airlock.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	met := manager.NewMetrics()
	m, err := manager.New(manager.Config{Runtime: &native.Runtime{Exe: bin, StateRoot: filepath.Join(dir, "state")}, Store: st, Metrics: met})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx, true)
	if err := m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "api.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: New(m, st, met, slog.New(slog.DiscardHandler)).Handler(false)}
	go hs.Serve(l)
	defer hs.Close()
	c, err := client.New("unix://"+sock, "")
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.CreateSandbox(ctx, &api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.DeleteSandbox(context.Background(), sb.ID)
	run := func(n int) {
		for i := 0; i < n; i++ {
			r, err := c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"true"}})
			if err != nil || r.ExitCode != 0 {
				t.Fatalf("exec %d: %v %+v", i, err, r)
			}
		}
	}
	heap := func() uint64 {
		var ms goruntime.MemStats
		goruntime.GC()
		goruntime.GC()
		goruntime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	run(50)
	base, gbase := heap(), goruntime.NumGoroutine()
	done := 0
	for _, s := range strings.Split(ns, ",") {
		n, _ := strconv.Atoi(s)
		run(n - done)
		done = n
		h := heap()
		t.Logf("%d commands: heap %d -> %d bytes (+%d, %.0f bytes per command); goroutines %d -> %d",
			n, base, h, int64(h)-int64(base), float64(int64(h)-int64(base))/float64(n), gbase, goruntime.NumGoroutine())
	}
}
