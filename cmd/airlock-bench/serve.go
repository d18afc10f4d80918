package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	goruntime "runtime"

	"github.com/airlock-dev/airlock/api"
)

// runServe measures `airlock serve` through the Go SDK, against a daemon it
// starts with its own directories: create->first exec from a warm pool and
// cold, the exec round trip, sustained create+exec+destroy throughput, and
// memory per idle sandbox. One-shot `airlock run` and bubblewrap rows,
// measured in the same run, put the numbers in context.
func runServe(args []string) int {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	n := fs.Int("n", 100, "samples of each latency")
	airlockPath := fs.String("airlock", "./bin/airlock", "airlock binary")
	bwrapPath := fs.String("bwrap", "bwrap", "bubblewrap binary for the reference row")
	idle := fs.Int("idle", 200, "idle sandboxes for the memory measurement")
	idleDisk := fs.String("idle-disk", "", "disk size of each idle sandbox (\"64M\"; empty: the policy's default): every volume reserves its size on the data disk")
	dur := fs.Duration("duration", 10*time.Second, "length of the throughput run")
	workers := fs.Int("workers", 4, "concurrent clients in the throughput run")
	pySDK := fs.String("python-sdk", "sdk/python", "the Python SDK, for its rows next to the Go SDK's")
	e2bSDK := fs.String("e2b-sdk", "tests/e2b/sdk", "the pinned E2B SDK (package-lock and bench.mjs) for the E2B rows; \"\" skips them")
	e2bN := fs.Int("e2b-n", 20, "samples of each E2B row")
	e2bOnly := fs.Bool("e2b-only", false, "measure only the E2B rows")
	tsSDK := addTypeScriptFlag(fs)
	gvIdle := fs.Int("gvisor-idle", 20, "idle gVisor sandboxes for their memory measurement (0 skips the gvisor rows)")
	gvOnly := fs.Bool("gvisor-only", false, "measure only the gvisor rows")
	fs.Parse(args)
	al, err := filepath.Abs(*airlockPath)
	if err != nil {
		logf("%v", err)
		return 2
	}
	if *gvOnly {
		gvisorServeRows(al, *n, *gvIdle)
		return 0
	}
	if *e2bOnly {
		e2bRows(al, *e2bSDK, *tsSDK, *e2bN)
		return 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	daemon, err := newBenchDaemon(al, "airlock-bench-serve-")
	if err != nil {
		logf("%v", err)
		return 1
	}
	dir := daemon.dir
	const poolSize = 8
	empty := filepath.Join(dir, "cold.yaml")
	os.WriteFile(empty, []byte("{}\n"), 0o644)
	sock := daemon.sock()
	daemon.cfg = fmt.Sprintf("socket: %s\ndata_dir: %s\nstate_dir: %s\nlog_level: warn\nmax_sandboxes: %d\nmax_creating: 4\npolicies:\n  cold: %s\npools:\n  - policy: default\n    size: %d\n",
		sock, filepath.Join(dir, "data"), daemon.stateDir(), *idle+poolSize+16, empty, poolSize)
	defer daemon.cleanup()
	if err := daemon.start(ctx); err != nil {
		logf("%v", err)
		return 1
	}
	daemon.created = true // its warm pool fills from the start
	c := daemon.c
	poolReady := func() float64 { return metric(sock, `airlock_pool_ready{image="",policy="default"}`) }
	waitPool := func() {
		for i := 0; i < 500 && poolReady() < poolSize; i++ {
			time.Sleep(10 * time.Millisecond)
		}
	}
	fail := func(what string, err error) int {
		logf("%s: %v\n%s", what, err, daemon.log.String())
		return 1
	}
	// Latencies, interleaved: warm, cold, one-shot airlock run, bwrap.
	var warm, cold, oneshot, bw, rtt []float64
	r := &runner{}
	r.errf, _ = os.CreateTemp(dir, "stderr")
	bwOK := true
	if _, err := exec.LookPath(*bwrapPath); err != nil {
		bwOK = false
	}
	bwArgv := []string{*bwrapPath, "--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--proc", "/proc", "--dev", "/dev", "/bin/true"}
	for i := -1; i < *n; i++ {
		waitPool()
		d, err := createExecMs(ctx, c, &api.CreateSandboxRequest{})
		if err != nil {
			return fail("warm create+exec", err)
		}
		d2, err := createExecMs(ctx, c, &api.CreateSandboxRequest{PolicyName: "cold"})
		if err != nil {
			return fail("cold create+exec", err)
		}
		d3, _, err := r.run([]string{al, "run", "--", "/bin/true"})
		if err != nil {
			return fail("airlock run", err)
		}
		var d4 float64
		if bwOK {
			if d4, _, err = r.run(bwArgv); err != nil {
				bwOK = false
			}
		}
		if i >= 0 { // the first round warms caches
			warm, cold, oneshot = append(warm, d), append(cold, d2), append(oneshot, d3)
			if bwOK {
				bw = append(bw, d4)
			}
		}
	}
	sb, err := c.CreateSandbox(ctx, &api.CreateSandboxRequest{PolicyName: "cold"})
	if err != nil {
		return fail("create", err)
	}
	for i := -5; i < *n*5; i++ {
		t0 := time.Now()
		if _, err := c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"true"}}); err != nil {
			return fail("exec", err)
		}
		if i >= 0 {
			rtt = append(rtt, float64(time.Since(t0).Microseconds())/1000)
		}
	}
	// The same round trip and bwrap again, each after a pause, turn
	// about: a request that finds the machine idle pays for waking it
	// (on a VM, halted vCPUs; cold caches) on every hop between
	// processes, and the warm row above starts from such a pause (the
	// pool refilling) while bwrap's row runs right after other work.
	var rttIdle, bwIdle []float64
	for i := -1; i < *n; i++ {
		time.Sleep(idlePause)
		t0 := time.Now()
		if _, err := c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"true"}}); err != nil {
			return fail("exec", err)
		}
		d := float64(time.Since(t0).Microseconds()) / 1000
		var d2 float64
		if bwOK {
			time.Sleep(idlePause)
			if d2, _, err = r.run(bwArgv); err != nil {
				bwOK = false
			}
		}
		if i >= 0 {
			rttIdle = append(rttIdle, d)
			if bwOK {
				bwIdle = append(bwIdle, d2)
			}
		}
	}
	c.DeleteSandbox(ctx, sb.ID)

	// Throughput: workers loop create+exec+destroy for the duration.
	// Each cycle's time is kept too, for its p50 and p99.
	tput := func(policy string) (float64, []float64, error) {
		var done atomic.Int64
		var firstErr atomic.Value
		var mu sync.Mutex
		var cycles []float64
		stop := time.Now().Add(*dur)
		var wg sync.WaitGroup
		for w := 0; w < *workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(stop) {
					c0 := time.Now()
					_, err := createExecMs(ctx, c, &api.CreateSandboxRequest{PolicyName: policy})
					if err != nil {
						firstErr.CompareAndSwap(nil, err)
						return
					}
					d := float64(time.Since(c0)) / float64(time.Millisecond)
					mu.Lock()
					cycles = append(cycles, d)
					mu.Unlock()
					done.Add(1)
				}
			}()
		}
		t0 := time.Now()
		wg.Wait()
		if e, _ := firstErr.Load().(error); e != nil {
			return 0, nil, e
		}
		return float64(done.Load()) / time.Since(t0).Seconds(), cycles, nil
	}
	tCold, cCold, err := tput("cold")
	if err != nil {
		return fail("throughput (cold)", err)
	}
	waitPool()
	tWarm, cWarm, err := tput("")
	if err != nil {
		return fail("throughput (pool)", err)
	}

	// Memory per idle sandbox.
	waitPool()
	time.Sleep(time.Second)
	avail0, rss0 := memAvailable(), rss(daemon.cmd.Process.Pid)
	ids := make([]string, 0, *idle)
	for i := 0; i < *idle; i++ {
		s, err := c.CreateSandbox(ctx, &api.CreateSandboxRequest{PolicyName: "cold", Resources: api.Resources{Disk: *idleDisk}})
		if err != nil {
			return fail("idle sandboxes", err)
		}
		ids = append(ids, s.ID)
	}
	time.Sleep(2 * time.Second)
	avail1, rss1 := memAvailable(), rss(daemon.cmd.Process.Pid)
	pss := agentsPss(daemon.stateDir())
	// The same sandboxes once their agents sleep (sleep_after, the
	// daemon's default), then the first exec in each of some of them,
	// which wakes it, against a second one.
	asleep := func() float64 { return metric(sock, `airlock_sandboxes_asleep{runtime="native"}`) }
	for i := 0; i < 600 && asleep() < float64(*idle); i++ {
		time.Sleep(100 * time.Millisecond)
	}
	nAsleep := asleep()
	time.Sleep(time.Second)
	avail2, rss2 := memAvailable(), rss(daemon.cmd.Process.Pid)
	pssAsleep := agentsPss(daemon.stateDir())
	var wake, awake []float64
	for _, id := range ids[:min(len(ids), *n)] {
		for _, row := range []*[]float64{&wake, &awake} {
			t0 := time.Now()
			if _, err := c.Exec(ctx, id, &api.ExecRequest{Argv: []string{"true"}}); err != nil {
				return fail("exec after a sleep", err)
			}
			*row = append(*row, float64(time.Since(t0).Microseconds())/1000)
		}
	}
	for _, id := range ids {
		c.DeleteSandbox(ctx, id)
	}
	perSandbox := float64(avail0-avail1) / float64(*idle) / 1024
	daemonPer := float64(rss1-rss0) / float64(*idle) / 1024
	agentPer := pss / float64(max(len(ids), 1)) / 1024
	perAsleep := float64(avail0-avail2) / float64(*idle) / 1024
	daemonAsleep := float64(rss2-rss0) / float64(*idle) / 1024
	agentAsleep := pssAsleep / float64(max(len(ids), 1)) / 1024

	fmt.Printf("airlock serve benchmark: %d samples per latency row, %d CPUs, kernel %s\n\n", *n, goruntime.NumCPU(), kernel())
	fmt.Printf("%-48s %10s %10s %10s %s\n", "", "median", "p95", "min", "target")
	latencyRow("create -> first exec, warm pool (SDK)", warm, "p50 <= 0.25x bwrap")
	latencyRow("create -> first exec, cold (SDK)", cold, "p50 <= 2x bwrap")
	latencyRow("exec round trip of true, running sandbox (SDK)", rtt, "p50 <= 0.2x bwrap")
	latencyRow("reference: airlock run -- /bin/true (one-shot)", oneshot, "")
	latencyRow("reference: bwrap --unshare-all /bin/true", bw, "")
	latencyRow(fmt.Sprintf("exec round trip of true, after %v idle", idlePause), rttIdle, "")
	latencyRow(fmt.Sprintf("reference: bwrap, after %v idle", idlePause), bwIdle, "")
	fmt.Println()
	cycle := func(xs []float64) string {
		if len(xs) == 0 {
			return ""
		}
		sort.Float64s(xs)
		return fmt.Sprintf("; a cycle p50 %s, p99 %s", ms(xs[len(xs)/2]), ms(xs[min(len(xs)-1, len(xs)*99/100)]))
	}
	fmt.Printf("%-48s %10.1f /s   (%d clients, %v%s)\n", "create+exec+destroy, cold", tCold, *workers, *dur, cycle(cCold))
	fmt.Printf("%-48s %10.1f /s   (pool of %d refilling%s)\n", "create+exec+destroy, pool policy", tWarm, poolSize, cycle(cWarm))
	fmt.Println()
	fmt.Printf("memory per idle sandbox over %d sandboxes:            awake   asleep (%.0f of %d, sleep_after)\n", *idle, nAsleep, *idle)
	fmt.Printf("  host total (MemAvailable drop / n)           %8.2f %8.2f MiB   target <= 1 MiB\n", perSandbox, perAsleep)
	fmt.Printf("  of which daemon RSS growth / n               %8.2f %8.2f MiB\n", daemonPer, daemonAsleep)
	fmt.Printf("  of which PID 1 (agent, or sleeper) PSS, mean %8.2f %8.2f MiB\n", agentPer, agentAsleep)
	fmt.Printf("%-48s %10s %10s %10s\n", "", "median", "p95", "min")
	latencyRow("exec round trip of true, the first after a sleep", wake, "")
	latencyRow("  the next one, awake", awake, "")
	if len(warm) > 0 && len(bw) > 0 {
		fmt.Printf("\nratios (median; targets of issue 15): warm create+exec / bwrap = %.2f (<= 0.25); exec round trip / bwrap = %.2f (<= 0.2); cold / bwrap = %.2f (<= 2); one-shot run / warm = %.2f\n",
			median(sorted(warm))/median(sorted(bw)), median(sorted(rtt))/median(sorted(bw)), median(sorted(cold))/median(sorted(bw)), median(sorted(oneshot))/median(sorted(warm)))
	}
	if len(bwIdle) > 0 && len(rttIdle) > 0 {
		fmt.Printf("after %v idle, both: exec round trip / bwrap = %.2f; warm create+exec (which starts from the pool's pause) / bwrap = %.2f\n",
			idlePause, median(sorted(rttIdle))/median(sorted(bwIdle)), median(sorted(warm))/median(sorted(bwIdle)))
	}
	if *gvIdle > 0 {
		gvisorServeRows(al, *n, *gvIdle)
	}
	pythonRows(c, sock, *n, *pySDK)
	if *e2bSDK != "" {
		e2bRows(al, *e2bSDK, *tsSDK, *e2bN)
	}
	typescriptRows(c, sock, *tsSDK, *n)
	return 0
}

