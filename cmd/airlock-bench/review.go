package main

// `airlock-bench review` measures review mode end to end with the real
// binary:
//
//   - the overhead of `airlock run --review --workspace DIR -- /bin/true`
//     (an overlay workspace, nothing changed, so nothing to decide) over
//     plain `airlock run -- /bin/true`, and of the overlay without review
//     (`airlock run --workspace DIR -- /bin/true`), with DIR a tree of
//     -files files; the three are run interleaved, round-robin, N each;
//   - in the same tree, a sandbox appends to -changes files under
//     --review (left pending); then `airlock review diff ID --json`
//     and `airlock review apply ID` are timed, N times each, next to the
//     same in a tree of 1000 files: both walk what changed, not the tree.
//
// Runs keep their state in a temporary AIRLOCK_CHANGES_DIR, removed at the
// end. Medians are what to compare.

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/internal/workspace/wstest"
)

var benchPendingRE = regexp.MustCompile(`airlock review apply ([0-9a-f]{16})`)

func runReview(args []string) int {
	fs := flag.NewFlagSet("review", flag.ExitOnError)
	n := fs.Int("n", 30, "runs of each configuration")
	airlockPath := fs.String("airlock", "./bin/airlock", "airlock binary to measure")
	files := fs.Int("files", 100000, "files in the large workspace")
	changes := fs.Int("changes", 10, "files the sandbox changes")
	fs.Parse(args)
	if *n < 1 || *files < *changes || *changes < 1 || fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	al, err := filepath.Abs(*airlockPath)
	if err != nil {
		logf("review: %v", err)
		return 2
	}
	tmp, err := os.MkdirTemp("", "airlock-bench-review-")
	if err != nil {
		logf("review: %v", err)
		return 1
	}
	defer os.RemoveAll(tmp)
	env := append(os.Environ(), "AIRLOCK_CHANGES_DIR="+filepath.Join(tmp, "changes"))
	exe := func(args ...string) (float64, string, error) {
		cmd := exec.Command(al, args...)
		cmd.Env = env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		t0 := time.Now()
		err := cmd.Run()
		d := time.Since(t0).Seconds() * 1000
		if err != nil {
			return 0, "", fmt.Errorf("airlock %s: %v: %s", strings.Join(args, " "), err, stderr.String())
		}
		return d, stderr.String(), nil
	}
	trees := map[int]string{}
	for _, size := range []int{1000, *files} {
		dir := filepath.Join(tmp, fmt.Sprintf("ws%d", size))
		logf("review: writing %d files", size)
		t0 := time.Now()
		if err := wstest.MakeTree(dir, size); err != nil {
			logf("review: %v", err)
			return 1
		}
		logf("review: %d files written in %.1fs", size, time.Since(t0).Seconds())
		trees[size] = dir
	}
	big := trees[*files]

	// Part 1: overhead, interleaved.
	configs := []struct {
		name string
		argv []string
		xs   []float64
	}{
		{name: "airlock run -- /bin/true", argv: []string{"run", "--", "/bin/true"}},
		{name: fmt.Sprintf("airlock run --workspace W(%d files) -- /bin/true", *files), argv: []string{"run", "--workspace", big, "--", "/bin/true"}},
		{name: fmt.Sprintf("airlock run --review --workspace W(%d files) -- /bin/true", *files), argv: []string{"run", "--review", "--workspace", big, "--", "/bin/true"}},
	}
	for i := range configs { // warm-up
		if _, _, err := exe(configs[i].argv...); err != nil {
			logf("review: %v", err)
			return 1
		}
	}
	for i := 0; i < *n; i++ {
		for k := range configs {
			c := &configs[(i+k)%len(configs)]
			d, _, err := exe(c.argv...)
			if err != nil {
				logf("review: %v", err)
				return 1
			}
			c.xs = append(c.xs, d)
		}
		progress(i+1, *n)
	}
	base := summarize(configs[0].xs).Median
	fmt.Printf("overhead of the overlay and of --review, %d runs each, interleaved\n", *n)
	fmt.Printf("%-62s %10s %10s %10s %10s\n", "", "median", "p95", "min", "+median")
	for _, c := range configs {
		s := summarize(c.xs)
		fmt.Printf("%-62s %10s %10s %10s %10s\n", c.name, ms(s.Median), ms(s.P95), ms(s.Min), ms(s.Median-base))
	}

	// Part 2: review and apply of N changes, by tree size.
	fmt.Println()
	fmt.Printf("review diff --json and apply of %d changed files, %d runs each\n", *changes, *n)
	fmt.Printf("%-40s %10s %10s %10s\n", "", "median", "p95", "min")
	for _, size := range []int{1000, *files} {
		dir := trees[size]
		var sb strings.Builder
		for k := 0; k < *changes; k++ {
			fmt.Fprintf(&sb, "echo changed >> %s; ", wstest.Path(k*9973%size))
		}
		var diffs, applies []float64
		for i := 0; i < *n; i++ {
			_, stderr, err := exe("run", "--review", "--workspace", dir, "--", "/bin/sh", "-c", sb.String())
			if err != nil {
				logf("review: %v", err)
				return 1
			}
			m := benchPendingRE.FindStringSubmatch(stderr)
			if m == nil {
				logf("review: no pending run in %s", stderr)
				return 1
			}
			cmd := exec.Command(al, "review", "diff", m[1], "--json")
			cmd.Env = env
			t0 := time.Now()
			out, err := cmd.Output()
			diffs = append(diffs, time.Since(t0).Seconds()*1000)
			var list []json.RawMessage
			if err != nil || json.Unmarshal(out, &list) != nil || len(list) != *changes {
				logf("review: review diff gave %d changes, want %d (%v)", len(list), *changes, err)
				return 1
			}
			d, _, err := exe("review", "apply", m[1])
			if err != nil {
				logf("review: %v", err)
				return 1
			}
			applies = append(applies, d)
		}
		for _, row := range []struct {
			what string
			xs   []float64
		}{{"review diff", diffs}, {"review apply", applies}} {
			s := summarize(row.xs)
			fmt.Printf("%-40s %10s %10s %10s\n", fmt.Sprintf("%s, %d files", row.what, size), ms(s.Median), ms(s.P95), ms(s.Min))
		}
	}
	return 0
}
