package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	goruntime "runtime"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
)

// runScale is `airlock-bench scale` (`make bench-scale`): the costs that may
// grow with the number of sandboxes, measured with 1, 10, 100 and 500 idle
// sandboxes existing in one daemon (-levels). At each level, interleaved
// round by round:
//
//   - `airlock run -- /bin/true`, wall and CPU (user+sys of the whole
//     command), next to bwrap's in the same moment;
//   - create -> first exec of `true` from the daemon's warm pool (then the
//     sandbox is deleted and the pool refilled before the next sample),
//     and the same for a sandbox made on request (cold: the daemon forks
//     its init, with its heap as large as the level makes it);
//   - the exec round trip of `true` in one running sandbox;
//
// and, before those, memory per idle sandbox: the drop in MemAvailable
// since before the first idle sandbox existed, divided by the level; the
// daemon's RSS growth divided by the level; the mean PSS of the idle
// sandboxes' agents (PID 1); and the kernel's share, from /proc/meminfo
// (unreclaimable slab, kernel stacks, page tables, shmem). The warm pool
// and the exec target exist before the baseline and are not counted.
//
// The daemon gets a configuration of its own for this: tmpfs workspaces (a
// loop-mounted ext4 image per sandbox would measure mkfs, not airlock), no
// idle timeout, a two-hour TTL, room for the largest level. Every sandbox
// is deleted and the daemon stopped at the end, also after an error or
// Ctrl-C (the daemon runs in its own process group, so the terminal's
// SIGINT reaches only this program, which cleans up; a second Ctrl-C is
// ignored until that is done).
func runScale(args []string) int {
	fs := flag.NewFlagSet("scale", flag.ExitOnError)
	levelsFlag := fs.String("levels", "1,10,100,500", "idle sandbox counts, ascending")
	n := fs.Int("n", 40, "samples of each latency at each level")
	airlockPath := fs.String("airlock", "./bin/airlock", "airlock binary")
	bwrapPath := fs.String("bwrap", "bwrap", "bubblewrap binary for the reference row")
	workers := fs.Int("workers", 4, "concurrent creations while filling a level")
	settle := fs.Duration("settle", 3*time.Second, "wait after a level is filled before memory is read")
	diskQuota := fs.String("disk-quota", "tmpfs", "the daemon's disk_quota (tmpfs, loop or auto)")
	fs.Parse(args)
	levels, err := parseLevels(*levelsFlag)
	if err != nil {
		logf("-levels: %v", err)
		return 2
	}
	if *n < 1 || *workers < 1 {
		logf("-n and -workers must be at least 1")
		return 2
	}
	al, err := filepath.Abs(*airlockPath)
	if err != nil {
		logf("%v", err)
		return 2
	}
	bw, err := exec.LookPath(*bwrapPath)
	if err != nil {
		logf("bwrap not found (%v): its column is left empty", err)
		bw = ""
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	d, err := newBenchDaemon(al, "airlock-bench-scale-")
	if err != nil {
		logf("%v", err)
		return 1
	}
	dir := d.dir
	top := levels[len(levels)-1]
	d.cfg = fmt.Sprintf(`socket: %s
data_dir: %s
state_dir: %s
log_level: warn
disk_quota: %s
max_sandboxes: %d
max_creating: %d
queue_size: %d
default_timeout: 2h
idle_timeout: "0"
policies:
  idle: %s
pools:
  - policy: default
    size: %d
`, d.sock(), filepath.Join(dir, "data"), d.stateDir(), *diskQuota, top+scalePool+8, *workers, top+16,
		filepath.Join(dir, "idle.yaml"), scalePool)
	os.WriteFile(filepath.Join(dir, "idle.yaml"), []byte("{}\n"), 0o644)
	defer d.cleanup()
	if err := d.start(ctx); err != nil {
		logf("%v", err)
		return 1
	}
	d.created = true // its warm pool fills from the start

	res, err := scaleLevels(ctx, d, levels, *n, *workers, *settle, al, bw)
	if err != nil {
		if ctx.Err() != nil {
			logf("interrupted")
		} else {
			logf("%v\n%s", err, d.log.String())
		}
		// What was measured before the failure is still worth a table.
	}
	if len(res) > 0 {
		printScale(res, *n, *diskQuota, bw != "")
	}
	if err != nil {
		return 1
	}
	return 0
}

// scalePool is the size of the daemon's warm pool (the warm create row).
const scalePool = 4

// parseLevels reads "1,10,100": positive, strictly ascending.
func parseLevels(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 1 {
			return nil, fmt.Errorf("%q: want positive integers separated by commas", f)
		}
		if len(out) > 0 && v <= out[len(out)-1] {
			return nil, fmt.Errorf("%q: levels must be strictly ascending", s)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, errors.New("no levels")
	}
	return out, nil
}

// scaleResult is one level's measurements.
type scaleResult struct {
	level                  int
	run, runCPU, bw, bwCPU []float64
	warm, cold, rtt        []float64
	mem                    memPerSandbox
	// usedPss is the PSS (MiB) of the exec target's agent after this
	// level's rounds and a quiet moment: an idle sandbox that has run
	// commands.
	usedPss float64
	// asleep is how many sandboxes slept (the daemon's count) when the
	// memory was read.
	asleep int
}

type memPerSandbox struct {
	host, daemon, agent float64 // MiB per idle sandbox
	kernel              map[string]float64
	agentMaps           map[string]float64 // mean PSS by mapping kind, MiB
	agentThreads        float64
}

// sum adds the parts that are measured one by one: less noisy on a shared
// machine than MemAvailable, which every other process moves too.
func (m memPerSandbox) sum() float64 {
	t := m.daemon + m.agent
	for _, v := range m.kernel {
		t += v
	}
	return t
}

// kernelKeys are the /proc/meminfo fields that show the kernel's share.
var kernelKeys = []string{"SUnreclaim", "KernelStack", "PageTables", "Shmem", "Percpu"}

var kernelNames = map[string]string{
	"SUnreclaim":  "unreclaimable slab (SUnreclaim)",
	"KernelStack": "thread stacks (KernelStack)",
	"PageTables":  "page tables (PageTables)",
	"Shmem":       "tmpfs and shared memory (Shmem)",
	"Percpu":      "per-CPU allocations (Percpu)",
}

func scaleLevels(ctx context.Context, d *benchDaemon, levels []int, n, workers int, settle time.Duration, al, bw string) ([]scaleResult, error) {
	c := d.c
	poolReady := func() float64 { return metric(d.sock(), `airlock_pool_ready{image="",policy="default"}`) }
	waitPool := func() error {
		deadline := time.Now().Add(60 * time.Second)
		for poolReady() < scalePool {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if time.Now().After(deadline) {
				return errors.New("the warm pool did not refill in 60s")
			}
			time.Sleep(5 * time.Millisecond)
		}
		return nil
	}
	target, err := c.CreateSandbox(ctx, &api.CreateSandboxRequest{PolicyName: "idle"})
	if err != nil {
		return nil, fmt.Errorf("create the exec target: %w", err)
	}
	if _, err := c.Exec(ctx, target.ID, &api.ExecRequest{Argv: []string{"true"}}); err != nil {
		return nil, fmt.Errorf("exec: %w", err)
	}
	if err := waitPool(); err != nil {
		return nil, err
	}
	sleepCtx(ctx, settle)
	base := readMem(ctx, d.cmd.Process.Pid)

	r := &runner{}
	r.errf, err = os.CreateTemp(d.dir, "stderr")
	if err != nil {
		return nil, err
	}
	defer r.errf.Close()
	bwArgv := append([]string{bw}, bwrapArgs...)
	runArgv := []string{al, "run", "--", "/bin/true"}
	// One warm-up of each one-shot command, not counted.
	if _, _, err := r.run(runArgv); err != nil {
		return nil, fmt.Errorf("airlock run: %v\n%s", err, r.stderr())
	}
	if bw != "" {
		if _, _, err := r.run(bwArgv); err != nil {
			logf("bwrap fails here (%v): its column is left empty\n%s", err, r.stderr())
			bw = ""
		}
	}

	var out []scaleResult
	var idle []string
	for _, level := range levels {
		fmt.Fprintf(os.Stderr, "level %d: creating %d idle sandboxes\n", level, level-len(idle))
		more, err := createIdle(ctx, c, level-len(idle), workers)
		idle = append(idle, more...)
		if err != nil {
			return out, fmt.Errorf("level %d: create idle sandboxes: %w", level, err)
		}
		if err := waitPool(); err != nil {
			return out, err
		}
		// Idle sandboxes as they stay: their agents asleep (the
		// daemon's sleep_after, 10 s), up to a minute more.
		asleep := func() int { return int(metric(d.sock(), `airlock_sandboxes_asleep{runtime="native"}`)) }
		for i := 0; i < 700 && asleep() < len(idle) && ctx.Err() == nil; i++ {
			time.Sleep(100 * time.Millisecond)
		}
		sleepCtx(ctx, settle)
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		now := readMem(ctx, d.cmd.Process.Pid)
		res := scaleResult{level: level, asleep: asleep()}
		res.mem = memDelta(base, now, level)
		res.mem.agent, res.mem.agentMaps, res.mem.agentThreads = agentsMemory(d.stateDir(), idle)

		fmt.Fprintf(os.Stderr, "level %d: %d rounds of latencies\n", level, n)
		for i := 0; i < n; i++ {
			if ctx.Err() != nil {
				return out, ctx.Err()
			}
			// Warm create -> first exec, then delete; the pool refills
			// before anything else is timed.
			if err := waitPool(); err != nil {
				return out, err
			}
			warm, err := createExecMs(ctx, c, &api.CreateSandboxRequest{})
			if err != nil {
				return out, fmt.Errorf("warm %w", err)
			}
			res.warm = append(res.warm, warm)
			if err := waitPool(); err != nil {
				return out, err
			}
			// Cold: a named policy, which no pool serves.
			cold, err := createExecMs(ctx, c, &api.CreateSandboxRequest{PolicyName: "idle"})
			if err != nil {
				return out, fmt.Errorf("cold %w", err)
			}
			res.cold = append(res.cold, cold)
			for k := 0; k < 3; k++ {
				t0 := time.Now()
				if _, err := c.Exec(ctx, target.ID, &api.ExecRequest{Argv: []string{"true"}}); err != nil {
					return out, fmt.Errorf("exec round trip: %w", err)
				}
				res.rtt = append(res.rtt, float64(time.Since(t0).Microseconds())/1000)
			}
			// airlock run and bwrap back to back, taking turns at going
			// first, so that both see the same moment of the machine.
			pair := []string{"run", "bwrap"}
			if i%2 == 1 {
				pair[0], pair[1] = pair[1], pair[0]
			}
			for _, which := range pair {
				switch {
				case which == "run":
					w, _, err := r.run(runArgv)
					if err != nil {
						return out, fmt.Errorf("airlock run: %v\n%s", err, r.stderr())
					}
					res.run, res.runCPU = append(res.run, w), append(res.runCPU, r.lastCPU)
				case bw != "":
					w, _, err := r.run(bwArgv)
					if err != nil {
						return out, fmt.Errorf("bwrap: %v\n%s", err, r.stderr())
					}
					res.bw, res.bwCPU = append(res.bw, w), append(res.bwCPU, r.lastCPU)
				}
			}
		}
		sleepCtx(ctx, settle)
		res.usedPss, _, _ = agentsMemory(d.stateDir(), []string{target.ID})
		out = append(out, res)
	}
	return out, nil
}

// createIdle creates k sandboxes of the idle policy with a few workers.
func createIdle(ctx context.Context, c *client.Client, k, workers int) ([]string, error) {
	var (
		mu    sync.Mutex
		ids   []string
		first error
		wg    sync.WaitGroup
	)
	jobs := make(chan struct{})
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				sb, err := c.CreateSandbox(ctx, &api.CreateSandboxRequest{PolicyName: "idle"})
				mu.Lock()
				if err != nil && first == nil {
					first = err
				}
				if err == nil {
					ids = append(ids, sb.ID)
				}
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < k; i++ {
		mu.Lock()
		failed := first != nil
		mu.Unlock()
		if failed || ctx.Err() != nil {
			break
		}
		jobs <- struct{}{}
	}
	close(jobs)
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		first = ctx.Err()
	}
	return ids, first
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// memSample is the host's and the daemon's memory at one moment (KiB).
type memSample struct {
	avail, daemonRSS int64
	kernel           map[string]int64
}

// readMem reads MemAvailable five times over two seconds and keeps the
// largest (other work on a shared machine only ever lowers it, for a
// moment); the kernel fields and the daemon's RSS are read at that moment.
func readMem(ctx context.Context, daemonPid int) memSample {
	var best memSample
	for i := 0; i < 5; i++ {
		if i > 0 {
			sleepCtx(ctx, 500*time.Millisecond)
		}
		m := meminfoAll()
		s := memSample{avail: m["MemAvailable"], daemonRSS: rss(daemonPid), kernel: map[string]int64{}}
		for _, k := range kernelKeys {
			s.kernel[k] = m[k]
		}
		if i == 0 || s.avail > best.avail {
			best = s
		}
	}
	return best
}

func meminfoAll() map[string]int64 {
	out := map[string]int64{}
	b, _ := os.ReadFile("/proc/meminfo")
	for _, l := range strings.Split(string(b), "\n") {
		k, rest, ok := strings.Cut(l, ":")
		if f := strings.Fields(rest); ok && len(f) > 0 {
			out[k], _ = strconv.ParseInt(f[0], 10, 64)
		}
	}
	return out
}

func memDelta(base, now memSample, level int) memPerSandbox {
	per := func(kib int64) float64 { return float64(kib) / float64(level) / 1024 }
	m := memPerSandbox{
		host:   per(base.avail - now.avail),
		daemon: per(now.daemonRSS - base.daemonRSS),
		kernel: map[string]float64{},
	}
	for _, k := range kernelKeys {
		m.kernel[k] = per(now.kernel[k] - base.kernel[k])
	}
	return m
}

// agentsMemory is the mean PSS (MiB) of the agents (PID 1) of the given
// sandboxes, that PSS by kind of mapping, and their mean thread count.
func agentsMemory(stateDir string, ids []string) (float64, map[string]float64, float64) {
	kinds := map[string]float64{}
	var total, threads float64
	count := 0
	for _, id := range ids {
		b, err := os.ReadFile(filepath.Join(stateDir, strings.TrimPrefix(id, "sb-"), "state.json"))
		if err != nil {
			continue
		}
		var st struct {
			Init int `json:"init"`
		}
		if json.Unmarshal(b, &st) != nil || st.Init <= 0 {
			continue
		}
		byKind, ok := smapsByKind(st.Init)
		if !ok {
			continue
		}
		count++
		for k, v := range byKind {
			kinds[k] += v
			total += v
		}
		threads += float64(meminfo(fmt.Sprintf("/proc/%d/status", st.Init), "Threads:"))
	}
	if count == 0 {
		return 0, kinds, 0
	}
	for k := range kinds {
		kinds[k] /= float64(count) * 1024
	}
	return total / float64(count) / 1024, kinds, threads / float64(count)
}

// smapsByKind sums a process's PSS (KiB) by kind of mapping: the program's
// file (text, read-only data, data), anonymous memory (the Go heap, the
// goroutine stacks and the runtime's own structures), the main thread's
// stack, and the rest.
func smapsByKind(pid int) (map[string]float64, bool) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return nil, false
	}
	defer f.Close()
	out := map[string]float64{}
	kind := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		fields := strings.Fields(l)
		if len(fields) >= 5 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			perms, name := fields[1], ""
			if len(fields) >= 6 {
				name = fields[5]
			}
			switch {
			case name == "":
				kind = "anonymous (heap, stacks, runtime)"
			case name == "[stack]":
				kind = "main thread stack"
			case strings.HasPrefix(name, "/"):
				switch {
				case strings.Contains(perms, "x"):
					kind = "binary text"
				case strings.Contains(perms, "w"):
					kind = "binary data"
				default:
					kind = "binary read-only data"
				}
			default:
				kind = "other (" + name + ")"
			}
			continue
		}
		if rest, ok := strings.CutPrefix(l, "Pss:"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				v, _ := strconv.ParseFloat(f[0], 64)
				out[kind] += v
			}
		}
	}
	return out, sc.Err() == nil
}

