// Command airlock-pid1 is the PID 1 of a one-shot gVisor sandbox (`airlock
// run --runtime gvisor`): it does what
// airlock-init's one-shot mode does (gvisor.ExecMain with --init) without
// starting the Go runtime. Inside gVisor every system call is a trip
// through the Sentry, and the runtime's start (about 200 of them: threads,
// signal handlers, memory) cost 15-19 ms of each one-shot sandbox; this
// program makes about 15, and its child 5 before the exec.
//
// It is built with its own entry point (go build -ldflags=-E=main.start, see
// the Makefile and internal/buildtest): a few lines of assembly point the
// thread's FS base at a zeroed block and call run, ordinary Go marked
// nosplit that never allocates, never grows its stack and never calls into
// the runtime (no maps, no append, no bounds checks that could fail, no
// panics). TestNoRuntimeCalls reads the built binary and fails if any code
// reachable from the entry lies outside this package.
//
// What it does, in order: refuse an init of another build (exit 120, like
// airlock-init); read the command (AIRLOCK_GVISOR_ARGV: base64 of each
// argument followed by a NUL) and the policy's seccomp program
// (AIRLOCK_GVISOR_SECCOMP: base64 of struct sock_filter), and drop both and
// the build id from the command's environment; find the command in PATH as
// the agent does; block every signal and read the ones the supervisor
// forwards, and SIGCHLD, from a signalfd; with egress forwards
// (--forward=ADDR=SOCKET), listen on each ADDR and start the relay
// (--relay, airlock-init) with the listening sockets; vfork the command into
// a session of its own (with a terminal: a process group in its foreground)
// under the filter; write "ok\n" on the status pipe (fd 3) once
// the command has started, or "CODE message\n" (127 not found, 126 not
// executable) and exit with CODE; pass each forwarded signal to the
// command's process group; reap orphans; exit with the command's status
// (128+N for signal N). The messages and codes are airlock-init's
// (TestStart compares them).
//
// With __hold as its first argument it is instead the sleeper of an idle
// service sandbox's agent (hold_amd64.go).
//
// Only linux/amd64 has the entry; elsewhere `make build` embeds an empty
// file and the gVisor runtime starts airlock-init instead.
package main

// main runs only when the program was built without its entry point.
func main() {
	panic("airlock-pid1: built without its entry point (go build -ldflags=-E=main.start; see the Makefile)")
}
