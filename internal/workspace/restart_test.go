package workspace

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A volatile run whose machine restarted is not applied unless asked; one
// of this boot is, and so is a run that was not volatile.
func TestApplyAfterRestart(t *testing.T) {
	_, ws := newRun(t, "")
	r := create(t, "00000000000000f1", ws)
	if err := r.SetVolatile(); err != nil {
		t.Fatal(err)
	}
	if r.BootID == "" || r.Restarted() {
		t.Fatalf("a run of this boot: boot id %q, restarted %v", r.BootID, r.Restarted())
	}
	r.BootID = "00000000-0000-0000-0000-000000000000" // another boot's
	if err := r.save(); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(r.Upper(), "a.txt"), "a\n")
	r.Close()
	r, err := Open(r.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if !r.Restarted() {
		t.Fatal("a run of another boot is not Restarted")
	}
	if _, err := r.Apply(); err == nil || !strings.Contains(err.Error(), "--after-restart") {
		t.Fatalf("apply after a restart: %v", err)
	}
	if _, err := os.Stat(filepath.Join(ws, "a.txt")); err == nil {
		t.Fatal("a.txt applied after a restart")
	}
	r.AfterRestart = true
	if rep, err := r.Apply(); err != nil || len(rep.Applied) != 1 {
		t.Fatalf("apply with AfterRestart: %+v, %v", rep, err)
	}
	if got := read(t, filepath.Join(ws, "a.txt")); got != "a\n" {
		t.Errorf("a.txt = %q", got)
	}

	// Controls: a volatile run of this boot, and a run that is not
	// volatile, apply as they are.
	for i, volatile := range []bool{true, false} {
		r := create(t, []string{"00000000000000f2", "00000000000000f3"}[i], ws)
		if volatile {
			if err := r.SetVolatile(); err != nil {
				t.Fatal(err)
			}
		}
		write(t, filepath.Join(r.Upper(), "b.txt"), r.ID+"\n")
		if rep, err := r.Apply(); err != nil || len(rep.Applied) != 1 {
			t.Errorf("volatile %v: %+v, %v", volatile, rep, err)
		}
	}
}
