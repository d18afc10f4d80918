package workspace

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlock-dev/airlock/internal/workspace/wstest"
)

// BenchmarkReviewTree: review (Changes with diffs) and apply (with its
// journal) of 10 changed files in trees of 1000 and 100000 files. Both
// walk the run's upper layer, not the tree: the two sizes should cost the
// same.
func BenchmarkReviewTree(b *testing.B) {
	for _, files := range []int{1000, 100000} {
		ws := b.TempDir()
		if err := wstest.MakeTree(ws, files); err != nil {
			b.Fatal(err)
		}
		b.Setenv("AIRLOCK_CHANGES_DIR", filepath.Join(b.TempDir(), "changes"))
		next := 0
		setup := func(i int) *Run {
			next++
			r, err := Create(newTestID(next), ws, testProtected, nil)
			if err != nil {
				b.Fatal(err)
			}
			for k := 0; k < 10; k++ {
				p := wstest.Path(k * 97 % files)
				write(b, filepath.Join(r.Upper(), p), fmt.Sprintf("%s\nchanged %d\n", filepath.Base(p), i))
			}
			return r
		}
		b.Run(fmt.Sprintf("review/files=%d", files), func(b *testing.B) {
			r := setup(0)
			defer r.Discard()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				c, err := r.Changes(true)
				if err != nil || len(c) != 10 {
					b.Fatalf("%d changes, %v", len(c), err)
				}
			}
		})
		b.Run(fmt.Sprintf("apply/files=%d", files), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				r := setup(i + 1)
				b.StartTimer()
				rep, err := r.Apply()
				if err != nil || len(rep.Applied) != 10 {
					b.Fatalf("%v %v", rep, err)
				}
				if err := r.Finish(rep); err != nil {
					b.Fatal(err)
				}
				r.Close()
			}
		})
		os.RemoveAll(ws)
	}
}

// BenchmarkApplyRewrite: apply a layer that rewrites 2000 files (the
// journal keeps each old version: a hard link here).
func BenchmarkApplyRewrite(b *testing.B) {
	const files = 2000
	ws := b.TempDir()
	if err := wstest.MakeTree(ws, files); err != nil {
		b.Fatal(err)
	}
	b.Setenv("AIRLOCK_CHANGES_DIR", filepath.Join(b.TempDir(), "changes"))
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		r, err := Create(newTestID(i+1), ws, testProtected, nil)
		if err != nil {
			b.Fatal(err)
		}
		for k := 0; k < files; k++ {
			write(b, filepath.Join(r.Upper(), wstest.Path(k)), fmt.Sprintf("rewritten %d\n", i))
		}
		b.StartTimer()
		rep, err := r.Apply()
		if err != nil || len(rep.Applied) != files {
			b.Fatalf("%d applied, %v", len(rep.Applied), err)
		}
		if err := r.Finish(rep); err != nil {
			b.Fatal(err)
		}
		r.Close()
	}
}
