package oneproc

import (
	"runtime"
	"testing"
)

// TestLowerRestore checks that lower runs the program on one P, that
// Restore gives the CPUs back, and that a GOMAXPROCS the caller set is
// kept.
func TestLowerRestore(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(before); procs = 0 })
	runtime.GOMAXPROCS(3)

	t.Setenv("GOMAXPROCS", "")
	lower()
	if got := runtime.GOMAXPROCS(0); got != 1 {
		t.Fatalf("after lower: GOMAXPROCS %d, want 1", got)
	}
	Restore()
	if got := runtime.GOMAXPROCS(0); got != 3 {
		t.Fatalf("after Restore: GOMAXPROCS %d, want the 3 it started with", got)
	}

	procs = 0
	t.Setenv("GOMAXPROCS", "3")
	lower()
	if got := runtime.GOMAXPROCS(0); got != 3 {
		t.Fatalf("with GOMAXPROCS=3 in the environment: GOMAXPROCS %d after lower, want 3", got)
	}
	Restore()
	if got := runtime.GOMAXPROCS(0); got != 3 {
		t.Fatalf("with GOMAXPROCS=3 in the environment: GOMAXPROCS %d after Restore, want 3", got)
	}
}
