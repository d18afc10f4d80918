// Command airlock-bench measures what a sandbox costs: how much longer
// `airlock run -- /bin/true` takes than running /bin/true directly, and than
// running it under bubblewrap (bwrap), the usual point of comparison.
//
// Usage:
//
//	go run ./cmd/airlock-bench [-n 100] [-airlock ./bin/airlock] [-json]
//
// (`make bench` builds bin/airlock and runs it with -n 100.)
//
// `airlock-bench egress` (`make bench-egress`) measures the egress gateway
// instead: throughput, added latency and new connections per second, direct
// and through the gateway, on loopback; see egress.go.
//
// `airlock-bench scale` (`make bench-scale`) measures `airlock run`, warm
// create -> first exec, the exec round trip and memory per idle sandbox
// with 1, 10, 100 and 500 idle sandboxes in one daemon; see scale.go.
//
// `airlock-bench cache` (`make bench-cache`) times a go build in a fresh
// sandbox without and with `--cache go`; see cache.go.
//
// `airlock-bench review` times `airlock run --review` against plain
// `airlock run`, and review and apply of a few changes in a 100k-file
// workspace; see review.go.
//
// `airlock-bench procs` (`make bench-procs`) measures one more process
// inside a running sandbox (a shell's fork, exec and wait), on the host,
// under bwrap, native and gVisor; see procs.go.
//
// `airlock-bench ab OLD NEW` and `airlock-bench ab-serve OLD NEW` compare
// two builds, alternating them measurement by measurement: `airlock run`
// (wall and CPU), and the service's exec round trip or warm create ->
// first exec, native or gVisor; see ab.go and abserve.go.
//
// # What is measured
//
// Part 1, end to end. Each configuration below runs /bin/true N times; a run
// is timed from just before the fork to the return of wait(2) for the whole
// command, so for airlock it includes the start of the airlock process itself,
// building the policy and seccomp filter, creating the sandbox (namespaces,
// overlay root, cgroups, Landlock, seccomp), starting the command in it,
// waiting for it and destroying the sandbox. It is the latency a caller sees.
// The configurations are run interleaved round-robin (run i of every
// configuration, then run i+1 of every one, starting each round with a
// different configuration), so that noise on the machine hits all of them
// alike, after one warm-up run each that is not counted:
//
//   - bare: /bin/true forked and executed from Go, the floor;
//   - bwrap: bubblewrap with all namespaces unshared, /usr read-only, a fresh
//     /proc, /dev and /tmp (see bwrapArgs); skipped with a message if bwrap
//     is not installed;
//   - bwrap, until its PID 1 exited (reference): the same command, timed
//     and charged until the last process it left behind has exited.
//     bubblewrap exits as soon as its sandbox's PID 1 reports the command's
//     status; that PID 1 (which made the sandbox's mounts and started the
//     command) then exits and its namespaces are torn down after bwrap has
//     returned, and bwrap never waits for it, so the bwrap row's CPU holds
//     none of it. The bench makes itself the subreaper of what it runs
//     (PR_SET_CHILD_SUBREAPER), reaps such processes after every run of
//     every row before the next run starts, and counts them for this row
//     only (their wall time through a wait on another goroutine, a few
//     microseconds). airlock waits for its sandbox's init itself.
//   - airlock: `airlock run -- /bin/true`, the full default;
//   - two weaker airlock configurations marked "(attribution)", with cgroups
//     off, and with Landlock and seccomp off: they are not ways to run
//     airlock, only a way to see what those layers cost end to end.
//   - airlock with a workspace: `airlock run --workspace W -- /bin/true`,
//     W a 1 GiB tree (8192 files) in which every default protected path
//     exists, in the default mode (an overlay, applied when the command
//     ends) and in live mode, with a changes root of the bench's own
//     (workspace.go). Target: the ratio of airlock run without one.
//
// The first table gives, per configuration, the number of successful runs
// and the median, 95th percentile, minimum and mean wall time, and the ratio
// of its median to bwrap's median; then the line
//
//	airlock median / bwrap median = X.XX (target <= 1.5)
//
// compares the full default against bwrap (and a line the same against the
// bwrap row counted until its PID 1 exited). Medians are what to compare: the
// mean and p95 show how heavy the tail is (a p95 far above the median means a
// noisy machine or an occasional slow step, such as a cgroup removal).
//
// Part 2, attribution. `airlock run -v -- /bin/true` is then run N times on
// its own, and the timings airlock reports on stderr are parsed: the steps of
// the sandbox creation (cgroups, clone, idmap, setup and, inside setup, the
// steps of the sandbox's init: init.namespaces, init.mounts with its sub-steps
// init.mounts.*, init.capabilities, init.landlock, init.seccomp), "created"
// (the whole creation), "handshake" (from the exec request to the command
// started, the "command started X ms after the sandbox" value) and
// "destroyed" (the teardown). Steps nest, so they do not add up: init.* are
// part of setup, init.mounts.* are part of init.mounts, and all of them are
// part of created. Derived per run, to find time no step accounts for:
// "created.unattributed" is created minus its top-level steps (cgroups,
// clone, idmap, setup), "setup.unattributed" is setup minus the init.* steps
// (the round trip to the sandbox's init), "wall" is the wall time of the
// whole -v command and "other" is wall - created - handshake - destroyed:
// starting and exiting the airlock process and preparing the spec, outside
// the sandbox proper. The table is sorted by median, largest first.
//
// Statistics: the median is the middle sample (the mean of the two middle
// ones for an even count); p95 is the nearest-rank 95th percentile, the
// smallest sample that at least 95% of the samples do not exceed. All times
// are in milliseconds.
//
// A run that fails (non-zero exit, or no timings where some are expected) is
// not counted: it is reported as an error with its stderr, and the command
// exits with status 1. -json prints the same data as one JSON document.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/runtime/gvisor"
)

