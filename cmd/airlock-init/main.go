// The runtime names its memory mappings with one prctl each (Go 1.25's
// decoratemappings): inside gVisor every one is a round trip to the
// Sentry on the sandbox's start path, and nobody reads those names here.
//go:debug decoratemappings=0

// Command airlock-init is the program a sandbox's PID 1 runs: the sandbox's
// init and agent, and the reaper that cleans up after a killed supervisor.
// It links only the sandbox code (internal/runtime/native and the agent), so
// starting it costs a fraction of the airlock binary, whose daemon
// dependencies (SQLite, metrics, HTTP) would otherwise initialise inside every
// sandbox. `make build` compiles it first and embeds it into airlock
// (internal/initbin); it is never installed on its own.
package main

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/initbin"
	"github.com/airlock-dev/airlock/internal/runtime/gvisor"
	"github.com/airlock-dev/airlock/internal/runtime/native"
)

func main() {
	// Like airlock's own main: nothing inherited reaches a sandbox. fd 3 of
	// the init and of the reaper is theirs; they handle it.
	unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	// Run from a memfd, the process and the runtime's threads would be
	// named after its descriptor ("11") in ps and top.
	unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&[]byte("airlock-init\x00")[0])), 0, 0, 0)
	// The runtime's other threads too, where the host's ps sees them; in
	// a gVisor sandbox only its own ps would, and each of those writes is
	// a round trip through the Sentry's /proc on the command's start path.
	gvisorMode := len(os.Args) > 1 && (os.Args[1] == gvisor.InitArg || os.Args[1] == gvisor.ExecArg || os.Args[1] == gvisor.RelayArg)
	if !gvisorMode {
		if tasks, err := os.ReadDir("/proc/self/task"); err == nil {
			for _, t := range tasks {
				os.WriteFile("/proc/self/task/"+t.Name()+"/comm", []byte("airlock-init"), 0)
			}
		}
	}
	if got := os.Getenv(initbin.BuildEnv); got != initbin.BuildID {
		// Started by an airlock built with another init: their protocol
		// may differ. Refuse rather than guess.
		fmt.Fprintf(os.Stderr, "airlock-init: built as %q, started by airlock %q: rebuild both with 'make build'\n", initbin.BuildID, got)
		os.Exit(120)
	}
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case native.InitArg:
			native.InitMain()
			return
		case native.ResumeArg:
			native.ResumeMain()
			return
		case native.ReapArg:
			native.ReapMain()
			return
		case gvisor.InitArg:
			gvisor.InitMain()
			return
		case gvisor.ExecArg:
			gvisor.ExecMain()
			return
		case gvisor.RelayArg:
			gvisor.RelayMain()
			return
		}
	}
	fmt.Fprintln(os.Stderr, "airlock-init: an internal program of airlock, started by airlock itself")
	os.Exit(2)
}
