package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-dev/airlock/api"
)

// runABServe is ab for the service: two builds of airlock each run a
// daemon, side by side, and one measurement is taken from each in turn,
// pair by pair (A B, then B A), so that both see the same machine. The
// service's rows move with the machine's drift as much as `airlock run`'s
// do (the same build's gVisor exec round trip measured 11.3, 13.2 and
// 15.5 ms within an hour here, its runsc reference 20.7 to 25.1 ms): a
// change to the daemon or the agent is measured this way or not at all.
//
//	go run ./cmd/airlock-bench ab-serve [-n 100] [-runtime native|gvisor] [-warm] [-pause 0] OLD NEW
//
// It measures the exec round trip of `true` in a running sandbox of each
// daemon, or with -warm the creation from a warm pool until the first exec
// of `true` has answered (both pools full before each one). -pause
// leaves the machine idle that long before each measurement: a request
// that finds the machine idle pays for waking it at every hop between
// processes, as an agent's command after its model's reply does.
//
// Compare both ways, OLD NEW and NEW OLD: with -warm, the second daemon
// started had an edge of its own here (0.12 ms, 57-59 pairs of 100, with
// the same binary on both sides).
func runABServe(args []string) int {
	fs := flag.NewFlagSet("ab-serve", flag.ContinueOnError)
	n := fs.Int("n", 100, "pairs of measurements")
	rt := fs.String("runtime", "native", "the sandboxes' runtime: native or gvisor")
	warm := fs.Bool("warm", false, "measure create -> first exec from a warm pool instead of the exec round trip")
	pause := fs.Duration("pause", 0, "idle time before each measurement")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: airlock-bench ab-serve [-n 100] [-runtime native|gvisor] [-warm] [-pause 0] A B\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 2 || *n < 1 || *pause < 0 || (*rt != "native" && *rt != "gvisor") {
		fs.Usage()
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	bins := [2]string{fs.Arg(0), fs.Arg(1)}
	var measure [2]func() ([]float64, error)
	var settle []func() error // each daemon's, before every measurement
	for k, bin := range bins {
		d, m, s, err := abServeDaemon(ctx, bin, *rt, *warm)
		if d != nil {
			defer d.cleanup()
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "airlock-bench ab-serve: %s: %v\n", bin, err)
			return 1
		}
		if s != nil {
			settle = append(settle, s)
		}
		measure[k] = func() ([]float64, error) {
			for _, s := range settle {
				if err := s(); err != nil {
					return nil, err
				}
			}
			time.Sleep(*pause)
			v, err := m()
			return []float64{v}, err
		}
	}
	what := fmt.Sprintf("exec round trip of true, %s sandbox", *rt)
	if *warm {
		what = fmt.Sprintf("create -> first exec of true, warm pool, %s sandbox", *rt)
	}
	if *pause > 0 {
		what += fmt.Sprintf(", each after %v idle", *pause)
	}
	if err := abPairs(os.Stdout, *n, bins, what, []string{""}, measure); err != nil {
		fmt.Fprintf(os.Stderr, "airlock-bench ab-serve: %v\n", err)
		return 1
	}
	return 0
}

// abServePool is the size of each daemon's warm pool with -warm.
const abServePool = 2