const (
	target     = 1.5              // airlock median / bwrap median
	cpuTarget  = 3.0              // airlock CPU median / bwrap CPU median
	minRuns    = 50               // fewer runs are allowed, with a warning
	runTimeout = 60 * time.Second // a run taking longer is killed and fails
	maxStderr  = 4000             // bytes of a failed run's stderr shown

	warmUpTries = 3 // a configuration whose warm-up fails this often is left out
)

// bwrapArgs is the bubblewrap command compared against: every namespace
// unshared, /usr read-only with the usual merged-/usr symlinks, and a fresh
// /proc, /dev and /tmp.
var bwrapArgs = []string{
	"--unshare-all", "--die-with-parent", "--new-session",
	"--ro-bind", "/usr", "/usr",
	"--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
	"--symlink", "usr/lib64", "/lib64", "--symlink", "usr/sbin", "/sbin",
	"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
	"/bin/true",
}

// config is one row of the end-to-end table.
type config struct {
	key         string // for the code: "bare", "bwrap", "airlock", ...
	name        string // shown
	argv        []string
	attribution bool
	// whole counts the run until the last process it left behind exited
	// (reaped by the bench as their subreaper), and their CPU: bubblewrap
	// exits as soon as its sandbox's PID 1 reports the command's status,
	// before that PID 1 has exited and its namespaces are torn down.
	whole bool

	samples []float64
	cpu     []float64 // user+sys ms of each counted run
	failed  int
	dropped bool // the warm-up failed: not run further
}

type failure struct {
	Config string `json:"config"`
	Run    int    `json:"run"` // 0 is the warm-up
	Error  string `json:"error"`
	Stderr string `json:"stderr,omitempty"`
}

type rowResult struct {
	Key         string   `json:"key"`
	Name        string   `json:"name"`
	Argv        []string `json:"argv"`
	Attribution bool     `json:"attribution"`
	summary
	Failed       int      `json:"failed"`
	RatioToBwrap *float64 `json:"ratio_to_bwrap_median,omitempty"`
	// CPU is user+sys time of the command and of every process it waited
	// for (wait4's rusage), in ms.
	CPU             summary  `json:"cpu"`
	CPURatioToBwrap *float64 `json:"cpu_ratio_to_bwrap_median,omitempty"`
}

type stepResult struct {
	Step   string  `json:"step"`
	Runs   int     `json:"runs"`
	Median float64 `json:"median_ms"`
	P95    float64 `json:"p95_ms"`
}

type skipped struct {
	Config string `json:"config"`
	Reason string `json:"reason"`
}