// idlePause is how long the machine is left idle before each sample of the
// "after idle" rows.
const idlePause = 50 * time.Millisecond

// metric reads one sample from the daemon's /metrics.
func metric(sock, series string) float64 {
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	resp, err := hc.Get("http://airlock/metrics")
	if err != nil {
		return 0
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return f
		}
	}
	return 0
}

// memAvailable is MemAvailable in KiB.
func memAvailable() int64 { return meminfo("/proc/meminfo", "MemAvailable:") }

// rss is a process's resident set in KiB.
func rss(pid int) int64 { return meminfo(fmt.Sprintf("/proc/%d/status", pid), "VmRSS:") }

func meminfo(file, key string) int64 {
	b, _ := os.ReadFile(file)
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, key); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

// agentsPss sums the proportional set size (KiB) of every sandbox init
// under the state directory.
func agentsPss(stateDir string) float64 {
	entries, _ := os.ReadDir(stateDir)
	var total float64
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(stateDir, e.Name(), "state.json"))
		if err != nil {
			continue
		}
		var st struct {
			Init int `json:"init"`
		}
		if json.Unmarshal(b, &st) != nil || st.Init <= 0 {
			continue
		}
		total += float64(meminfo(fmt.Sprintf("/proc/%d/smaps_rollup", st.Init), "Pss:"))
	}
	return total
}

// latencyRow prints one latency row of the serve benches' tables (under
// their "median p95 min target" header): "n/a" without samples.
func latencyRow(name string, xs []float64, target string) {
	if len(xs) == 0 {
		fmt.Printf("%-48s %10s\n", name, "n/a")
		return
	}
	s := summarize(xs)
	fmt.Printf("%-48s %10s %10s %10s %s\n", name, ms(s.Median), ms(s.P95), ms(s.Min), target)
}
