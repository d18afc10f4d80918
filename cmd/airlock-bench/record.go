package main

// `airlock-bench record` (`make bench-record`) measures what the activity
// record (`airlock run --record FILE`) costs, side by side without and
// with it, each row a whole `airlock run` (sandbox creation and teardown
// included), N runs of each, interleaved (the order alternates each
// round), medians:
//
//   - a shell loop of 500 execs of /bin/true (every exec waits for the
//     supervisor: the per-exec cost);
//   - a warm `go build` of a small stdlib-only module (--cache go, filled
//     by one warm-up build first);
//   - `airlock run -- true` (the fixed cost: the extra filter, the proc
//     connector subscription, the cpuacct hierarchy on cgroup v1).
//
// Needs root (--record does). Records go to a temporary directory.

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

func runRecord(args []string) int {
	fs := flag.NewFlagSet("record", flag.ExitOnError)
	n := fs.Int("n", 10, "runs of each row and configuration")
	airlockPath := fs.String("airlock", "./bin/airlock", "airlock binary to measure")
	fs.Parse(args)
	if *n < 1 || fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	if os.Geteuid() != 0 {
		logf("airlock-bench record: --record needs root")
		return 1
	}
	tmp, goFlags, err := goModule("record")
	if err != nil {
		logf("airlock-bench record: %v", err)
		return 1
	}
	defer os.RemoveAll(tmp)
	env := append(os.Environ(), "AIRLOCK_CACHE_DIR="+filepath.Join(tmp, "caches"))
	goFlags = append(goFlags, "--cache", "go")
	rows := []struct {
		name string
		argv []string
	}{
		{"500 execs of /bin/true", []string{"--", "/bin/sh", "-c", "i=0; while [ $i -lt 500 ]; do /bin/true; i=$((i+1)); done"}},
		{"warm go build", append(append([]string{}, goFlags...), "--", "go", "build", "-o", "/tmp/tiny", ".")},
		{"airlock run true", []string{"--", "true"}},
	}
	recFile := filepath.Join(tmp, "record.jsonl")
	one := func(argv []string, rec bool) (float64, error) {
		a := []string{"run"}
		if rec {
			a = append(a, "--record", recFile)
		}
		cmd := exec.Command(*airlockPath, append(a, argv...)...)
		cmd.Env = env
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		t0 := time.Now()
		err := cmd.Run()
		d := time.Since(t0).Seconds() * 1000
		if err != nil {
			return 0, fmt.Errorf("%v: %s", err, stderr.String())
		}
		return d, nil
	}
	logf("warm-up: one run of each row and configuration (fills the go cache)")
	for _, r := range rows {
		for _, rec := range []bool{false, true} {
			if _, err := one(r.argv, rec); err != nil {
				logf("airlock-bench record: %s: %v", r.name, err)
				return 1
			}
		}
	}
	without := make([][]float64, len(rows))
	with := make([][]float64, len(rows))
	for i := 0; i < *n; i++ {
		for j, r := range rows {
			for _, rec := range []bool{i%2 == 1, i%2 == 0} {
				d, err := one(r.argv, rec)
				if err != nil {
					logf("airlock-bench record: %s: %v", r.name, err)
					return 1
				}
				if rec {
					with[j] = append(with[j], d)
				} else {
					without[j] = append(without[j], d)
				}
			}
		}
		progress(i+1, *n)
	}
	fmt.Printf("airlock run without and with --record, %d runs each, interleaved; milliseconds\n", *n)
	fmt.Printf("%-24s %14s %14s %10s %22s\n", "", "without (med)", "with (med)", "with/w/o", "with: min-max")
	for j, r := range rows {
		a, b := summarize(without[j]), summarize(with[j])
		fmt.Printf("%-24s %14.1f %14.1f %9.2fx %10.1f-%-10.1f\n", r.name, a.Median, b.Median, b.Median/a.Median, b.Min, b.Max)
	}
	return 0
}
