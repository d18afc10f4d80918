package agent

import (
	"runtime"
	"runtime/debug"
	"testing"
)

var releaseSink []byte

// TestIdleRelease checks when an idle agent collects and gives memory
// back: only after a request that allocates, and only once at least
// releaseMin was allocated since the last time.
func TestIdleRelease(t *testing.T) {
	// No collection but the ones release forces.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	numGC := func() uint32 {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.NumGC
	}
	r := &idleRelease{}
	releaseSink = make([]byte, 2*releaseMin)
	n := numGC()
	r.release()
	if got := numGC(); got != n {
		t.Fatalf("no request since the start: %d collections, want none", got-n)
	}

	// A request, and more than releaseMin allocated: one collection.
	r.worked.Store(true)
	r.release()
	if got := numGC(); got != n+1 {
		t.Fatalf("after a request and %d bytes allocated: %d collections, want 1", 2*releaseMin, got-n)
	}
	if r.worked.Load() {
		t.Fatal("the request is still counted after the release")
	}

	// Another request, but little allocated since: none.
	r.worked.Store(true)
	releaseSink = make([]byte, 4096)
	r.release()
	if got := numGC(); got != n+1 {
		t.Fatalf("after a request and 4 KiB allocated: %d collections, want 1", got-n)
	}

	// Enough allocated again: another.
	r.worked.Store(true)
	releaseSink = make([]byte, 2*releaseMin)
	r.release()
	if got := numGC(); got != n+2 {
		t.Fatalf("after a request and %d more bytes: %d collections, want 2", 2*releaseMin, got-n)
	}
	releaseSink = nil
}
