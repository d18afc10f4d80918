package workspace

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlock-dev/airlock/internal/workspace/wstest"
)

// BenchmarkCheckpoint: one checkpoint (copy of the upper layer, then the
// count of its changes) with 1, 10 and 100 MiB changed (in 256 KiB files),
// over a workspace of 10000 files, and 1 MiB changed over one of 100000
// files: the cost follows what changed, not the workspace. frozen-ms is
// the part the sandbox would be paused for (here pause and resume do
// nothing: the freezer's own cost is not in it).
func BenchmarkCheckpoint(b *testing.B) {
	for _, c := range []struct{ files, mib int }{{10000, 1}, {10000, 10}, {10000, 100}, {100000, 1}} {
		b.Run(fmt.Sprintf("changed=%dMiB/files=%d", c.mib, c.files), func(b *testing.B) {
			ws := b.TempDir()
			if err := wstest.MakeTree(ws, c.files); err != nil {
				b.Fatal(err)
			}
			b.Setenv("AIRLOCK_CHANGES_DIR", filepath.Join(b.TempDir(), "changes"))
			r, err := Create(newTestID(c.files+c.mib), ws, testProtected, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer r.Discard()
			chunk := make([]byte, 256<<10)
			for k := 0; k < c.mib*4; k++ {
				rand.Read(chunk)
				p := filepath.Join(r.Upper(), "new", fmt.Sprintf("%03d", k/100), fmt.Sprintf("blob%04d", k))
				os.MkdirAll(filepath.Dir(p), 0o755)
				if err := os.WriteFile(p, chunk, 0o644); err != nil {
					b.Fatal(err)
				}
			}
			nop := func() error { return nil }
			b.SetBytes(int64(c.mib) << 20)
			var frozen float64
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				cp, err := r.TakeCheckpoint("", false, nop, nop)
				if err != nil || cp.Bytes != int64(c.mib)<<20 {
					b.Fatalf("%+v %v", cp, err)
				}
				frozen += cp.FrozenMS
				b.StopTimer()
				removeAll(filepath.Join(r.CheckpointsDir(), cp.ID))
				b.StartTimer()
			}
			b.ReportMetric(frozen/float64(b.N), "frozen-ms")
		})
	}
}
