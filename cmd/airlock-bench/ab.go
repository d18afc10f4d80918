package main

import (
	"flag"
	"fmt"
	"io"
	"os"
)

// runAB times two builds of airlock against each other, alternating them
// run by run (A B, then B A), each run a fork, an exec and a wait with its
// rusage: the comparison used for every A/B figure in
// docs/performance.md. Two builds differ by less than this machine's
// drift from one minute to the next; only alternating shows it.
//
//	go run ./cmd/airlock-bench ab -n 200 OLD NEW [ARG...]
//
// ARGs are what each binary runs (default: run -- /bin/true). Copy both
// binaries before comparing them: a file the Go linker has just written
// starts slower than the same bytes copied (docs/performance.md).
func runAB(args []string) int {
	fs := flag.NewFlagSet("ab", flag.ContinueOnError)
	n := fs.Int("n", 200, "pairs of runs")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: airlock-bench ab [-n 200] A B [ARG...]  (ARG default: run -- /bin/true)\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() < 2 || *n < 1 {
		fs.Usage()
		return 2
	}
	a, b, rest := fs.Arg(0), fs.Arg(1), fs.Args()[2:]
	if len(rest) == 0 {
		rest = []string{"run", "--", "/bin/true"}
	}
	if err := ab(os.Stdout, *n, [2]string{a, b}, rest); err != nil {
		fmt.Fprintf(os.Stderr, "airlock-bench ab: %v\n", err)
		return 1
	}
	return 0
}

func ab(w io.Writer, n int, bins [2]string, args []string) error {
	errf, err := os.CreateTemp("", "airlock-bench-ab-")
	if err != nil {
		return err
	}
	defer os.Remove(errf.Name())
	defer errf.Close()
	r := &runner{errf: errf}
	var wall, cpu [2][]float64
	fasterWall, fasterCPU := 0, 0
	for i := range n {
		order := [2]int{0, 1}
		if i%2 == 1 {
			order = [2]int{1, 0}
		}
		var pw, pc [2]float64
		for _, k := range order {
			d, stderr, err := r.run(append([]string{bins[k]}, args...))
			if err != nil {
				return fmt.Errorf("%v\n%s", err, indent(stderr))
			}
			pw[k], pc[k] = d, r.lastCPU
			wall[k], cpu[k] = append(wall[k], d), append(cpu[k], r.lastCPU)
		}
		if pw[1] < pw[0] {
			fasterWall++
		}
		if pc[1] < pc[0] {
			fasterCPU++
		}
	}
	for k := range 2 {
		wall[k], cpu[k] = sorted(wall[k]), sorted(cpu[k])
	}
	fmt.Fprintf(w, "%d alternating pairs of: %v\n\n", n, args)
	fmt.Fprintf(w, "%-6s %10s %10s %10s %10s  %s\n", "", "wall p50", "wall p95", "CPU p50", "CPU p95", "binary")
	for k, name := range [2]string{"A", "B"} {
		fmt.Fprintf(w, "%-6s %10s %10s %10s %10s  %s\n", name, ms(median(wall[k])), ms(percentile(wall[k], 95)), ms(median(cpu[k])), ms(percentile(cpu[k], 95)), bins[k])
	}
	fmt.Fprintf(w, "\nB - A: wall %+.2f ms, CPU %+.2f ms (medians); B faster in %d/%d pairs by wall, %d/%d by CPU\n",
		median(wall[1])-median(wall[0]), median(cpu[1])-median(cpu[0]), fasterWall, n, fasterCPU, n)
	return nil
}
