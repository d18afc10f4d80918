//go:build linux

package serve

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/api"
)

// BenchmarkDaemonProcessMemory reports a real daemon's resident memory
// growth per command in one sandbox once it has run more than the sandbox
// keeps whole (rss-B/exec; about 2.9 KB when every process was kept):
// go test -run XXX -bench DaemonProcessMemory -benchtime 2000x ./tests/serve/
// (root). The Go heap is measured in-process by the manager's
// BenchmarkFinishedProcessMemory (a daemon's /metrics only gives the heap as
// of its last collection, which is noise here).
func BenchmarkDaemonProcessMemory(b *testing.B) {
	need(b)
	d := startDaemon(b, "")
	ctx := context.Background()
	sb := d.create(b, nil)
	rss := func() int64 {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.Pid()))
		if err != nil {
			b.Fatal(err)
		}
		for _, l := range strings.Split(string(raw), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
				n, _ := strconv.ParseInt(f[1], 10, 64)
				return n << 10
			}
		}
		b.Fatal("no VmRSS")
		return 0
	}
	run := func(n int) {
		for i := 0; i < n; i++ {
			if r, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"true"}}); err != nil || r.ExitCode != 0 {
				b.Fatalf("exec %d: %v %+v", i, err, r)
			}
		}
	}
	run(300) // past the 256 finished processes a sandbox keeps whole
	rss0 := rss()
	b.ResetTimer()
	run(b.N)
	b.StopTimer()
	b.ReportMetric(float64(rss()-rss0)/float64(b.N), "rss-B/exec")
}
