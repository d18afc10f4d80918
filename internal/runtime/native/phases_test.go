//go:build linux

package native_test

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/quota"
	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/runtime/native"
	"github.com/airlock-dev/airlock/internal/sandbox"
)

// BenchmarkPhases reports the median of each phase of a sandbox's life:
// create, exec (request to started), wait (started to exit of /bin/true)
// and destroy, plus the runtime's and the init's own setup steps; with a
// tmpfs workspace (as `airlock run` makes) and with a fresh 64 MiB volume
// (as the daemon makes).
func BenchmarkPhases(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	b.Run("tmpfs", func(b *testing.B) { benchPhases(b, &native.Runtime{Exe: airlockBin}) })
	b.Run("volume", func(b *testing.B) {
		// With the daemon's options: images cloned from a blank, in a
		// pool with reflinks if the directory's filesystem has none.
		dir := b.TempDir()
		vs, err := quota.OpenWith(filepath.Join(dir, "volumes"), quota.Options{Pool: filepath.Join(dir, "volumes.pool")})
		if err != nil {
			b.Skipf("no loop volumes here: %v", err)
		}
		defer vs.Close()
		b.Logf("volumes: %s", vs.CopyOnWriteInfo())
		benchPhases(b, &native.Runtime{Exe: airlockBin, Volumes: vs})
	})
}

func benchPhases(b *testing.B, rt *native.Runtime) {
	phases := map[string][]time.Duration{}
	null, _ := os.Open(os.DevNull)
	defer null.Close()
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		spec, err := sandbox.Spec(&policy.Policy{Resources: policy.Resources{Disk: 64 << 20}}, sandbox.Opts{})
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		sb, err := rt.Create(ctx, spec)
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		p, err := sb.Exec(ctx, &runtime.ExecRequest{Argv: []string{"/bin/true"}, Dir: "/", Stdin: null, Stdout: null, Stderr: null})
		if err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		p.Wait(ctx)
		t3 := time.Now()
		phases["3-wait"] = append(phases["3-wait"], t3.Sub(t2))
		p2, err := sb.Exec(ctx, &runtime.ExecRequest{Argv: []string{"/bin/true"}, Dir: "/", Stdin: null, Stdout: null, Stderr: null})
		if err != nil {
			b.Fatal(err)
		}
		t5 := time.Now()
		p2.Wait(ctx)
		phases["5-exec2"] = append(phases["5-exec2"], t5.Sub(t3))
		phases["6-wait2"] = append(phases["6-wait2"], time.Since(t5))
		t3 = time.Now()
		sb.Destroy(ctx)
		t4 := time.Now()
		phases["1-create"] = append(phases["1-create"], t1.Sub(t0))
		phases["2-exec"] = append(phases["2-exec"], t2.Sub(t1))
		phases["4-destroy"] = append(phases["4-destroy"], t4.Sub(t3))
		for k, v := range sb.Info().Steps {
			phases["create."+k] = append(phases["create."+k], v)
		}
	}
	names := make([]string, 0, len(phases))
	for k := range phases {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		v := phases[k]
		sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
		b.ReportMetric(float64(v[len(v)/2].Microseconds())/1000, k+"-ms")
	}
}
