//go:build linux

package serve

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
)

// TestDaemonProcessMemory measures a real daemon's resident memory and Go
// heap (its /metrics, as last collected) after AIRLOCK_PROCMEM=2000,4000
// commands in one sandbox. A measurement, not a check.
func TestDaemonProcessMemory(t *testing.T) {
	ns := os.Getenv("AIRLOCK_PROCMEM")
	if ns == "" {
		t.Skip("a measurement: set AIRLOCK_PROCMEM=2000,4000")
	}
	need(t)
	d := startDaemon(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	sb := d.create(t, nil)
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", d.sock)
	}}}
	measure := func() (rss, heap int64) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.Pid()))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
				rss, _ = strconv.ParseInt(f[1], 10, 64)
				rss <<= 10
			}
		}
		resp, err := hc.Get("http://airlock/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "go_memstats_heap_alloc_bytes "); ok {
				f, _ := strconv.ParseFloat(v, 64)
				heap = int64(f)
			}
		}
		return rss, heap
	}
	run := func(n int) {
		for i := 0; i < n; i++ {
			if r, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"true"}}); err != nil || r.ExitCode != 0 {
				t.Fatalf("exec %d: %v %+v", i, err, r)
			}
		}
	}
	run(50)
	rss0, heap0 := measure()
	done := 0
	for _, s := range strings.Split(ns, ",") {
		n, _ := strconv.Atoi(s)
		run(n - done)
		done = n
		rss, heap := measure()
		t.Logf("%d commands: RSS %d -> %d (%+.0f bytes per command); heap (last GC's) %d -> %d (%+.0f per command)",
			n, rss0, rss, float64(rss-rss0)/float64(n), heap0, heap, float64(heap-heap0)/float64(n))
	}
}
