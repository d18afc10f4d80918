//go:build linux

package sdkts

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/internal/testdaemon"
)

// BenchmarkSDKs compares the Go SDK and the TypeScript SDK on one daemon:
// the exec round trip of `true`, and create+exec+destroy. The TypeScript
// numbers are the samples of sdk/typescript/scripts/bench.mjs (node's start
// excluded): ns/op is their mean, ms-median/op their median.
//
//	go test -run '^$' -bench SDKs ./tests/sdkts/
func BenchmarkSDKs(b *testing.B) {
	testdaemon.Need(b)
	needNode(b)
	pkg := preparePackage(b)
	d := testdaemon.Start(b, "")
	ctx := testdaemon.Ctx(b)
	sb, err := d.C.CreateSandbox(ctx, &api.CreateSandboxRequest{})
	if err != nil {
		b.Fatal(err)
	}
	cycle := func() error {
		s, err := d.C.CreateSandbox(ctx, &api.CreateSandboxRequest{})
		if err != nil {
			return err
		}
		_, err = d.C.Exec(ctx, s.ID, &api.ExecRequest{Argv: []string{"true"}})
		if derr := d.C.DeleteSandbox(ctx, s.ID); err == nil {
			err = derr
		}
		return err
	}
	goBench := func(op func() error) func(*testing.B) {
		return func(b *testing.B) {
			var xs []float64
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				if err := op(); err != nil {
					b.Fatal(err)
				}
				xs = append(xs, float64(time.Since(t0).Microseconds())/1000)
			}
			b.ReportMetric(medianOf(xs), "ms-median/op")
		}
	}
	tsBench := func(mode, arg string) func(*testing.B) {
		return func(b *testing.B) {
			out, err := exec.Command("node", filepath.Join(pkg, "scripts", "bench.mjs"), "unix://"+d.Sock, mode, arg, fmt.Sprint(b.N)).Output()
			if err != nil {
				if ee, ok := err.(*exec.ExitError); ok {
					b.Fatalf("bench.mjs: %v: %s", err, ee.Stderr)
				}
				b.Fatal(err)
			}
			var xs []float64
			if err := json.Unmarshal(out, &xs); err != nil || len(xs) != b.N {
				b.Fatalf("bench.mjs printed %q: %v", out, err)
			}
			var sum float64
			for _, x := range xs {
				sum += x
			}
			b.ReportMetric(sum/float64(len(xs))*1e6, "ns/op")
			b.ReportMetric(medianOf(xs), "ms-median/op")
		}
	}
	b.Run("exec/Go", goBench(func() error {
		_, err := d.C.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"true"}})
		return err
	}))
	b.Run("exec/TypeScript", tsBench("exec", sb.ID))
	b.Run("cycle/Go", goBench(cycle))
	b.Run("cycle/TypeScript", tsBench("cycle", ""))
}

func medianOf(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}
