package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
)

// pythonBench drives the Python SDK (sdk/python) against the daemon at
// sys.argv[1] with policy sys.argv[2], batch by batch as stdin asks:
// "rtt N" times N exec round trips of `true` in one sandbox, "cycle N" N
// create+exec+destroy cycles in a row; each answer is a JSON line of
// milliseconds. The Go side interleaves its own batches with these, so
// both see the same load.
const pythonBench = `
import json, sys, time
import airlock
host, policy = sys.argv[1], sys.argv[2] or None
c = airlock.Client(host)
sb = c.create_sandbox(policy_name=policy)
for _ in range(5):
    c.exec(sb.id, ["true"])
for line in sys.stdin:
    what, n = line.split()
    out = []
    for i in range(int(n)):
        t0 = time.perf_counter()
        if what == "rtt":
            c.exec(sb.id, ["true"])
        else:
            s = c.create_sandbox(policy_name=policy)
            r = c.exec(s.id, ["true"])
            c.delete_sandbox(s.id)
            if r.exit_code != 0:
                raise SystemExit("true exited %d" % r.exit_code)
        out.append((time.perf_counter() - t0) * 1000)
    print(json.dumps(out), flush=True)
c.delete_sandbox(sb.id)
`

// pythonRows measures the Python SDK next to the Go SDK on the same daemon
// (socket sock, client c): the exec round trip of `true` (n*5 samples) and
// 100 create+exec+destroy cycles (policy "cold": no warm pool), in
// batches of 10 that alternate between the SDKs,
// and prints the medians with the ratio (target <= 1.3x). It prints why
// when python3 or the SDK is missing.
func pythonRows(c *client.Client, sock string, n int, sdkDir string) {
	const cycles = 100
	fmt.Println()
	py, err := exec.LookPath("python3")
	if err != nil {
		fmt.Println("Python SDK rows: skipped (python3 is not in PATH)")
		return
	}
	dir, err := filepath.Abs(sdkDir)
	if err == nil {
		_, err = os.Stat(filepath.Join(dir, "airlock", "__init__.py"))
	}
	if err != nil {
		fmt.Printf("Python SDK rows: skipped (no SDK at %s: -python-sdk DIR)\n", sdkDir)
		return
	}
	ctx := context.Background()
	cmd := exec.Command(py, "-c", pythonBench, "unix://"+sock, "cold")
	cmd.Env = append(os.Environ(), "PYTHONPATH="+dir, "PYTHONDONTWRITEBYTECODE=1")
	cmd.Stderr = os.Stderr
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		logf("python rows: %v", err)
		return
	}
	defer cmd.Wait()
	defer stdin.Close()
	lines := bufio.NewScanner(stdout)
	pyBatch := func(what string, k int) ([]float64, error) {
		fmt.Fprintf(stdin, "%s %d\n", what, k)
		if !lines.Scan() {
			return nil, fmt.Errorf("python3 ended: %v", lines.Err())
		}
		var xs []float64
		err := json.Unmarshal(lines.Bytes(), &xs)
		return xs, err
	}
	sb, err := c.CreateSandbox(ctx, &api.CreateSandboxRequest{PolicyName: "cold"})
	if err != nil {
		logf("python rows: create: %v", err)
		return
	}
	defer c.DeleteSandbox(ctx, sb.ID)
	goExec := func() (float64, error) {
		t0 := time.Now()
		_, err := c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"true"}})
		return float64(time.Since(t0).Microseconds()) / 1000, err
	}
	goCycle := func() (float64, error) {
		t0 := time.Now()
		s, err := c.CreateSandbox(ctx, &api.CreateSandboxRequest{PolicyName: "cold"})
		if err == nil {
			_, err = c.Exec(ctx, s.ID, &api.ExecRequest{Argv: []string{"true"}})
			if derr := c.DeleteSandbox(ctx, s.ID); err == nil {
				err = derr
			}
		}
		return float64(time.Since(t0).Microseconds()) / 1000, err
	}
	// Interleaved batches of 10: Go, then Python, until each has its count.
	var rows [2][2][]float64 // [rtt, cycle][Go, Python]
	for i, spec := range []struct {
		what  string
		total int
		run   func() (float64, error)
	}{{"rtt", n * 5, goExec}, {"cycle", cycles, goCycle}} {
		for done := 0; done < spec.total; done += 10 {
			for j := 0; j < 10; j++ {
				d, err := spec.run()
				if err != nil {
					logf("python rows: Go SDK %s: %v", spec.what, err)
					return
				}
				rows[i][0] = append(rows[i][0], d)
			}
			xs, err := pyBatch(spec.what, 10)
			if err != nil {
				logf("python rows: Python SDK %s: %v", spec.what, err)
				return
			}
			rows[i][1] = append(rows[i][1], xs...)
		}
	}
	fmt.Printf("%-48s %10s %10s %10s %s\n", "SDKs, same daemon, interleaved (median)", "Go SDK", "Python", "ratio", "target")
	pair := func(name string, g, p []float64) {
		gm, pm := median(sorted(g)), median(sorted(p))
		fmt.Printf("%-48s %10s %10s %9.2fx %s\n", name, ms(gm), ms(pm), pm/gm, "<= 1.3x")
	}
	pair("exec round trip of true", rows[0][0], rows[0][1])
	pair(fmt.Sprintf("%d create+exec+destroy in a row, per cycle", cycles), rows[1][0], rows[1][1])
}