type report struct {
	N            int         `json:"n"`
	Kernel       string      `json:"kernel"`
	CPUs         int         `json:"cpus"`
	Airlock      string      `json:"airlock"`
	Bwrap        string      `json:"bwrap,omitempty"`
	BwrapVersion string      `json:"bwrap_version,omitempty"`
	Rows         []rowResult `json:"rows"`
	Ratio        *float64    `json:"airlock_over_bwrap_median"`
	CPURatio     *float64    `json:"airlock_over_bwrap_cpu_median"`
	GVisorRatio  *float64    `json:"airlock_gvisor_over_runsc_do_median,omitempty"`
	// The workspace rows (issue 15, row 2): their ratios to bwrap, and what
	// their workspace held.
	WorkspaceRatio     *float64 `json:"airlock_workspace_over_bwrap_median,omitempty"`
	WorkspaceLiveRatio *float64 `json:"airlock_workspace_live_over_bwrap_median,omitempty"`
	WorkspaceNote      string   `json:"workspace_rows,omitempty"`
	// WholeRatio and WholeCPURatio compare airlock with bubblewrap counted
	// until its sandbox's last process exited (the bwrap-whole row).
	WholeRatio    *float64     `json:"airlock_over_bwrap_whole_median,omitempty"`
	WholeCPURatio *float64     `json:"airlock_over_bwrap_whole_cpu_median,omitempty"`
	Target        float64      `json:"target"`
	Steps         []stepResult `json:"steps"`
	Skipped       []skipped    `json:"skipped,omitempty"`
	Warnings      []string     `json:"warnings,omitempty"`
	Failures      []failure    `json:"failures,omitempty"`

	bwrapMedian float64
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		os.Exit(runServe(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "scale" {
		os.Exit(runScale(os.Args[2:])) // scale.go
	}
	if len(os.Args) > 1 && os.Args[1] == "egress" {
		os.Exit(runEgress(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "record" {
		os.Exit(runRecord(os.Args[2:])) // record.go
	}
	if len(os.Args) > 1 && os.Args[1] == "cache" {
		os.Exit(runCache(os.Args[2:])) // cache.go
	}
	if len(os.Args) > 1 && os.Args[1] == "review" {
		os.Exit(runReview(os.Args[2:])) // review.go
	}
	if len(os.Args) > 1 && os.Args[1] == "procs" {
		os.Exit(runProcs(os.Args[2:])) // procs.go
	}
	if len(os.Args) > 1 && os.Args[1] == "ab" {
		os.Exit(runAB(os.Args[2:])) // ab.go
	}
	if len(os.Args) > 1 && os.Args[1] == "ab-serve" {
		os.Exit(runABServe(os.Args[2:])) // abserve.go
	}
	n := flag.Int("n", 100, fmt.Sprintf("runs of each configuration (at least %d advised)", minRuns))
	airlockPath := flag.String("airlock", "./bin/airlock", "airlock binary to measure")
	bwrapPath := flag.String("bwrap", "bwrap", "bubblewrap binary to compare against (looked up in PATH)")
	asJSON := flag.Bool("json", false, "print the results as JSON instead of tables")
	flag.StringVar(&baselinePath, "baseline", "", "a second airlock binary (e.g. the build before a change) whose gvisor row runs interleaved with the others")
	flag.BoolVar(&gvisorOnly, "gvisor-only", false, "measure only bare and the gvisor rows")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: airlock-bench [-n 100] [-airlock ./bin/airlock] [-json]\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	os.Exit(run(*n, *airlockPath, *bwrapPath, *asJSON))
}

// Set by flags: a baseline binary for a side-by-side gvisor row, and
// whether to leave the native rows out.
var (
	baselinePath string
	gvisorOnly   bool
)

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "airlock-bench: "+format+"\n", args...)
}

func run(n int, airlockPath, bwrapPath string, asJSON bool) int {
	if n < 1 {
		logf("-n %d: need at least 1 run", n)
		return 2
	}
	rep := &report{N: n, Target: target, CPUs: goruntime.NumCPU(), Kernel: kernel(), Rows: []rowResult{}, Steps: []stepResult{}}
	if n < minRuns {
		w := fmt.Sprintf("only %d runs per configuration (fewer than %d): the p95 and even the median are unreliable", n, minRuns)
		logf("WARNING: %s", w)
		rep.Warnings = append(rep.Warnings, w)
	}

	al, err := filepath.Abs(airlockPath)
	if err == nil {
		_, err = os.Stat(al)
	}
	if err != nil {
		logf("airlock binary %s: %v (build it with `make build`, or pass -airlock PATH)", airlockPath, err)
		return 2
	}
	rep.Airlock = al

	// The bench is the subreaper of what it runs: a process a command
	// leaves behind is reaped here, after the command, before the next
	// run starts (and counted for the rows that count it, see whole).
	reaping := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == nil
	if !reaping {
		rep.Warnings = append(rep.Warnings, "cannot be the subreaper of the runs: no row counts what a command leaves behind")
	}
	configs := []*config{{key: "bare", name: "bare /bin/true (fork+exec)", argv: []string{"/bin/true"}}}
	if gvisorOnly {
		bwrapPath = ""
	}
	if bwrapPath == "" {
		rep.Skipped = append(rep.Skipped, skipped{"bwrap /bin/true", "-gvisor-only"})
	} else if bw, err := exec.LookPath(bwrapPath); err != nil {
		reason := fmt.Sprintf("%s not found (%v); install it with `apt-get install -y bubblewrap` to compare against it", bwrapPath, err)
		logf("skipping the bubblewrap row: %s", reason)
		rep.Skipped = append(rep.Skipped, skipped{"bwrap /bin/true", reason})
	} else {
		rep.Bwrap = bw
		if out, err := exec.Command(bw, "--version").Output(); err == nil {
			rep.BwrapVersion = strings.TrimSpace(string(out))
		}
		configs = append(configs, &config{key: "bwrap", name: "bwrap /bin/true", argv: append([]string{bw}, bwrapArgs...)})
		if reaping {
			configs = append(configs, &config{key: "bwrap-whole", name: "bwrap /bin/true, until its PID 1 exited (reference)", attribution: true, whole: true,
				argv: append([]string{bw}, bwrapArgs...)})
		}
	}
	if !gvisorOnly {
		configs = append(configs,
			&config{key: "airlock", name: "airlock run -- /bin/true", argv: []string{al, "run", "--", "/bin/true"}},
			&config{key: "airlock-no-cgroups", name: "airlock --insecure-no-cgroups (attribution)", attribution: true,
				argv: []string{al, "run", "--insecure-no-cgroups", "--", "/bin/true"}},
			&config{key: "airlock-no-landlock-seccomp", name: "airlock --insecure-no-landlock --insecure-no-seccomp (attribution)", attribution: true,
				argv: []string{al, "run", "--insecure-no-landlock", "--insecure-no-seccomp", "--", "/bin/true"}},
		)
		dir, ws, changes, err := benchWorkspace()
		if dir != "" {
			defer os.RemoveAll(dir)
		}
		if err != nil {
			logf("skipping the workspace rows: %v", err)
			rep.Skipped = append(rep.Skipped, skipped{"workspace rows", err.Error()})
		} else {
			// The runs' changes root is the bench's own (the rows leave
			// nothing in it: /bin/true changes nothing).
			defer os.Setenv("AIRLOCK_CHANGES_DIR", os.Getenv("AIRLOCK_CHANGES_DIR"))
			os.Setenv("AIRLOCK_CHANGES_DIR", changes)
			rep.WorkspaceNote = workspaceRowsNote(ws)
			logf("%s", rep.WorkspaceNote)
			configs = append(configs,
				&config{key: "airlock-workspace", name: "airlock run --workspace W (1 GiB, protected paths) -- /bin/true",
					argv: []string{al, "run", "--workspace", ws, "--", "/bin/true"}},
				&config{key: "airlock-workspace-live", name: "the same, --workspace-mode live",
					argv: []string{al, "run", "--workspace", ws, "--workspace-mode", "live", "--", "/bin/true"}})
		}
	}

	// The gVisor tier, when its runsc is installed: airlock on gvisor
	// against runsc's own one-shot command (target: at most 1.0x).
	if runsc, err := gvisor.Find(); err != nil {
		logf("skipping the gvisor rows: %v", err)
		rep.Skipped = append(rep.Skipped, skipped{"gvisor rows", err.Error()})
	} else {
		doRoot, err := os.MkdirTemp("", "airlock-bench-runsc-")
		if err == nil {
			defer os.RemoveAll(doRoot)
			configs = append(configs,
				&config{key: "runsc-do", name: "runsc do /bin/true (gvisor)",
					argv: []string{runsc, "--root", doRoot, "--network=none", "--sidecar-usage-policy=LEGACY_DEPRECATED_SLOW_EMBEDDED_FALLBACK", "do", "/bin/true"}},
				&config{key: "airlock-gvisor", name: "airlock run --runtime gvisor -- /bin/true",
					argv: []string{al, "run", "--runtime", "gvisor", "--", "/bin/true"}},
				// runsc joins the sandbox's cgroup and leaves it again (on
				// cgroup v1 each waits for an RCU grace period): what that
				// costs, end to end.
				&config{key: "airlock-gvisor-no-cgroups", name: "airlock --runtime gvisor --insecure-no-cgroups (attribution)", attribution: true,
					argv: []string{al, "run", "--runtime", "gvisor", "--insecure-no-cgroups", "--", "/bin/true"}})
			if baselinePath != "" {
				base, err := filepath.Abs(baselinePath)
				if err == nil {
					_, err = os.Stat(base)
				}
				if err != nil {
					logf("-baseline %s: %v", baselinePath, err)
					return 2
				}
				configs = append(configs, &config{key: "airlock-gvisor-baseline", name: "baseline airlock run --runtime gvisor -- /bin/true (-baseline)", attribution: true,
					argv: []string{base, "run", "--runtime", "gvisor", "--", "/bin/true"}})
			}
		}
	}

	errf, err := os.CreateTemp("", "airlock-bench-stderr-*")
	if err != nil {
		logf("%v", err)
		return 2
	}
	defer os.Remove(errf.Name())
	defer errf.Close()
	r := &runner{errf: errf, reap: reaping}

	// Part 1: end to end, interleaved.
	logf("%d configurations x %d runs, interleaved round-robin, after one warm-up run each", len(configs), n)
	for _, c := range configs {
		if err := r.warmUp(rep, c.key, c.name, c.argv); err != nil {
			c.dropped = true
			rep.Skipped = append(rep.Skipped, skipped{c.name, "the warm-up run failed: " + err.Error()})
		}
	}
	var active []*config
	for _, c := range configs {
		if !c.dropped {
			active = append(active, c)
		}
	}
	shown := map[string]int{}
	for i := 0; i < n && len(active) > 0; i++ {
		for j := range active {
			c := active[(i+j)%len(active)]
			ms, stderr, err := r.runWhole(c.argv, c.whole)
			if err != nil {
				c.failed++
				rep.Failures = append(rep.Failures, failure{c.key, i + 1, err.Error(), stderr})
				if shown[c.key]++; shown[c.key] <= 3 {
					logf("%s: run %d failed, not counted: %v\n%s", c.name, i+1, err, indent(stderr))
				}
				continue
			}
			c.samples = append(c.samples, ms)
			c.cpu = append(c.cpu, r.lastCPU)
		}
		progress(i+1, n)
	}

	var bwrapMedian, bwrapCPU, wholeMedian, wholeCPU float64
	for _, c := range configs {
		if c.key == "bwrap" && len(c.samples) > 0 {
			bwrapMedian = median(sorted(c.samples))
			bwrapCPU = median(sorted(c.cpu))
		}
		if c.key == "bwrap-whole" && len(c.samples) > 0 {
			wholeMedian = median(sorted(c.samples))
			wholeCPU = median(sorted(c.cpu))
		}
	}
	rep.bwrapMedian = bwrapMedian
	var runscMedian float64 // runsc-do comes before airlock-gvisor
	for _, c := range configs {
		if c.dropped {
			continue
		}
		row := rowResult{Key: c.key, Name: c.name, Argv: c.argv, Attribution: c.attribution, summary: summarize(c.samples), Failed: c.failed, CPU: summarize(c.cpu)}
		if bwrapMedian > 0 && row.N > 0 {
			ratio := row.Median / bwrapMedian
			row.RatioToBwrap = &ratio
		}
		if bwrapCPU > 0 && row.N > 0 {
			ratio := row.CPU.Median / bwrapCPU
			row.CPURatioToBwrap = &ratio
		}
		if c.key == "runsc-do" && row.N > 0 {
			runscMedian = row.Median
		}
		if c.key == "airlock-gvisor" && row.N > 0 && runscMedian > 0 {
			ratio := row.Median / runscMedian
			rep.GVisorRatio = &ratio
		}
		switch c.key {
		case "airlock-workspace":
			rep.WorkspaceRatio = row.RatioToBwrap
		case "airlock-workspace-live":
			rep.WorkspaceLiveRatio = row.RatioToBwrap
		}
		if c.key == "airlock" {
			rep.Ratio = row.RatioToBwrap
			rep.CPURatio = row.CPURatioToBwrap
			if wholeMedian > 0 && row.N > 0 {
				w, cpu := row.Median/wholeMedian, row.CPU.Median/wholeCPU
				rep.WholeRatio, rep.WholeCPURatio = &w, &cpu
			}
		}
		rep.Rows = append(rep.Rows, row)
	}

	// Part 2: the steps airlock reports with -v.
	if !gvisorOnly {
		logf("airlock run -v -- /bin/true x %d, for the per-step timings", n)
	}
	verbose := []string{al, "run", "-v", "--", "/bin/true"}
	steps := map[string][]float64{}
	if gvisorOnly {
		rep.Skipped = append(rep.Skipped, skipped{"airlock run -v (per-step timings)", "-gvisor-only"})
	} else if err := r.warmUp(rep, "airlock-v", "airlock run -v", verbose); err != nil {
		w := "airlock run -v could not run: no per-step timings"
		rep.Warnings = append(rep.Warnings, w)
	} else {
		shownV := 0
		for i := 0; i < n; i++ {
			wall, stderr, err := r.run(verbose)
			var t map[string]float64
			if err == nil {
				t, err = parseVerbose(stderr)
			}
			if err != nil {
				rep.Failures = append(rep.Failures, failure{"airlock-v", i + 1, err.Error(), stderr})
				if shownV++; shownV <= 3 {
					logf("airlock run -v: run %d failed, not counted: %v\n%s", i+1, err, indent(stderr))
				}
				continue
			}
			for k, v := range t {
				steps[k] = append(steps[k], v)
			}
			for k, v := range unattributed(t) {
				steps[k] = append(steps[k], v)
			}
			steps["wall"] = append(steps["wall"], wall)
			if d, ok := t[stepDestroyed]; ok {
				steps["other"] = append(steps["other"], wall-t[stepCreated]-t[stepHandshake]-d)
			}
			progress(i+1, n)
		}
		okRuns := len(steps["wall"])
		for _, s := range expectedSteps {
			if okRuns > 0 && len(steps[s]) == 0 {
				w := fmt.Sprintf("airlock run -v did not report the step %q in any run (conditional step, or a changed output format)", s)
				logf("WARNING: %s", w)
				rep.Warnings = append(rep.Warnings, w)
			}
		}
	}
	for k, v := range steps {
		s := summarize(v)
		rep.Steps = append(rep.Steps, stepResult{Step: k, Runs: s.N, Median: s.Median, P95: s.P95})
	}
	sort.Slice(rep.Steps, func(i, j int) bool {
		a, b := rep.Steps[i], rep.Steps[j]
		if a.Median != b.Median {
			return a.Median > b.Median
		}
		if a.P95 != b.P95 {
			return a.P95 > b.P95
		}
		return a.Step < b.Step
	})

	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			logf("%v", err)
			return 2
		}
	} else {
		printText(os.Stdout, rep)
	}
	if len(rep.Failures) > 0 {
		logf("%d run(s) failed; see above", len(rep.Failures))
		return 1
	}
	return 0
}

// unattributed returns, for one run's timings, the part of "created" not
// covered by its top-level steps (cgroups, clone, idmap, setup, ...) and the
// part of "setup" not covered by the init.* steps (sending the setup to the
// sandbox's init and waiting for its answer).
func unattributed(t map[string]float64) map[string]float64 {
	out := map[string]float64{}
	if created, ok := t[stepCreated]; ok {
		for k, v := range t {
			if !strings.Contains(k, ".") && k != stepCreated && k != stepHandshake && k != stepDestroyed {
				created -= v
			}
		}
		out[stepCreated+".unattributed"] = created
	}
	if setup, ok := t["setup"]; ok {
		for k, v := range t {
			if rest, ok := strings.CutPrefix(k, "init."); ok && !strings.Contains(rest, ".") {
				setup -= v
			}
		}
		out["setup.unattributed"] = setup
	}
	return out
}

// warmUp runs argv once, not counted. A failure is reported and the run
// retried, up to warmUpTries times: only a configuration that cannot run at
// all is left out.
func (r *runner) warmUp(rep *report, key, name string, argv []string) error {
	var err error
	for try := 1; try <= warmUpTries; try++ {
		var stderr string
		if _, stderr, err = r.run(argv); err == nil {
			return nil
		}
		rep.Failures = append(rep.Failures, failure{key, 0, err.Error(), stderr})
		logf("%s: warm-up run %d/%d failed: %v\n%s", name, try, warmUpTries, err, indent(stderr))
	}
	logf("%s: not measured", name)
	return err
}

// runner runs commands and times them. Their stderr goes to a file (no pipe
// and no copying goroutine in the measured path), stdin and stdout are
// /dev/null.
type runner struct {
	errf    *os.File
	lastCPU float64 // user+sys ms of the last run and what it waited for
	// reap: the process is the subreaper of what it runs; every run ends
	// with the processes it left behind reaped.
	reap  bool
	stuck error // a process left behind did not exit: no more runs
}

// orphanWait bounds the wait for the processes a run left behind.
const orphanWait = 30 * time.Second

// run runs argv once and returns its wall time in ms from just before the
// fork to the return of wait, and its stderr. A non-zero exit is an error.
func (r *runner) run(argv []string) (float64, string, error) { return r.runWhole(argv, false) }

// runWhole is run; with whole (and reap), the wall time runs to the exit
// of the last process the command left behind, and the CPU includes theirs.
func (r *runner) runWhole(argv []string, whole bool) (float64, string, error) {
	if r.stuck != nil {
		return 0, "", fmt.Errorf("not run: %w", r.stuck)
	}
	if err := r.errf.Truncate(0); err != nil {
		return 0, "", err
	}
	if _, err := r.errf.Seek(0, io.SeekStart); err != nil {
		return 0, "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stderr = r.errf
	cmd.WaitDelay = time.Second
	t0 := time.Now()
	err := cmd.Start()
	if err == nil {
		err = cmd.Wait()
	}
	d := time.Since(t0)
	r.lastCPU = 0
	if cmd.ProcessState != nil {
		r.lastCPU = float64(cmd.ProcessState.UserTime()+cmd.ProcessState.SystemTime()) / 1e6
	}
	if r.reap {
		cpu, reaped, rerr := reapOrphans(orphanWait)
		if rerr != nil {
			// A wait for any child is still pending: it would take the
			// next run's status. Nothing more can be measured.
			r.stuck = fmt.Errorf("%s: %w", strings.Join(argv, " "), rerr)
			return 0, r.stderr(), r.stuck
		}
		if whole {
			r.lastCPU += cpu
			if reaped {
				d = time.Since(t0)
			}
		}
	}
	stderr := r.stderr()
	if ctx.Err() != nil {
		err = fmt.Errorf("timed out after %s: %v", runTimeout, err)
	}
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%s: %v", strings.Join(argv, " "), ee)
		}
		return 0, stderr, err
	}
	return float64(d) / 1e6, stderr, nil
}