// abServeDaemon starts a daemon of bin with runtime rt as its default and
// returns the measurement to take from it and, with warm, what must hold
// before any measurement of either daemon: its pool full (a pool refills
// after each creation, and a measurement taken meanwhile would time the
// refill's competition too). The daemon is returned for cleanup even when
// it failed to start.
func abServeDaemon(ctx context.Context, bin, rt string, warm bool) (*benchDaemon, func() (float64, error), func() error, error) {
	d, err := newBenchDaemon(bin, "airlock-bench-ab-serve-")
	if err != nil {
		return nil, nil, nil, err
	}
	sock := d.sock()
	d.cfg = fmt.Sprintf("socket: %s\ndata_dir: %s\nstate_dir: %s\nlog_level: warn\nmax_sandboxes: 16\nmax_creating: 4\ndefault_runtime: %s\n",
		sock, filepath.Join(d.dir, "data"), d.stateDir(), rt)
	if warm {
		d.cfg += fmt.Sprintf("pools:\n  - policy: default\n    size: %d\n", abServePool)
	}
	if err := d.start(ctx); err != nil {
		return d, nil, nil, err
	}
	d.created = true // a warm pool fills from the start
	c := d.c
	if warm {
		series := fmt.Sprintf(`airlock_pool_ready_by_runtime{runtime=%q,image="",policy="default"}`, rt)
		full := func() error {
			for i := 0; metric(sock, series) < abServePool; i++ {
				if i == 6000 {
					return fmt.Errorf("%s: the warm pool did not refill in 60s", bin)
				}
				time.Sleep(10 * time.Millisecond)
			}
			return nil
		}
		return d, func() (float64, error) { return createExecMs(ctx, c, &api.CreateSandboxRequest{}) }, full, nil
	}
	sb, err := c.CreateSandbox(ctx, &api.CreateSandboxRequest{})
	if err != nil {
		return d, nil, nil, fmt.Errorf("create: %w", err)
	}
	if sb.Runtime != rt {
		return d, nil, nil, fmt.Errorf("sandbox %s has runtime %q, not %q", sb.ID, sb.Runtime, rt)
	}
	rtt := func() (float64, error) {
		t0 := time.Now()
		res, err := c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"true"}})
		took := float64(time.Since(t0).Microseconds()) / 1000
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("true exited %d", res.ExitCode)
		}
		return took, err
	}
	// The first commands of a sandbox pay one-time costs (the gVisor
	// Sentry's caches of the command's files): not counted.
	for range 3 {
		if _, err := rtt(); err != nil {
			return d, nil, nil, fmt.Errorf("exec: %w", err)
		}
	}
	return d, rtt, nil, nil
}

// abPairs takes n pairs of the two builds' measurements, in alternating
// order (A B, then B A), and prints, for each metric (one value each per
// measurement, in milliseconds; an unnamed one for a single metric), the
// builds' medians and p95s, the difference of the medians and how often B
// was the faster of its pair. A failed measurement ends it.
func abPairs(w io.Writer, n int, names [2]string, what string, metrics []string, measure [2]func() ([]float64, error)) error {
	v := make([][2][]float64, len(metrics))
	faster := make([]int, len(metrics))
	for i := range n {
		order := [2]int{0, 1}
		if i%2 == 1 {
			order = [2]int{1, 0}
		}
		var p [2][]float64
		for _, k := range order {
			d, err := measure[k]()
			if err != nil {
				return fmt.Errorf("%s: %w", names[k], err)
			}
			if len(d) != len(metrics) {
				return fmt.Errorf("%s: %d values for %d metrics", names[k], len(d), len(metrics))
			}
			p[k] = d
			for j := range metrics {
				v[j][k] = append(v[j][k], d[j])
			}
		}
		for j := range metrics {
			if p[1][j] < p[0][j] {
				faster[j]++
			}
		}
	}
	label := func(m, s string) string {
		if m == "" {
			return s
		}
		return m + " " + s
	}
	fmt.Fprintf(w, "%d alternating pairs of: %s\n\n%-6s", n, what, "")
	for _, m := range metrics {
		fmt.Fprintf(w, " %10s %10s", label(m, "p50"), label(m, "p95"))
	}
	fmt.Fprintf(w, "  binary\n")
	for k, name := range [2]string{"A", "B"} {
		fmt.Fprintf(w, "%-6s", name)
		for j := range metrics {
			v[j][k] = sorted(v[j][k])
			fmt.Fprintf(w, " %10s %10s", ms(median(v[j][k])), ms(percentile(v[j][k], 95)))
		}
		fmt.Fprintf(w, "  %s\n", names[k])
	}
	var deltas, wins []string
	for j, m := range metrics {
		delta, win := fmt.Sprintf("%+.2f ms", median(v[j][1])-median(v[j][0])), fmt.Sprintf("%d/%d pairs", faster[j], n)
		if m != "" {
			delta, win = m+" "+delta, win+" by "+m
		}
		deltas, wins = append(deltas, delta), append(wins, win)
	}
	fmt.Fprintf(w, "\nB - A: %s (medians); B faster in %s\n", strings.Join(deltas, ", "), strings.Join(wins, ", "))
	return nil
}
