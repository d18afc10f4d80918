package main

import (
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
// sys.argv[1]: n exec round trips of `true` in one sandbox, then cycles
// create+exec+destroy in a row, with policy sys.argv[4]. It prints the
// milliseconds of each as JSON.
const pythonBench = `
import json, sys, time
import airlock
host, n, cycles, policy = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] or None
c = airlock.Client(host)
rtt, cyc = [], []
sb = c.create_sandbox(policy_name=policy)
for i in range(-5, n):
    t0 = time.perf_counter()
    c.exec(sb.id, ["true"])
    if i >= 0:
        rtt.append((time.perf_counter() - t0) * 1000)
c.delete_sandbox(sb.id)
for i in range(-1, cycles):
    t0 = time.perf_counter()
    s = c.create_sandbox(policy_name=policy)
    r = c.exec(s.id, ["true"])
    c.delete_sandbox(s.id)
    if r.exit_code != 0:
        raise SystemExit("true exited %d" % r.exit_code)
    if i >= 0:
        cyc.append((time.perf_counter() - t0) * 1000)
print(json.dumps({"rtt": rtt, "cycle": cyc}))
`

// pythonRows measures the Python SDK next to the Go SDK on the same daemon
// (socket sock, client c): the exec round trip of `true` (n*5 samples) and
// 100 create+exec+destroy cycles in a row (policy "cold": no warm pool),
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
	goRTT, goCycle := []float64{}, []float64{}
	sb, err := c.CreateSandbox(ctx, &api.CreateSandboxRequest{PolicyName: "cold"})
	if err != nil {
		logf("python rows: create: %v", err)
		return
	}
	for i := -5; i < n*5; i++ {
		t0 := time.Now()
		if _, err := c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"true"}}); err != nil {
			logf("python rows: exec: %v", err)
			return
		}
		if i >= 0 {
			goRTT = append(goRTT, float64(time.Since(t0).Microseconds())/1000)
		}
	}
	c.DeleteSandbox(ctx, sb.ID)
	for i := -1; i < cycles; i++ {
		t0 := time.Now()
		s, err := c.CreateSandbox(ctx, &api.CreateSandboxRequest{PolicyName: "cold"})
		if err == nil {
			_, err = c.Exec(ctx, s.ID, &api.ExecRequest{Argv: []string{"true"}})
			if derr := c.DeleteSandbox(ctx, s.ID); err == nil {
				err = derr
			}
		}
		if err != nil {
			logf("python rows: cycle: %v", err)
			return
		}
		if i >= 0 {
			goCycle = append(goCycle, float64(time.Since(t0).Microseconds())/1000)
		}
	}
	cmd := exec.Command(py, "-c", pythonBench, "unix://"+sock, fmt.Sprint(n*5), fmt.Sprint(cycles), "cold")
	cmd.Env = append(os.Environ(), "PYTHONPATH="+dir, "PYTHONDONTWRITEBYTECODE=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		logf("python rows: %v", err)
		return
	}
	var res struct{ RTT, Cycle []float64 }
	if err := json.Unmarshal(out, &res); err != nil {
		logf("python rows: bad output %q: %v", out, err)
		return
	}
	fmt.Printf("%-48s %10s %10s %10s %s\n", "SDKs, same daemon (median)", "Go SDK", "Python", "ratio", "target")
	pair := func(name string, g, p []float64) {
		gm, pm := median(sorted(g)), median(sorted(p))
		fmt.Printf("%-48s %10s %10s %9.2fx %s\n", name, ms(gm), ms(pm), pm/gm, "<= 1.3x")
	}
	pair("exec round trip of true", goRTT, res.RTT)
	pair(fmt.Sprintf("%d create+exec+destroy in a row, per cycle", cycles), goCycle, res.Cycle)
}