// printScale prints one markdown table, levels as columns, and the
// breakdown of memory at the largest level.
func printScale(res []scaleResult, n int, diskQuota string, haveBwrap bool) {
	fmt.Printf("airlock scaling: %d rounds per level, %d CPUs, kernel %s, load %s, workspaces %s\n\n",
		n, goruntime.NumCPU(), kernel(), loadavg(), diskQuota)
	fmt.Printf("| idle sandboxes in the daemon |")
	for _, r := range res {
		fmt.Printf(" %d |", r.level)
	}
	fmt.Printf("\n|---|")
	for range res {
		fmt.Printf("---|")
	}
	fmt.Println()
	lat := func(name string, get func(scaleResult) []float64) {
		fmt.Printf("| %s |", name)
		for _, r := range res {
			xs := get(r)
			if len(xs) == 0 {
				fmt.Printf(" n/a |")
				continue
			}
			s := summarize(xs)
			fmt.Printf(" %s / %s |", ms(s.Median), ms(s.P95))
		}
		fmt.Println()
	}
	ratio := func(name string, a, b func(scaleResult) []float64) {
		fmt.Printf("| %s |", name)
		for _, r := range res {
			if len(a(r)) == 0 || len(b(r)) == 0 {
				fmt.Printf(" n/a |")
				continue
			}
			fmt.Printf(" %.2fx |", median(sorted(a(r)))/median(sorted(b(r))))
		}
		fmt.Println()
	}
	mib := func(name string, get func(scaleResult) float64) {
		fmt.Printf("| %s |", name)
		for _, r := range res {
			fmt.Printf(" %.2f MiB |", get(r))
		}
		fmt.Println()
	}
	lat("`airlock run -- /bin/true` wall, p50 / p95", func(r scaleResult) []float64 { return r.run })
	lat("`bwrap /bin/true` wall, same moment", func(r scaleResult) []float64 { return r.bw })
	if haveBwrap {
		ratio("run / bwrap wall (medians)", func(r scaleResult) []float64 { return r.run }, func(r scaleResult) []float64 { return r.bw })
	}
	lat("`airlock run` CPU (user+sys)", func(r scaleResult) []float64 { return r.runCPU })
	lat("`bwrap` CPU (user+sys)", func(r scaleResult) []float64 { return r.bwCPU })
	if haveBwrap {
		ratio("run / bwrap CPU (medians)", func(r scaleResult) []float64 { return r.runCPU }, func(r scaleResult) []float64 { return r.bwCPU })
	}
	lat("create -> first exec, warm pool (SDK)", func(r scaleResult) []float64 { return r.warm })
	lat("create -> first exec, cold (SDK)", func(r scaleResult) []float64 { return r.cold })
	lat("exec round trip of `true` (SDK)", func(r scaleResult) []float64 { return r.rtt })
	fmt.Printf("| idle sandboxes asleep (sleep_after) when memory was read |")
	for _, r := range res {
		fmt.Printf(" %d |", r.asleep)
	}
	fmt.Println()
	mib("host memory per idle sandbox (MemAvailable drop / n)", func(r scaleResult) float64 { return r.mem.host })
	mib("of which the daemon's RSS growth / n", func(r scaleResult) float64 { return r.mem.daemon })
	mib("of which PID 1's PSS (the agent, or its sleeper), mean", func(r scaleResult) float64 { return r.mem.agent })
	for _, k := range kernelKeys {
		mib("kernel: "+kernelNames[k]+" growth / n", func(r scaleResult) float64 { return r.mem.kernel[k] })
	}
	mib("agent PSS of the exec target (used, then idle)", func(r scaleResult) float64 { return r.usedPss })
	mib("sum of the parts (daemon + agent + kernel rows)", func(r scaleResult) float64 { return r.mem.sum() })
	fmt.Printf("| PID 1 threads, mean |")
	for _, r := range res {
		fmt.Printf(" %.1f |", r.mem.agentThreads)
	}
	fmt.Println()

	last := res[len(res)-1]
	fmt.Printf("\nat %d idle sandboxes, the agent's PSS by mapping (mean):\n", last.level)
	var kinds []string
	for k := range last.mem.agentMaps {
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(i, j int) bool { return last.mem.agentMaps[kinds[i]] > last.mem.agentMaps[kinds[j]] })
	for _, k := range kinds {
		if last.mem.agentMaps[k] < 0.0005 {
			continue
		}
		fmt.Printf("  %-40s %7.3f MiB\n", k, last.mem.agentMaps[k])
	}
	fmt.Println()
	if last.mem.host > 0 {
		fmt.Printf("idle sandboxes that fit in 24 GiB at %.2f MiB each (MemAvailable drop): %d\n", last.mem.host, int(24*1024/last.mem.host))
	}
	if sum := last.mem.sum(); sum > 0 {
		fmt.Printf("idle sandboxes that fit in 24 GiB at %.2f MiB each (sum of the parts): %d\n", sum, int(24*1024/sum))
	}
	fmt.Println("(flat extrapolations: every memory cgroup's shrinker table grows with the host's most superblocks, 1 KiB per 64, and each sandbox holds about 10; docs/performance.md, Density)")
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
