//go:build linux && amd64

package main

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// holdArg selects the hold mode: the sleeping agent of an idle service
// sandbox (internal/runtime/native, Sandbox.Sleep). The agent, a Go program
// of about 1 MiB of memory, executes this program in its place as PID 1
// once the sandbox has nothing running; it waits, in one thread and a few
// pages, until its supervisor writes to the control channel (or connects
// anew), then executes the agent again, which carries on from there.
//
// argv: airlock-hold __hold AGENT WATCH... -- AGENTARGV...
//
// AGENT is the descriptor of the agent's program, executed with
// AGENTARGV and this program's environment once any WATCH descriptor is
// readable, hung up or in error. The descriptors stay as they are across
// both executions (the caller cleared their close-on-exec flags). Nothing
// else: no signal is handled (PID 1 of a namespace gets none it does not
// handle), no child is waited for (the agent sleeps only with none).
const holdArg = "__hold"

// maxWatch bounds the WATCH descriptors.
const maxWatch = 8

var pollFDs [maxWatch]unix.PollFd

//go:nosplit
func hold(argc uintptr, args, env unsafe.Pointer) {
	// execve made this process dumpable again; nothing else runs in the
	// sandbox now (the agent sleeps only alone), so nothing could attach
	// before this.
	if _, e := sys(unix.SYS_PRCTL, unix.PR_SET_DUMPABLE, 0, 0, 0, 0, 0); e != 0 {
		holdFail("prctl(PR_SET_DUMPABLE, 0): ", e)
	}
	if argc < 5 {
		holdFail("usage: airlock-hold __hold AGENT WATCH... -- AGENTARGV...", 0)
	}
	a := ptr(args, 2)
	agent, ok := parseUint(a, 0, cstrlen(a), 1<<20)
	if !ok {
		holdFail("bad AGENT descriptor", 0)
	}
	n := uintptr(0)
	i := uintptr(3)
	for ; i < argc && !equal(ptr(args, i), "--"); i++ {
		a := ptr(args, i)
		fd, ok := parseUint(a, 0, cstrlen(a), 1<<20)
		if !ok || n == maxWatch {
			holdFail("bad or too many WATCH descriptors", 0)
		}
		pollFDs[n%maxWatch] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
		n++
	}
	if n == 0 || i+1 >= argc {
		holdFail("no WATCH descriptor, or no AGENTARGV after --", 0)
	}
	for {
		r, e := sys(unix.SYS_POLL, uintptr(unsafe.Pointer(&pollFDs[0])), n, ^uintptr(0), 0, 0, 0)
		if e == uintptr(unix.EINTR) || (e == 0 && r == 0) {
			continue
		}
		if e != 0 {
			holdFail("poll: ", e)
		}
		break
	}
	empty := [1]byte{}
	_, e := sys(unix.SYS_EXECVEAT, agent, uintptr(unsafe.Pointer(&empty[0])), uintptr(unsafe.Add(args, 8*(i+1))), uintptr(env), unix.AT_EMPTY_PATH, 0)
	holdFail("execute the agent: ", e)
}

// holdFail writes "airlock-hold: what[errno]" on stderr and exits 122: the
// sandbox ends with its PID 1, as when its agent dies.
//
//go:nosplit
func holdFail(what string, e uintptr) {
	put("airlock-hold: ")
	put(what)
	if e != 0 {
		putErrno(e)
	}
	put("\n")
	writeMsg(2)
	exit(122)
}