// reapOrphans waits for every child the process has left (the orphans of
// the last run, which a subreaper inherits) and returns their user+sys ms.
// Nothing else runs meanwhile: a wait for any child would take another
// run's.
func reapOrphans(limit time.Duration) (cpu float64, reaped bool, err error) {
	type result struct {
		cpu    float64
		reaped bool
	}
	done := make(chan result, 1)
	go func() {
		var res result
		for {
			var ws unix.WaitStatus
			var ru unix.Rusage
			pid, err := unix.Wait4(-1, &ws, 0, &ru)
			if err == unix.EINTR {
				continue
			}
			if err != nil || pid <= 0 {
				done <- res
				return
			}
			res.reaped = true
			res.cpu += float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e6
		}
	}()
	select {
	case res := <-done:
		return res.cpu, res.reaped, nil
	case <-time.After(limit):
		return 0, false, fmt.Errorf("a process it left behind was still running after %v", limit)
	}
}

func (r *runner) stderr() string {
	fi, err := r.errf.Stat()
	if err != nil {
		return ""
	}
	size := fi.Size()
	if size > 1<<20 {
		size = 1 << 20
	}
	buf := make([]byte, size)
	k, _ := r.errf.ReadAt(buf, 0)
	return string(buf[:k])
}

func progress(i, n int) {
	if i%10 == 0 || i == n {
		fmt.Fprintf(os.Stderr, "  %d/%d\r", i, n)
		if i == n {
			fmt.Fprintln(os.Stderr)
		}
	}
}

