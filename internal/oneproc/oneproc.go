// Package oneproc runs `airlock run` on one P from the start of its
// program's initialisation.
//
// The process of `airlock run` supervises: it waits for the sandbox's init,
// for signals and for the end of copies, and seldom has two things to do at
// once. With a second P the Go runtime wakes and parks threads to look for
// work for it at each of those waits, and at exit it has a second cache of
// spans to give back. Importing this package lowers GOMAXPROCS to one in
// its initialiser, before most packages' initialisers start goroutines,
// when the program's first argument is "run" and the caller did not set
// GOMAXPROCS. Restore gives the CPUs back where a run has parallel work
// (the egress gateway). Measured on a 2-CPU machine, 200 alternating
// runs of `airlock run -- /bin/true` each: 1.7 ms less CPU (of 28 ms) and
// 0.6 ms less wall time; lowered in main instead, 0.9 ms less CPU, since
// the second P had by then been started and filled a cache of its own.
package oneproc

import (
	"os"
	"runtime"
)

// procs is the GOMAXPROCS the program started with, when init lowered it;
// 0 otherwise.
var procs int

func init() {
	if len(os.Args) > 1 && os.Args[1] == "run" {
		lower()
	}
}

// lower sets GOMAXPROCS to one unless the environment sets it.
func lower() {
	if os.Getenv("GOMAXPROCS") == "" {
		procs = runtime.GOMAXPROCS(1)
	}
}

// Restore gives back the GOMAXPROCS the program started with, if init
// lowered it.
func Restore() {
	if procs > 0 {
		runtime.GOMAXPROCS(procs)
	}
}
