//go:build linux

package serve

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
)

// A pool member runs one hidden command before it is handed out (its
// first command's one-time costs, paid by the pool), on every runtime:
// the metric counts it, and nothing of it shows to the caller. The first
// command gets the same process id as in a sandbox of the same runtime
// made cold (which ran nothing before), the sandbox lists only the
// caller's processes, and no other process is left in the sandbox.
func TestPoolWarmUp(t *testing.T) {
	need(t)
	for _, b := range serveBackends() {
		t.Run(b.name, func(t *testing.T) {
			if b.skip != "" {
				t.Skip(b.skip)
			}
			cold := filepath.Join(t.TempDir(), "cold.yaml")
			if err := os.WriteFile(cold, []byte("runtime: "+b.name+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			d := startDaemon(t, fmt.Sprintf("policies:\n  cold: %s\npools:\n  - {policy: default, runtime: %s, size: 1}\n", cold, b.name))
			eventually(t, 90*time.Second, "the pool to fill", func() bool {
				return d.metric(t, `airlock_pool_ready_by_runtime{runtime="`+b.name+`",image="",policy="default"}`) == 1
			})
			if n := d.metric(t, `airlock_pool_warmups_total{runtime="`+b.name+`",result="ok"}`); n < 1 {
				t.Fatalf("pool member filled without a warm-up: airlock_pool_warmups_total ok = %v", n)
			}
			if n := d.metric(t, `airlock_pool_warmups_total{runtime="`+b.name+`",result="failed"}`); n != 0 {
				t.Fatalf("warm-ups failed: %v", n)
			}
			members := map[string]bool{}
			ents, _ := os.ReadDir(b.state(d))
			for _, e := range ents {
				if len(e.Name()) == 16 {
					members["sb-"+e.Name()] = true
				}
			}
			warm := d.create(t, &api.CreateSandboxRequest{Runtime: b.name})
			if !members[warm.ID] {
				t.Fatalf("the request got %s, not the pool's member %v", warm.ID, members)
			}
			ref := d.create(t, &api.CreateSandboxRequest{PolicyName: "cold"})
			if members[ref.ID] {
				t.Fatalf("the cold policy's sandbox %s came from the pool", ref.ID)
			}

			// Every process of the sandbox but the agent (PID 1) and the
			// command itself: none (a warm-up left running or unreaped
			// would show).
			script := `for p in /proc/[0-9]*; do p=${p#/proc/}; [ "$p" = 1 ] || [ "$p" = $$ ] || echo "$p $(cat /proc/$p/cmdline 2>/dev/null | tr '\0' ' ')"; done; echo end`
			first := map[string]string{}
			for _, id := range []string{ref.ID, warm.ID} {
				res, err := d.c.Exec(ctxT(t), id, &api.ExecRequest{Argv: []string{"sh", "-c", script}})
				if err != nil {
					t.Fatalf("%s: exec: %v", id, err)
				}
				if res.ExitCode != 0 || strings.TrimSpace(string(res.Stdout)) != "end" {
					t.Fatalf("%s: other processes in the sandbox (exit %d): %q, stderr %q", id, res.ExitCode, res.Stdout, res.Stderr)
				}
				first[id] = res.ProcessID
				procs, err := d.c.ListProcesses(ctxT(t), id)
				if err != nil {
					t.Fatal(err)
				}
				if len(procs) != 1 || procs[0].ID != res.ProcessID {
					t.Fatalf("%s: processes %+v, want only the caller's %s", id, procs, res.ProcessID)
				}
			}
			if first[warm.ID] == "" || first[warm.ID] != first[ref.ID] {
				t.Fatalf("first process id of the warmed sandbox %q, of a sandbox that ran nothing before %q", first[warm.ID], first[ref.ID])
			}
			// The next command gets the next id, as anywhere.
			res, err := d.c.Exec(ctxT(t), warm.ID, &api.ExecRequest{Argv: []string{"true"}})
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("second exec: %v %+v", err, res)
			}
			if res.ProcessID == first[warm.ID] {
				t.Fatalf("second process reused the id %s", res.ProcessID)
			}
		})
	}
}

// A pool of an image without true: its members are not warmed, which is
// counted as skipped (not failed: nothing is wrong with them), and they
// are handed out as any member.
func TestPoolWarmUpWithoutTrue(t *testing.T) {
	need(t)
	img := filepath.Join(t.TempDir(), "img")
	if err := os.MkdirAll(filepath.Join(img, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Dir(img), 0o755)
	d := startDaemon(t, "images:\n  empty: "+img+"\npools:\n  - {image: empty, policy: default, size: 1}\n")
	eventually(t, 60*time.Second, "the pool to fill", func() bool {
		return d.metric(t, `airlock_pool_ready_by_runtime{runtime="native",image="empty",policy="default"}`) == 1
	})
	if n := d.metric(t, `airlock_pool_warmups_total{runtime="native",result="skipped"}`); n < 1 {
		t.Errorf("warm-ups skipped: %v, want at least 1", n)
	}
	for _, r := range []string{"ok", "failed"} {
		if n := d.metric(t, `airlock_pool_warmups_total{runtime="native",result="`+r+`"}`); n != 0 {
			t.Errorf("warm-ups %s: %v, want 0", r, n)
		}
	}
	members := map[string]bool{}
	ents, _ := os.ReadDir(d.stateDir)
	for _, e := range ents {
		if len(e.Name()) == 16 {
			members["sb-"+e.Name()] = true
		}
	}
	sb := d.create(t, &api.CreateSandboxRequest{Image: "empty"})
	if !members[sb.ID] {
		t.Fatalf("the request got %s, not the pool's member %v", sb.ID, members)
	}
	if procs, err := d.c.ListProcesses(ctxT(t), sb.ID); err != nil || len(procs) != 0 {
		t.Fatalf("processes of the member: %+v %v", procs, err)
	}
}