// indent prepares a failed run's stderr for the log.
func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return "    (no stderr)"
	}
	if len(s) > maxStderr {
		s = s[:maxStderr] + "\n[...]"
	}
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}

func kernel() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

func ms(v float64) string { return fmt.Sprintf("%.2fms", v) }

func printText(w io.Writer, rep *report) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "airlock-bench: %d runs each, interleaved; Linux %s, %d CPUs\n", rep.N, rep.Kernel, rep.CPUs)
	fmt.Fprintf(&b, "airlock: %s\n", rep.Airlock)
	if rep.Bwrap != "" {
		fmt.Fprintf(&b, "bwrap:   %s (%s)\n", rep.Bwrap, rep.BwrapVersion)
	}
	b.WriteString("\nEnd to end (wall time from fork to wait of the whole command):\n\n")
	nw := len("name")
	for _, r := range rep.Rows {
		nw = max(nw, len(r.Name))
	}
	for _, s := range rep.Skipped {
		nw = max(nw, len(s.Config))
	}
	fmt.Fprintf(&b, "%-*s  %5s  %9s  %9s  %9s  %9s  %8s\n", nw, "name", "runs", "median", "p95", "min", "mean", "vs bwrap")
	for _, r := range rep.Rows {
		ratio := "-"
		if r.RatioToBwrap != nil {
			ratio = fmt.Sprintf("%.2fx", *r.RatioToBwrap)
		}
		if r.N == 0 {
			fmt.Fprintf(&b, "%-*s  %5d  %9s  %9s  %9s  %9s  %8s\n", nw, r.Name, 0, "-", "-", "-", "-", ratio)
			continue
		}
		fmt.Fprintf(&b, "%-*s  %5d  %9s  %9s  %9s  %9s  %8s\n", nw, r.Name, r.N, ms(r.Median), ms(r.P95), ms(r.Min), ms(r.Mean), ratio)
	}
	for _, s := range rep.Skipped {
		fmt.Fprintf(&b, "%-*s  skipped: %s\n", nw, s.Config, s.Reason)
	}
	for _, r := range rep.Rows {
		if r.Failed > 0 {
			fmt.Fprintf(&b, "%s: %d failed run(s), not counted\n", r.Name, r.Failed)
		}
	}
	b.WriteString("(attribution) rows are weaker configurations, measured only to show what those layers cost.\n")
	b.WriteString("\nCPU time (user+sys of the command and of every process it waited for):\n\n")
	fmt.Fprintf(&b, "%-*s  %9s  %9s  %8s\n", nw, "name", "median", "p95", "vs bwrap")
	for _, r := range rep.Rows {
		if r.N == 0 {
			continue
		}
		ratio := "-"
		if r.CPURatioToBwrap != nil {
			ratio = fmt.Sprintf("%.2fx", *r.CPURatioToBwrap)
		}
		fmt.Fprintf(&b, "%-*s  %9s  %9s  %8s\n", nw, r.Name, ms(r.CPU.Median), ms(r.CPU.P95), ratio)
	}
	b.WriteString("\n")
	if rep.CPURatio != nil {
		fmt.Fprintf(&b, "airlock CPU median / bwrap CPU median = %.2f (target <= %.1f)\n", *rep.CPURatio, cpuTarget)
	}
	if rep.Ratio != nil {
		fmt.Fprintf(&b, "airlock median / bwrap median = %.2f (target <= %.1f)\n", *rep.Ratio, rep.Target)
	} else {
		why := "airlock was not measured"
		if rep.bwrapMedian == 0 {
			why = "bwrap was not measured"
		}
		fmt.Fprintf(&b, "airlock median / bwrap median = n/a, %s (target <= %.1f)\n", why, rep.Target)
	}

	if rep.WholeRatio != nil {
		fmt.Fprintf(&b, "against bwrap until its PID 1 exited (bwrap itself does not wait for it): airlock median / bwrap median = %.2f, CPU = %.2f\n", *rep.WholeRatio, *rep.WholeCPURatio)
	}
	if rep.WorkspaceRatio != nil && rep.WorkspaceLiveRatio != nil {
		fmt.Fprintf(&b, "with a 1 GiB workspace and every default protected path: airlock median / bwrap median = %.2f (overlay, the default), %.2f (live); target: airlock run's own ratio\n%s\n",
			*rep.WorkspaceRatio, *rep.WorkspaceLiveRatio, rep.WorkspaceNote)
	}
	if rep.GVisorRatio != nil {
		fmt.Fprintf(&b, "airlock --runtime gvisor median / runsc do median = %.2f (target <= 1.0)\n", *rep.GVisorRatio)
	}

	b.WriteString("\nSteps of `airlock run -v -- /bin/true` (nested: init.* are inside setup, init.mounts.* inside init.mounts, all inside created;\n*.unattributed = the parent minus its sub-steps; other = wall - created - handshake - destroyed, the airlock process itself):\n\n")
	sw := len("step")
	for _, s := range rep.Steps {
		sw = max(sw, len(s.Step))
	}
	fmt.Fprintf(&b, "%-*s  %9s  %9s\n", sw, "step", "median", "p95")
	runs := -1
	for _, s := range rep.Steps {
		fmt.Fprintf(&b, "%-*s  %9s  %9s\n", sw, s.Step, ms(s.Median), ms(s.P95))
		if s.Step == "wall" {
			runs = s.Runs
		}
	}
	if len(rep.Steps) == 0 && gvisorOnly {
		b.WriteString("(not measured: -gvisor-only)\n")
	} else if len(rep.Steps) == 0 {
		b.WriteString("(no successful run)\n")
	}
	for _, s := range rep.Steps {
		if runs >= 0 && s.Runs != runs {
			fmt.Fprintf(&b, "note: %s was reported by %d of %d runs\n", s.Step, s.Runs, runs)
		}
	}
	for _, wn := range rep.Warnings {
		fmt.Fprintf(&b, "warning: %s\n", wn)
	}
	if len(rep.Failures) > 0 {
		fmt.Fprintf(&b, "\n%d run(s) FAILED and were not counted (the first ones' stderr is above)\n", len(rep.Failures))
	}
	w.Write(b.Bytes())
}
