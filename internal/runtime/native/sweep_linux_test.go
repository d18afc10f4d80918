//go:build linux

package native

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A process sweeps a state root at most once per sweepEvery: the state a
// dead supervisor left just after a sweep stays until the next one is due,
// and that one removes it (the control).
func TestSweepAtMostEverySecond(t *testing.T) {
	root := t.TempDir()
	dead := func(id string) string {
		t.Helper()
		dir := filepath.Join(root, id)
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		// PID 1 never started at that time: its supervisor is gone.
		b, _ := json.Marshal(&stateFile{Owner: 1, OwnerStart: "not-a-start-time"})
		if err := os.WriteFile(filepath.Join(dir, "state.json"), b, 0o600); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	gone := func(dir string) bool {
		_, err := os.Stat(dir)
		return os.IsNotExist(err)
	}
	a := dead("0e2edeadbeef0001")
	sweep(root, nil)
	if !gone(a) {
		t.Fatalf("the first sweep left %s", a)
	}
	b := dead("0e2edeadbeef0002")
	sweep(root, nil)
	if gone(b) {
		t.Fatalf("a second sweep within %v ran: %s is gone", sweepEvery, b)
	}
	sweepMu.Lock()
	lastSweep[root] = time.Now().Add(-sweepEvery)
	sweepMu.Unlock()
	sweep(root, nil)
	if !gone(b) {
		t.Fatalf("the sweep that was due left %s", b)
	}
}
