//go:build linux

package serve

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
)

// BenchmarkSnapshot measures a snapshot, a fork of 10 and a restore
// against the size of the workspace (10 MiB, 100 MiB, 1 GiB of data in
// one file plus 200 small files), side by side for copy-on-write (clone:
// the volumes' images cloned) and copying (copy: copy_on_write off). Run
// with -benchtime=3x: each copying fork of 1 GiB writes 11 GiB.
//
//	go test -run '^$' -bench BenchmarkSnapshot -benchtime=3x ./tests/serve/
func BenchmarkSnapshot(b *testing.B) {
	for _, method := range []string{"clone", "copy"} {
		b.Run(method, func(b *testing.B) { benchSnapshot(b, method) })
	}
}

func benchSnapshot(b *testing.B, method string) {
	conf := "max_sandboxes: 24\nqueue_timeout: 300s\n"
	if method == "copy" {
		conf += "copy_on_write: off\n"
	}
	d := startDaemon(b, conf)
	if strings.Contains(d.Logs(), "workspaces are tmpfs") {
		b.Skip("this host cannot make loop volumes; snapshots need them")
	}
	if method == "clone" && !strings.Contains(d.Logs(), "snapshots: copy-on-write") {
		b.Skip("this daemon's snapshots are not copy-on-write (see its warning: install xfsprogs)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	for _, mib := range []int{10, 100, 1024} {
		sb, err := d.c.CreateSandbox(ctx, &api.CreateSandboxRequest{Resources: api.Resources{Disk: fmt.Sprintf("%dM", mib+256)}})
		if err != nil {
			b.Fatal(err)
		}
		res, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"sh", "-c", fmt.Sprintf(
			`head -c %d /dev/urandom > /workspace/blob && mkdir /workspace/src && for i in $(seq 200); do echo "file $i" > /workspace/src/f$i.txt; done`, mib<<20)}, TimeoutSeconds: 600})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("fill %d MiB: %v %+v", mib, err, res)
		}
		b.Run(fmt.Sprintf("snapshot/%dMiB", mib), func(b *testing.B) {
			for range b.N {
				sn, err := d.c.CreateSnapshot(ctx, sb.ID, nil)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := d.c.DeleteSnapshot(ctx, sn.ID); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
		b.Run(fmt.Sprintf("fork10/%dMiB", mib), func(b *testing.B) {
			for range b.N {
				r, err := d.c.Fork(ctx, sb.ID, &api.ForkRequest{Count: 10})
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				for _, f := range r.Sandboxes {
					d.c.DeleteSandbox(ctx, f.ID)
				}
				d.c.DeleteSnapshot(ctx, r.Snapshot.ID)
				b.StartTimer()
			}
		})
		b.Run(fmt.Sprintf("restore/%dMiB", mib), func(b *testing.B) {
			sn, err := d.c.CreateSnapshot(ctx, sb.ID, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				if _, err := d.c.Restore(ctx, sb.ID, sn.ID); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			d.c.DeleteSnapshot(ctx, sn.ID)
		})
		d.c.DeleteSandbox(ctx, sb.ID)
	}
}
