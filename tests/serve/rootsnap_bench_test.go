//go:build linux

package serve

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
)

// BenchmarkRootSnapshot measures what the root layer costs: a snapshot, a
// sandbox made from it, and a restore in place, of a sandbox whose root is
// as created ("clean"), of one with 50 MiB written into /usr/local, and of
// one with 200 small files in /etc; the workspace holds one small file.
//
//	go test -run '^$' -bench BenchmarkRootSnapshot -benchtime=5x ./tests/serve/
func BenchmarkRootSnapshot(b *testing.B) {
	d := startDaemon(b, "max_sandboxes: 8\n")
	if strings.Contains(d.Logs(), "workspaces are tmpfs") {
		b.Skip("this host cannot make loop volumes; snapshots need them")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	for _, c := range []struct{ name, fill string }{
		{"clean", "true"},
		{"usr50MiB", "head -c 52428800 /dev/urandom > /usr/local/blob"},
		{"etc200files", "mkdir /etc/many && for i in $(seq 200); do echo $i > /etc/many/f$i; done"},
	} {
		sb, err := d.c.CreateSandbox(ctx, &api.CreateSandboxRequest{Resources: api.Resources{Disk: "256M"}})
		if err != nil {
			b.Fatal(err)
		}
		res, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"sh", "-c", "echo w > /workspace/w && " + c.fill}, TimeoutSeconds: 300})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("fill: %v %+v", err, res)
		}
		b.Run("snapshot/"+c.name, func(b *testing.B) {
			for range b.N {
				sn, err := d.c.CreateSnapshot(ctx, sb.ID, nil)
				if err != nil || !sn.Root {
					b.Fatal(sn, err)
				}
				b.StopTimer()
				d.c.DeleteSnapshot(ctx, sn.ID)
				b.StartTimer()
			}
		})
		sn, err := d.c.CreateSnapshot(ctx, sb.ID, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Run("create-from/"+c.name, func(b *testing.B) {
			for range b.N {
				nb, err := d.c.CreateSandbox(ctx, &api.CreateSandboxRequest{FromSnapshot: sn.ID, Resources: api.Resources{Disk: "256M"}})
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				d.c.DeleteSandbox(ctx, nb.ID)
				b.StartTimer()
			}
		})
		b.Run("restore/"+c.name, func(b *testing.B) {
			for range b.N {
				if _, err := d.c.Restore(ctx, sb.ID, sn.ID); err != nil {
					b.Fatal(err)
				}
			}
		})
		d.c.DeleteSnapshot(ctx, sn.ID)
		d.c.DeleteSandbox(ctx, sb.ID)
	}
}
