//go:build !airlock_lean

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/runtime/gvisor"
	"github.com/airlock-dev/airlock/internal/sandbox"
)

// gvisorCheck reports whether the gvisor runtime is usable here: runsc
// found, its version, and a sandbox made with it that runs `true`. It is
// optional: the native runtime does not need it.
func gvisorCheck() check {
	c := check{Name: "runtime gvisor (runsc)"}
	runsc, err := gvisor.Find()
	if err != nil {
		c.Detail = err.Error()
		return c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, runsc, "--version").Output()
	if err != nil {
		c.Detail = fmt.Sprintf("%s --version: %v; reinstall with %s", runsc, err, gvisor.InstallCommand)
		return c
	}
	version := strings.SplitN(strings.TrimSpace(string(out)), "\n", 2)[0]
	if strings.Contains(version, "VERSION_MISSING") {
		version = "built from its Go module"
	}
	if os.Geteuid() != 0 {
		c.Detail = runsc + " (" + version + "); not tried: the gvisor runtime needs root"
		return c
	}
	p := &policy.Policy{Runtime: policy.RuntimeGVisor}
	spec, err := sandbox.Spec(p, sandbox.Opts{})
	if err != nil {
		c.Detail = err.Error()
		return c
	}
	sb, err := (&gvisor.Runtime{Runsc: runsc}).Create(ctx, spec)
	if err != nil {
		c.Detail = fmt.Sprintf("%s (%s): cannot create a sandbox: %v", runsc, version, err)
		return c
	}
	defer sb.Destroy(ctx)
	null, _ := os.Open(os.DevNull)
	defer null.Close()
	proc, err := sb.Exec(ctx, &runtime.ExecRequest{Argv: []string{"true"}, Env: []string{"PATH=/usr/bin:/bin"}, Dir: "/workspace", Stdin: null, Stdout: null, Stderr: null})
	if err == nil {
		var st runtime.ExitStatus
		if st, err = proc.Wait(ctx); err == nil && st.ShellCode() != 0 {
			err = fmt.Errorf("exit %d", st.ShellCode())
		}
	}
	if err != nil {
		c.Detail = fmt.Sprintf("%s (%s): `true` in a sandbox: %v", runsc, version, err)
		return c
	}
	c.OK = true
	c.Detail = fmt.Sprintf("%s, %s, platform systrap (pinned %s)", runsc, version, gvisor.Version)
	return c
}
