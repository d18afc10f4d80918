//go:build linux

package serve

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
)

// TestPoolAcquisition: 50 concurrent creations from a warm pool of 50 get
// 50 distinct sandboxes, all from the pool, each clean: no files, no
// processes and no environment from anyone before (the previous holder of
// each sandbox is simulated by writing marks in others).
func TestPoolAcquisition(t *testing.T) {
	const n = 50
	// Small volumes: 100 sandboxes of the default 1 GiB would need that
	// much free space on the test host's disk (the daemon promises each
	// volume its size).
	pol := filepath.Join(t.TempDir(), "small.yaml")
	if err := os.WriteFile(pol, []byte("resources:\n  disk: 64M\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, fmt.Sprintf("max_sandboxes: 120\npolicies:\n  default: %s\npools:\n  - policy: default\n    size: %d\n", pol, n))
	eventually(t, 2*time.Minute, "a full pool", func() bool {
		return d.metric(t, `airlock_pool_ready{image="",policy="default"}`) == n
	})
	ctx := ctxT(t)
	var wg sync.WaitGroup
	ids := make([]string, n)
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			sb, err := d.c.CreateSandbox(ctx, &api.CreateSandboxRequest{Env: map[string]string{"WHO": fmt.Sprint(i)}})
			if err != nil {
				errs[i] = err
				return
			}
			ids[i] = sb.ID
			// Leave marks a later holder must never see.
			_, errs[i] = d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"sh", "-c", "echo x > /workspace/mark; echo y > /tmp/mark; sleep 300 &"}})
		}(i)
	}
	wg.Wait()
	seen := map[string]bool{}
	for i, id := range ids {
		if errs[i] != nil {
			t.Fatalf("creation %d: %v", i, errs[i])
		}
		if seen[id] {
			t.Fatalf("sandbox %s handed out twice", id)
		}
		seen[id] = true
	}
	if got := d.metric(t, `airlock_sandbox_create_seconds_count{source="pool"}`); got != n {
		t.Fatalf("%v creations came from the pool, want %d", got, n)
	}
	// Each holder sees its own environment only.
	for i, id := range ids {
		if got := d.sh(t, id, "echo $WHO"); got != fmt.Sprintf("%d\n", i) {
			t.Fatalf("sandbox %d env: %q", i, got)
		}
	}
	// Freshness: after the pool refills, new acquisitions see nothing of
	// the previous holders.
	eventually(t, 2*time.Minute, "a refilled pool", func() bool {
		return d.metric(t, `airlock_pool_ready{image="",policy="default"}`) >= 10
	})
	for i := 0; i < 10; i++ {
		sb := d.create(t, &api.CreateSandboxRequest{Env: map[string]string{"WHO": "new"}})
		if seen[sb.ID] {
			t.Fatalf("sandbox %s handed out again", sb.ID)
		}
		out := d.sh(t, sb.ID, `echo "$WHO"; ls -A /workspace /tmp; ps_count=0; for p in /proc/[0-9]*; do ps_count=$((ps_count+1)); done; echo procs=$ps_count; env | grep -c . `)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if lines[0] != "new" || strings.Contains(out, "mark") {
			t.Fatalf("pooled sandbox not clean: %q", out)
		}
		// PID 1 (the agent), the shell, and the command substitution child
		// at most: nothing left by anyone.
		if !strings.Contains(out, "procs=2") && !strings.Contains(out, "procs=3") {
			t.Fatalf("pooled sandbox has foreign processes: %q", out)
		}
	}
}

// TestConcurrentCreateExecDestroy: 100 at once all succeed (bursts queue).
// Their volumes are 64 MiB: the daemon promises each its size, and a dozen
// of the default 1 GiB at once need more free disk than a test host may
// have (they were refused with 429 on this one at 13 GiB free).
func TestConcurrentCreateExecDestroy(t *testing.T) {
	d := startDaemon(t, "")
	ctx := ctxT(t)
	const n = 100
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			sb, err := d.c.CreateSandbox(ctx, &api.CreateSandboxRequest{Resources: api.Resources{Disk: "64M"}})
			if err != nil {
				errs <- fmt.Errorf("create %d: %w", i, err)
				return
			}
			res, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"echo", fmt.Sprint(i)}})
			if err != nil || string(res.Stdout) != fmt.Sprintf("%d\n", i) {
				errs <- fmt.Errorf("exec %d: %v %+v", i, err, res)
			}
			if err := d.c.DeleteSandbox(ctx, sb.ID); err != nil {
				errs <- fmt.Errorf("delete %d: %w", i, err)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if left := d.stateEntries(); len(left) != 0 {
		t.Fatalf("state left: %v", left)
	}
}

