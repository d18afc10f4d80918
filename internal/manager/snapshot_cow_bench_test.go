//go:build linux

package manager

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkOverlayFork measures what a copy-on-write fork would cost: 10
// overlays over one shared, immutable snapshot tree (the lower), each with
// an empty upper of its own, one file written through each, all
// unmounted. The daemon does not do this yet (a daemon sandbox's
// workspace is a volume of its own, and the native runtime gives it no
// overlay); the numbers are the kernel's side of the design the README
// names. Needs root.
//
//	go test -run '^$' -bench BenchmarkOverlayFork ./internal/manager/
func BenchmarkOverlayFork(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root (overlay mounts)")
	}
	for _, mib := range []int{10, 100, 1024} {
		dir := b.TempDir()
		lower := filepath.Join(dir, "lower")
		if err := os.MkdirAll(filepath.Join(lower, "src"), 0o755); err != nil {
			b.Fatal(err)
		}
		f, err := os.Create(filepath.Join(lower, "blob"))
		if err != nil {
			b.Fatal(err)
		}
		buf := make([]byte, 1<<20)
		for i := range buf {
			buf[i] = byte(i * 7)
		}
		for range mib {
			f.Write(buf)
		}
		f.Close()
		for i := range 200 {
			os.WriteFile(filepath.Join(lower, "src", fmt.Sprint("f", i)), []byte("x\n"), 0o644)
		}
		b.Run(fmt.Sprintf("fork10/%dMiB", mib), func(b *testing.B) {
			for n := range b.N {
				var mnts []string
				for i := range 10 {
					base := filepath.Join(dir, fmt.Sprintf("f%d-%d", n, i))
					up, work, mnt := base+"/upper", base+"/work", base+"/mnt"
					for _, d := range []string{up, work, mnt} {
						if err := os.MkdirAll(d, 0o755); err != nil {
							b.Fatal(err)
						}
					}
					if err := unix.Mount("overlay", mnt, "overlay", 0, "lowerdir="+lower+",upperdir="+up+",workdir="+work); err != nil {
						b.Skipf("overlay: %v", err)
					}
					mnts = append(mnts, mnt)
					if err := os.WriteFile(filepath.Join(mnt, "src", "f1"), []byte("mine\n"), 0o644); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				for _, m := range mnts {
					unix.Unmount(m, 0)
				}
				b.StartTimer()
			}
		})
	}
}
