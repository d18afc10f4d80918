package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/internal/runtime/gvisor"
)

// gvisorServeRows measures airlock serve's gVisor sandboxes with a daemon of
// their own (started after the native rows, so that neither disturbs the
// other): create -> first exec from a warm pool and cold, the exec round
// trip against runsc's own `runsc exec` in the same sandbox, and the memory
// of idle gVisor sandboxes (PSS of every host process of each sandbox: the
// Sentry, which holds the agent and its guest memory, the Gofer and the
// systrap stubs).
func gvisorServeRows(al string, n, idle int) {
	runsc, err := gvisor.Find()
	if err != nil {
		fmt.Printf("\ngvisor rows skipped: %v\n", err)
		return
	}
	if os.Geteuid() != 0 {
		fmt.Printf("\ngvisor rows skipped: the daemon's gvisor sandboxes need root\n")
		return
	}
	daemon, err := newBenchDaemon(al, "airlock-bench-gvisor-")
	if err != nil {
		logf("%v", err)
		return
	}
	dir := daemon.dir
	const poolSize = 4
	empty := filepath.Join(dir, "cold.yaml")
	os.WriteFile(empty, []byte("runtime: gvisor\n"), 0o644)
	sock := daemon.sock()
	state := daemon.stateDir()
	daemon.cfg = fmt.Sprintf("socket: %s\ndata_dir: %s\nstate_dir: %s\nlog_level: warn\nmax_sandboxes: %d\nmax_creating: 4\ndefault_runtime: gvisor\npolicies:\n  cold: %s\npools:\n  - policy: default\n    size: %d\n",
		sock, filepath.Join(dir, "data"), state, idle+poolSize+16, empty, poolSize)
	ctx := context.Background()
	defer daemon.cleanup()
	if err := daemon.start(ctx); err != nil {
		logf("gvisor rows: %v", err)
		return
	}
	daemon.created = true // its warm pool fills from the start
	c := daemon.c
	fail := func(what string, err error) {
		logf("gvisor rows: %s: %v\n%s", what, err, daemon.log.String())
	}
	poolReady := func() float64 {
		return metric(sock, `airlock_pool_ready_by_runtime{runtime="gvisor",image="",policy="default"}`)
	}
	waitPool := func() {
		for i := 0; i < 3000 && poolReady() < poolSize; i++ {
			time.Sleep(10 * time.Millisecond)
		}
	}
	var warmCreate, warmFirst []float64 // the warm row's two calls
	createExec := func(policy string) (float64, string, error) {
		t0 := time.Now()
		sb, err := c.CreateSandbox(ctx, &api.CreateSandboxRequest{PolicyName: policy})
		if err != nil {
			return 0, "", err
		}
		t1 := time.Now()
		res, err := c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"true"}})
		d := float64(time.Since(t0).Microseconds()) / 1000
		if policy == "" {
			warmCreate = append(warmCreate, float64(t1.Sub(t0).Microseconds())/1000)
			warmFirst = append(warmFirst, float64(time.Since(t1).Microseconds())/1000)
		}
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("true exited %d", res.ExitCode)
		}
		if err == nil && sb.Runtime != gvisor.Name {
			err = fmt.Errorf("sandbox %s has runtime %q", sb.ID, sb.Runtime)
		}
		return d, sb.ID, err
	}
	var warm, cold, rtt, runscRTT []float64
	for i := -1; i < n; i++ {
		waitPool()
		d, id, err := createExec("")
		if err != nil {
			fail("warm create+exec", err)
			return
		}
		c.DeleteSandbox(ctx, id)
		d2, id2, err := createExec("cold")
		if err != nil {
			fail("cold create+exec", err)
			return
		}
		c.DeleteSandbox(ctx, id2)
		if i >= 0 {
			warm, cold = append(warm, d), append(cold, d2)
		} else {
			warmCreate, warmFirst = nil, nil // the warm-up
		}
	}
	// Exec round trips in one running sandbox: through the daemon, and
	// runsc's own exec of the same command in it (with the sandbox's own
	// runsc flags), interleaved.
	sb, err := c.CreateSandbox(ctx, &api.CreateSandboxRequest{PolicyName: "cold"})
	if err != nil {
		fail("create", err)
		return
	}
	rid := strings.TrimPrefix(sb.ID, "sb-")
	var svc struct {
		Global []string `json:"global"`
	}
	raw, err := os.ReadFile(filepath.Join(state+"-gvisor", rid, "service.json"))
	if err == nil {
		err = json.Unmarshal(raw, &svc)
	}
	if err != nil {
		fail("the sandbox's runsc flags", err)
		return
	}
	runscExec := append(append([]string{runsc}, svc.Global...), "exec", rid, "/bin/true")
	for i := -5; i < n; i++ {
		t0 := time.Now()
		if _, err := c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"true"}}); err != nil {
			fail("exec", err)
			return
		}
		d := float64(time.Since(t0).Microseconds()) / 1000
		t1 := time.Now()
		if out, err := exec.Command(runscExec[0], runscExec[1:]...).CombinedOutput(); err != nil {
			fail("runsc exec", fmt.Errorf("%v: %s", err, out))
			return
		}
		d2 := float64(time.Since(t1).Microseconds()) / 1000
		if i >= 0 {
			rtt, runscRTT = append(rtt, d), append(runscRTT, d2)
		}
	}
	c.DeleteSandbox(ctx, sb.ID)

	// Memory per idle sandbox.
	waitPool()
	time.Sleep(time.Second)
	avail0 := memAvailable()
	ids := make([]string, 0, idle)
	for i := 0; i < idle; i++ {
		s, err := c.CreateSandbox(ctx, &api.CreateSandboxRequest{PolicyName: "cold"})
		if err != nil {
			fail("idle sandboxes", err)
			return
		}
		if _, err := c.Exec(ctx, s.ID, &api.ExecRequest{Argv: []string{"true"}}); err != nil {
			fail("idle sandboxes", err)
			return
		}
		ids = append(ids, s.ID)
	}
	time.Sleep(2 * time.Second)
	avail1 := memAvailable()
	var pss float64
	for _, id := range ids {
		pss += cgroupPss(strings.TrimPrefix(id, "sb-"))
	}
	for _, id := range ids {
		c.DeleteSandbox(ctx, id)
	}

	fmt.Printf("\nairlock serve on gVisor (runsc %s, platform systrap): %d samples per latency row\n\n", gvisor.Version, n)
	fmt.Printf("%-48s %10s %10s %10s %s\n", "", "median", "p95", "min", "target")
	latencyRow("gvisor: create -> first exec, warm pool (SDK)", warm, "p50 <= 5 ms")
	latencyRow("  of which: create from the pool", warmCreate, "")
	latencyRow("  of which: the first exec", warmFirst, "")
	latencyRow("gvisor: create -> first exec, cold (SDK)", cold, "")
	latencyRow("gvisor: exec round trip of true (SDK)", rtt, "")
	latencyRow("reference: runsc exec <sandbox> /bin/true", runscRTT, "")
	fmt.Printf("\nratio (median): gvisor exec round trip / runsc exec = %.2f (target <= 0.5)\n", median(sorted(rtt))/median(sorted(runscRTT)))
	if idle == 0 {
		fmt.Println("memory per idle gvisor sandbox: not measured (-gvisor-idle 0)")
		return
	}
	fmt.Printf("memory per idle gvisor sandbox over %d sandboxes:\n", idle)
	fmt.Printf("  host total (MemAvailable drop / n)           %8.2f MiB\n", float64(avail0-avail1)/float64(idle)/1024)
	fmt.Printf("  PSS of its host processes (Sentry with the agent, Gofer, stubs), mean %6.2f MiB\n", pss/float64(idle)/1024)
}

// cgroupPss sums the PSS (KiB) of the processes in the sandbox's cgroups
// (each pid once, over every v1 hierarchy or the v2 one).
func cgroupPss(rid string) float64 {
	seen := map[int]bool{}
	var total float64
	var files []string
	for _, pat := range []string{"/sys/fs/cgroup/*/airlock/" + rid + "/cgroup.procs", "/sys/fs/cgroup/airlock/" + rid + "/cgroup.procs"} {
		m, _ := filepath.Glob(pat)
		files = append(files, m...)
	}
	for _, f := range files {
		b, _ := os.ReadFile(f)
		for _, l := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(l)
			if err != nil || seen[pid] {
				continue
			}
			seen[pid] = true
			total += float64(meminfo(fmt.Sprintf("/proc/%d/smaps_rollup", pid), "Pss:"))
		}
	}
	return total
}
