//go:build linux

package serve

import (
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
)

// TestPoolAssignmentStored: a sandbox taken from the warm pool is its
// caller's in the store by the time the creation answers. Listed by its
// labels at once (List reads the store), it is there, ten times in a row;
// after a command and a SIGKILL of the daemon it is adopted back as the
// caller's sandbox, labels and file kept, and not removed as a pool
// member, which a restart does to the members nobody took; no other
// sandbox shows running to callers afterwards. A write of the assignment
// left to run beside the answer, unwaited for, failed the listing in two
// runs of three (with five rounds).
func TestPoolAssignmentStored(t *testing.T) {
	d := startDaemon(t, "pools:\n  - policy: default\n    size: 2\n")
	ctx := ctxT(t)
	const rounds = 10
	for i := 0; i < rounds; i++ {
		eventually(t, 90*time.Second, "a full pool", func() bool {
			return d.metric(t, `airlock_pool_ready{image="",policy="default"}`) == 2
		})
		sb := d.create(t, &api.CreateSandboxRequest{Labels: map[string]string{"assigned": "yes"}})
		list, err := d.c.ListSandboxes(ctx, client.ListOptions{Labels: map[string]string{"assigned": "yes"}})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, s := range list.Sandboxes {
			found = found || s.ID == sb.ID
		}
		if !found {
			t.Fatalf("round %d: sandbox %s from the pool not listed by its label right after its creation: %+v", i, sb.ID, list.Sandboxes)
		}
		if i < rounds-1 {
			if err := d.c.DeleteSandbox(ctx, sb.ID); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if got := d.sh(t, sb.ID, "echo kept > /workspace/f; cat /workspace/f"); got != "kept\n" {
			t.Fatalf("exec: %q", got)
		}
		if got := d.metric(t, `airlock_sandbox_create_seconds_count{source="pool"}`); got != rounds {
			t.Fatalf("%v creations from the pool, want %d", got, rounds)
		}
		d.restart(syscall.SIGKILL)
		got, err := d.c.GetSandbox(ctx, sb.ID)
		if err != nil || got.State != api.StateRunning || got.Labels["assigned"] != "yes" {
			t.Fatalf("after the restart: %+v, %v (want running, labelled)", got, err)
		}
		if out := d.sh(t, sb.ID, "cat /workspace/f"); out != "kept\n" {
			t.Fatalf("after the restart: /workspace/f %q", out)
		}
		all, err := d.c.AllSandboxes(ctx, client.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range all {
			if s.ID != sb.ID && s.State == api.StateRunning {
				t.Errorf("sandbox %s running after the restart: only the caller's should be", s.ID)
			}
		}
	}
}
