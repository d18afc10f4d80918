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
	var measure [2]func() ([]float64, error)
	for k, bin := range bins {
		measure[k] = func() ([]float64, error) {
			d, stderr, err := r.run(append([]string{bin}, args...))
			if err != nil {
				return nil, fmt.Errorf("%v\n%s", err, indent(stderr))
			}
			return []float64{d, r.lastCPU}, nil
		}
	}
	return abPairs(w, n, bins, fmt.Sprint(args), []string{"wall", "CPU"}, measure)
}