// TestAdmission: beyond the live cap, creations wait in the queue; beyond
// the queue, 429 with Retry-After; a freed slot lets a waiter through.
func TestAdmission(t *testing.T) {
	d := startDaemon(t, "max_sandboxes: 2\nqueue_size: 1\nqueue_timeout: 20s\n")
	ctx := ctxT(t)
	a := d.create(t, nil)
	d.create(t, nil)
	waiter := make(chan error, 1)
	go func() {
		_, err := d.c.CreateSandbox(ctx, &api.CreateSandboxRequest{})
		waiter <- err
	}()
	eventually(t, 10*time.Second, "a queued creation", func() bool {
		return d.metric(t, "airlock_admission_queue_depth") == 1
	})
	_, err := d.c.CreateSandbox(ctx, &api.CreateSandboxRequest{})
	wantCode(t, "over capacity", err, http.StatusTooManyRequests)
	var e *client.Error
	if errors.As(err, &e); e.RetryAfter <= 0 {
		t.Fatalf("429 without Retry-After: %+v", e)
	}
	select {
	case err := <-waiter:
		t.Fatalf("the queued creation finished early: %v", err)
	default:
	}
	if err := d.c.DeleteSandbox(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waiter:
		if err != nil {
			t.Fatalf("queued creation: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the queued creation never got the freed slot")
	}
}

// TestLeak500 runs 500 create+exec+destroy cycles and checks that the
// host is as before: state directories, workspace volumes, cgroups,
// mounts, the daemon's descriptors and threads of processes.
func TestLeak500(t *testing.T) {
	d := startDaemon(t, "")
	ctx := ctxT(t)
	warm := d.create(t, nil)
	d.sh(t, warm.ID, "true")
	d.c.DeleteSandbox(ctx, warm.ID)
	pid := d.Pid()
	fds0, mounts0, cg0 := countFDs(pid), d.countMounts(), countCgroups()
	const n = 500
	const workers = 4
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < n/workers; i++ {
				sb, err := d.c.CreateSandbox(ctx, &api.CreateSandboxRequest{})
				if err == nil {
					_, err = d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"true"}})
					if derr := d.c.DeleteSandbox(ctx, sb.ID); err == nil {
						err = derr
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if left := d.stateEntries(); len(left) != 0 {
		t.Fatalf("%d state directories left", len(left))
	}
	// Workspace volumes (disk_quota) on the data disk: only the lock, the
	// daemon's blank images (one per volume size, cloned for each new
	// volume), and nothing in the latter but those, and its spare volumes
	// (spare_volumes, default 2, of the one size used: a directory and an
	// image each).
	vdir := filepath.Join(d.dir, "data", "volumes")
	vols, _ := os.ReadDir(vdir)
	var left, spares []string
	for _, v := range vols {
		switch {
		case strings.HasPrefix(v.Name(), ".spare-"):
			spares = append(spares, v.Name())
		case v.Name() != ".lock" && v.Name() != ".blank":
			left = append(left, v.Name())
		}
	}
	if len(left) > 0 {
		t.Fatalf("%d entries left in the volume directory: %v", len(left), left)
	}
	if len(spares) > 4 {
		t.Fatalf("%d spare volume entries, want at most 2 volumes: %v", len(spares), spares)
	}
	if blanks, _ := os.ReadDir(filepath.Join(vdir, ".blank")); len(blanks) > 1 {
		t.Fatalf("%d blank images for one volume size: %v", len(blanks), blanks)
	}
	// Descriptors may lag while goroutines wind down; allow a small slack
	// for the HTTP client's idle connections.
	eventually(t, 10*time.Second, "descriptors back to baseline", func() bool { return countFDs(pid) <= fds0+8 })
	if m := d.countMounts(); m > mounts0 {
		t.Fatalf("host mounts: %d -> %d", mounts0, m)
	}
	eventually(t, 15*time.Second, "cgroups back to baseline", func() bool { return countCgroups() <= cg0 })
	list, err := d.c.AllSandboxes(ctx, client.ListOptions{})
	if err != nil || len(list) != 0 {
		t.Fatalf("sandboxes left in the API: %d %v", len(list), err)
	}
}

func countFDs(pid int) int {
	e, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(e)
}

// countMounts counts the host's mounts that are this daemon's or airlock's:
// under its directory (workspace volumes) or under an airlock directory.
// Mounts other programs make meanwhile do not count.
func (d *daemon) countMounts() int {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		// Not the tmpfs on /run/airlock itself, made once and kept
		// (internal/rundir), nor the spare volumes, made ahead and kept
		// (spare_volumes: their number varies while they are made again).
		if f := strings.Fields(line); len(f) > 4 && (strings.HasPrefix(f[4], d.dir+"/") || strings.Contains(f[4]+"/", "/airlock/")) && f[4] != "/run/airlock" && !strings.Contains(f[4], "/.spare-") {
			n++
		}
	}
	return n
}

// countCgroups counts airlock's sandbox cgroups in every hierarchy.
func countCgroups() int {
	n := 0
	filepath.WalkDir("/sys/fs/cgroup", func(p string, de os.DirEntry, err error) error {
		if err != nil {
			return filepath.SkipDir
		}
		if de.IsDir() && strings.Contains(p, "airlock") {
			n++
		}
		return nil
	})
	return n
}
