package main

// `airlock-bench procs` (`make bench-procs`) measures what one more process
// costs inside a sandbox, the figure that decides how builds and shell
// loops fare: a shell's fork, exec and wait of /bin/true, repeated -loop
// times inside one sandbox and timed by the shell itself (the sandbox's own
// clock, from before the first fork to after the last wait), so the
// sandbox's creation and teardown are not in it. Rows, run interleaved
// round-robin -n times (each round starting with a different row):
//
//   - the host: the same shell loop without a sandbox, the floor;
//   - bwrap: under bubblewrap with every namespace unshared;
//   - airlock run (native);
//   - airlock run --runtime gvisor, and the same with --insecure-no-seccomp
//     (attribution: under gVisor the Sentry evaluates the policy's
//     filter, and prepares it again for every new task);
//   - runsc do, gVisor's own one-shot command, without a filter.
//
// Each value is the loop's mean per iteration; the table shows the median,
// minimum and maximum of the -n values of each row. Every row runs once
// first, not counted; one that fails then (gVisor without root, say) is
// left out with its error.

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/airlock-dev/airlock/internal/runtime/gvisor"
)

// procsScript runs /bin/true $1 times and prints the mean nanoseconds per
// iteration.
const procsScript = `n=$1; a=$(date +%s%N); i=0
while [ $i -lt $n ]; do /bin/true; i=$((i+1)); done
b=$(date +%s%N); echo $(( (b - a) / n ))`

func runProcs(args []string) int {
	fs := flag.NewFlagSet("procs", flag.ExitOnError)
	n := fs.Int("n", 10, "measurements of each row")
	loop := fs.Int("loop", 200, "processes started per measurement")
	al := fs.String("airlock", "./bin/airlock", "airlock binary to measure")
	fs.Parse(args)
	if *n < 1 || *loop < 1 || fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	sh := []string{"/bin/sh", "-c", procsScript, "sh", strconv.Itoa(*loop)}
	type row struct {
		name string
		argv []string
		ns   []float64
	}
	rows := []*row{{name: "host (no sandbox)", argv: sh}}
	if bw, err := exec.LookPath("bwrap"); err == nil {
		bargs := append([]string{bw}, bwrapArgs[:len(bwrapArgs)-1]...) // without its /bin/true
		rows = append(rows, &row{name: "bwrap --unshare-all", argv: append(bargs, sh...)})
	} else {
		logf("skipping the bwrap row: bwrap is not installed")
	}
	rows = append(rows, &row{name: "airlock run", argv: append([]string{*al, "run", "--"}, sh...)})
	var gv, gvNoFilter, runscDo *row
	if runsc, err := gvisor.Find(); err != nil {
		logf("skipping the gvisor rows: %v", err)
	} else {
		doRoot, err := os.MkdirTemp("", "airlock-bench-runsc-")
		if err != nil {
			logf("airlock-bench procs: %v", err)
			return 1
		}
		defer os.RemoveAll(doRoot)
		gv = &row{name: "airlock run --runtime gvisor", argv: append([]string{*al, "run", "--runtime", "gvisor", "--"}, sh...)}
		gvNoFilter = &row{name: "the same, --insecure-no-seccomp (attribution)",
			argv: append([]string{*al, "run", "--runtime", "gvisor", "--insecure-no-seccomp", "--"}, sh...)}
		runscDo = &row{name: "runsc do (gvisor, no filter)",
			argv: append([]string{runsc, "--root", doRoot, "--network=none", "--sidecar-usage-policy=LEGACY_DEPRECATED_SLOW_EMBEDDED_FALLBACK", "do"}, sh...)}
		rows = append(rows, gv, gvNoFilter, runscDo)
	}
	measure := func(r *row) (float64, error) {
		cmd := exec.Command(r.argv[0], r.argv[1:]...)
		var out, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &stderr
		if err := cmd.Run(); err != nil {
			return 0, fmt.Errorf("%s: %v: %s", r.name, err, strings.TrimSpace(stderr.String()))
		}
		fields := strings.Fields(out.String())
		if len(fields) == 0 {
			return 0, fmt.Errorf("%s: no output", r.name)
		}
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil || v <= 0 {
			return 0, fmt.Errorf("%s: want nanoseconds per iteration, got %q", r.name, out.String())
		}
		return v, nil
	}
	// One warm-up measurement each, not counted: a row that cannot run
	// here (no root for gVisor, no user namespaces) is left out, with why.
	kept := rows[:0]
	for _, r := range rows {
		if _, err := measure(r); err != nil {
			logf("leaving out %v", err)
			if r == gv || r == gvNoFilter || r == runscDo {
				gv = nil
			}
			continue
		}
		kept = append(kept, r)
	}
	rows = kept
	if len(rows) == 0 || rows[0].argv[0] != sh[0] {
		logf("airlock-bench procs: the host row failed")
		return 1
	}
	logf("%d rows x %d measurements of %d processes each, interleaved, after one warm-up each", len(rows), *n, *loop)
	for i := 0; i < *n; i++ {
		for k := range rows {
			r := rows[(i+k)%len(rows)]
			v, err := measure(r)
			if err != nil {
				logf("airlock-bench procs: %v", err)
				return 1
			}
			r.ns = append(r.ns, v)
		}
		progress(i+1, *n)
	}
	us := func(ns float64) string { return fmt.Sprintf("%.0f µs", ns/1000) }
	fmt.Printf("fork+exec+wait of /bin/true by a shell inside the sandbox, mean of %d per measurement, %d measurements per row\n\n", *loop, *n)
	fmt.Printf("%-48s %10s %10s %10s %9s\n", "", "median", "min", "max", "vs host")
	host := summarize(rows[0].ns).Median
	med := map[*row]float64{}
	for _, r := range rows {
		s := summarize(r.ns)
		med[r] = s.Median
		fmt.Printf("%-48s %10s %10s %10s %8.2fx\n", r.name, us(s.Median), us(s.Min), us(s.Max), s.Median/host)
	}
	if gv != nil {
		fmt.Printf("\ngvisor: airlock / runsc do = %.2f (medians); the policy's filter adds %s per process (airlock - the same with --insecure-no-seccomp)\n",
			med[gv]/med[runscDo], us(med[gv]-med[gvNoFilter]))
	}
	return 0
}
