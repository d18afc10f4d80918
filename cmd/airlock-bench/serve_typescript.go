package main

// The TypeScript SDK's rows of `airlock-bench serve`: the exec round trip
// and a loop of 100 create+exec+destroy, through the built SDK
// (sdk/typescript/dist, made by `npm ci` there) driven by its
// scripts/bench.mjs, side by side with the same loops through the Go SDK
// on the same daemon.

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
)

// tsCycles is the length of the create+exec+destroy loop.
const tsCycles = 100

// addTypeScriptFlag registers -ts-sdk, the SDK's package directory.
func addTypeScriptFlag(fs *flag.FlagSet) *string {
	return fs.String("ts-sdk", "sdk/typescript", "the TypeScript SDK's package directory, built (npm ci), for the TypeScript rows; \"\" skips them")
}

// typescriptRows prints the TypeScript rows next to the Go SDK's.
func typescriptRows(c *client.Client, sock, dir string, n int) {
	if dir == "" {
		return
	}
	fmt.Println()
	script, err := filepath.Abs(filepath.Join(dir, "scripts", "bench.mjs"))
	if err == nil {
		_, err = os.Stat(filepath.Join(dir, "dist", "index.js"))
	}
	node, nerr := exec.LookPath("node")
	switch {
	case nerr != nil:
		fmt.Println("TypeScript SDK rows: skipped: node is not in PATH")
		return
	case err != nil:
		fmt.Printf("TypeScript SDK rows: skipped: the SDK in %s is not built (run `npm ci` there): %v\n", dir, err)
		return
	}
	ts := func(mode, arg string, count int) ([]float64, error) {
		out, err := exec.Command(node, script, "unix://"+sock, mode, arg, fmt.Sprint(count)).Output()
		if err != nil {
			if ee, ok := err.(*exec.ExitError); ok {
				return nil, fmt.Errorf("%v: %s", err, ee.Stderr)
			}
			return nil, err
		}
		var xs []float64
		return xs, json.Unmarshal(out, &xs)
	}
	ctx := context.Background()
	fail := func(what string, err error) { fmt.Printf("TypeScript SDK rows: %s: %v\n", what, err) }

	// Exec round trip: the Go SDK's and the TypeScript SDK's samples,
	// in alternating blocks, on one sandbox.
	sb, err := c.CreateSandbox(ctx, &api.CreateSandboxRequest{PolicyName: "cold"})
	if err != nil {
		fail("create", err)
		return
	}
	defer c.DeleteSandbox(ctx, sb.ID)
	var goRTT, tsRTT []float64
	for round := 0; round < 2; round++ {
		for i := -5; i < n*5/2; i++ {
			t0 := time.Now()
			if _, err := c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"true"}}); err != nil {
				fail("exec (Go)", err)
				return
			}
			if i >= 0 {
				goRTT = append(goRTT, float64(time.Since(t0).Microseconds())/1000)
			}
		}
		xs, err := ts("exec", sb.ID, n*5/2)
		if err != nil {
			fail("exec (TypeScript)", err)
			return
		}
		tsRTT = append(tsRTT, xs...)
	}
	// 100 create+exec+destroy in a row for each SDK, in alternating
	// blocks of 25 so that both see the same load.
	var goCycle, tsCycle []float64
	const block = 25
	for b := 0; b < tsCycles/block; b++ {
		for i := -1; i < block; i++ {
			t0 := time.Now()
			s, err := c.CreateSandbox(ctx, &api.CreateSandboxRequest{PolicyName: "cold"})
			if err == nil {
				_, err = c.Exec(ctx, s.ID, &api.ExecRequest{Argv: []string{"true"}})
				if derr := c.DeleteSandbox(ctx, s.ID); err == nil {
					err = derr
				}
			}
			if err != nil {
				fail("create+exec+destroy (Go)", err)
				return
			}
			if i >= 0 {
				goCycle = append(goCycle, float64(time.Since(t0).Microseconds())/1000)
			}
		}
		xs, err := ts("cycle", "cold", block)
		if err != nil {
			fail("create+exec+destroy (TypeScript)", err)
			return
		}
		tsCycle = append(tsCycle, xs...)
	}
	fmt.Printf("%-48s %10s %10s %8s %s\n", "SDKs on the same daemon (median)", "Go SDK", "TypeScript", "ratio", "target")
	row := func(name string, g, t []float64) {
		gm, tm := median(sorted(g)), median(sorted(t))
		fmt.Printf("%-48s %10s %10s %7.2fx %s\n", name, ms(gm), ms(tm), tm/gm, "<= 1.3x")
	}
	row("exec round trip of true", goRTT, tsRTT)
	row(fmt.Sprintf("%d create+exec+destroy in a row, per cycle", tsCycles), goCycle, tsCycle)
}
