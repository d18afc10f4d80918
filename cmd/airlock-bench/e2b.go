package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// e2bRows measures the E2B compatibility layer with the official E2B JS
// SDK (pinned in sdkDir, installed with npm ci into a temporary directory),
// against a daemon of its own with a warm pool: create -> first command,
// and a 20-step workload timed end to end through the E2B SDK, through
// E2B's protocol with plain fetch (the layer's overhead without the SDK's
// client-side work) and through /v1 with plain fetch, from the same node
// process (and through airlock's TypeScript SDK when tsDir holds it
// built), each started with the pool full, taking turns at going first. Without node and npm it says so and
// returns.
func e2bRows(al, sdkDir, tsDir string, n int) {
	fmt.Println()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			fmt.Printf("E2B SDK rows: skipped (%s is not installed)\n", tool)
			return
		}
	}
	daemon, err := newBenchDaemon(al, "airlock-bench-e2b-")
	if err != nil {
		logf("%v", err)
		return
	}
	dir := daemon.dir
	defer daemon.cleanup()
	sdk := filepath.Join(dir, "sdk")
	os.Mkdir(sdk, 0o755)
	for _, f := range []string{"package.json", "package-lock.json", "bench.mjs"} {
		b, err := os.ReadFile(filepath.Join(sdkDir, f))
		if err != nil {
			fmt.Printf("E2B SDK rows: skipped (%v; run from the repository's root or set -e2b-sdk)\n", err)
			return
		}
		os.WriteFile(filepath.Join(sdk, f), b, 0o644)
	}
	npm := exec.Command("npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund")
	npm.Dir = sdk
	if out, err := npm.CombinedOutput(); err != nil {
		fmt.Printf("E2B SDK rows: skipped (npm ci: %v)\n%s", err, out)
		return
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		logf("%v", err)
		return
	}
	addr := l.Addr().String()
	l.Close()
	sock := daemon.sock()
	daemon.cfg = fmt.Sprintf("socket: %s\nlisten: %s\ndata_dir: %s\nstate_dir: %s\nlog_level: warn\npools:\n  - policy: default\n    size: 8\n",
		sock, addr, filepath.Join(dir, "data"), daemon.stateDir())
	ctx := context.Background()
	if err := daemon.start(ctx); err != nil {
		logf("%v", err)
		return
	}
	daemon.created = true // its warm pool fills from the start
	c := daemon.c
	k, err := c.CreateKey(ctx, "bench")
	if err != nil {
		logf("key: %v", err)
		return
	}
	for i := 0; i < 500 && metric(sock, `airlock_pool_ready{image="",policy="default"}`) < 8; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	node := exec.Command("node", "bench.mjs")
	node.Dir = sdk
	node.Env = append(os.Environ(), "E2B_API_URL=http://"+addr, "E2B_SANDBOX_URL=http://"+addr, "E2B_API_KEY="+k.Key,
		fmt.Sprintf("BENCH_N=%d", n), "BENCH_POOL=8")
	// airlock's own TypeScript SDK, when built, for an SDK-against-SDK row.
	if tsDir != "" {
		if js, err := filepath.Abs(filepath.Join(tsDir, "dist", "index.js")); err == nil {
			if _, err := os.Stat(js); err == nil {
				node.Env = append(node.Env, "AIRLOCK_TS_SDK="+js)
			}
		}
	}
	var stderr bytes.Buffer
	node.Stderr = &stderr
	out, err := node.Output()
	if err != nil {
		logf("E2B SDK bench: %v\n%s\n%s", err, stderr.String(), daemon.log.String())
		return
	}
	var res struct {
		CreateFirst, E2B, E2BFetch, Native, AirlockSDK []float64
	}
	if err := json.Unmarshal(bytes.TrimSpace(out), &res); err != nil {
		logf("E2B SDK bench: %v: %q", err, out)
		return
	}
	fmt.Printf("E2B compatibility (the e2b JS SDK, node %s), %d samples:\n", nodeVersion(), len(res.E2B))
	fmt.Printf("%-48s %10s %10s %10s %s\n", "", "median", "p95", "min", "target")
	latencyRow("create -> first command, warm pool (E2B SDK)", res.CreateFirst, "p50 <= 20 ms")
	latencyRow("20-step workload, E2B SDK", res.E2B, "")
	latencyRow("20-step workload, E2B protocol (fetch)", res.E2BFetch, "")
	latencyRow("20-step workload, native /v1 (fetch)", res.Native, "")
	if len(res.AirlockSDK) > 0 {
		latencyRow("20-step workload, airlock TypeScript SDK", res.AirlockSDK, "")
	}
	// Each ratio twice: of the medians, and the median of the rounds' own
	// ratios (the three workloads of a round run back to back, so a load
	// that drifts during the run cancels out).
	ratio := func(name string, xs, base []float64, note string) {
		if len(xs) == 0 || len(xs) != len(base) {
			return
		}
		per := make([]float64, len(xs))
		for i := range xs {
			per[i] = xs[i] / base[i]
		}
		fmt.Printf("ratio %-32s median %.2f, per round %.2f   %s\n", name+":", median(sorted(xs))/median(sorted(base)), median(sorted(per)), note)
	}
	ratio("E2B protocol / native", res.E2BFetch, res.Native, "the layer's own overhead, target <= 1.2")
	ratio("E2B SDK / native", res.E2B, res.Native, "adds the E2B SDK's client-side work")
	ratio("E2B SDK / airlock TS SDK", res.E2B, res.AirlockSDK, "SDK against SDK")
}

func nodeVersion() string {
	out, err := exec.Command("node", "--version").Output()
	if err != nil {
		return "?"
	}
	return string(bytes.TrimSpace(out))
}
