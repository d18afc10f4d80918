//go:build linux

package serve

import (
	"os"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/api"
)

// A gVisor pool member runs one hidden command before it is handed out
// (its first command's one-time costs, paid by the pool): the metric
// counts it, and nothing of it shows to the caller. The first command gets
// the same process id as in a sandbox that ran nothing before (the native
// pool's member, which is not warmed), the sandbox lists only the caller's
// processes, and no other process is left in the sandbox.
func TestGvisorPoolWarmUp(t *testing.T) {
	need(t)
	gvisorOrSkip(t)
	d := startTwoPools(t)
	if n := d.metric(t, `airlock_pool_warmups_total{runtime="gvisor",result="ok"}`); n < 1 {
		t.Fatalf("gvisor pool member filled without a warm-up: airlock_pool_warmups_total ok = %v", n)
	}
	if n := d.metric(t, `airlock_pool_warmups_total{runtime="gvisor",result="failed"}`); n != 0 {
		t.Fatalf("gvisor warm-ups failed: %v", n)
	}
	if n := d.metric(t, `airlock_pool_warmups_total{runtime="native",result="ok"}`); n != 0 {
		t.Fatalf("native pool members are not warmed, yet the metric counts %v", n)
	}
	members := map[string]bool{}
	ents, _ := os.ReadDir(d.stateDir + "-gvisor")
	for _, e := range ents {
		if len(e.Name()) == 16 {
			members["sb-"+e.Name()] = true
		}
	}
	gv := d.create(t, &api.CreateSandboxRequest{Runtime: "gvisor"})
	if !members[gv.ID] {
		t.Fatalf("gvisor request got %s, not the pool's member %v", gv.ID, members)
	}
	nat := d.create(t, &api.CreateSandboxRequest{})

	// Every process of the sandbox but the agent (PID 1) and the command
	// itself: none (a warm-up left running or unreaped would show).
	script := `for p in /proc/[0-9]*; do p=${p#/proc/}; [ "$p" = 1 ] || [ "$p" = $$ ] || echo "$p $(cat /proc/$p/cmdline 2>/dev/null | tr '\0' ' ')"; done; echo end`
	first := map[string]string{}
	for _, id := range []string{nat.ID, gv.ID} {
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
	if first[gv.ID] == "" || first[gv.ID] != first[nat.ID] {
		t.Fatalf("first process id of the warmed gvisor sandbox %q, of a sandbox that ran nothing before %q", first[gv.ID], first[nat.ID])
	}
	// The next command gets the next id, as anywhere.
	res, err := d.c.Exec(ctxT(t), gv.ID, &api.ExecRequest{Argv: []string{"true"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("second exec: %v %+v", err, res)
	}
	if res.ProcessID == first[gv.ID] {
		t.Fatalf("second process reused the id %s", res.ProcessID)
	}
}
