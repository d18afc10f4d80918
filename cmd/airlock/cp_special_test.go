package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-dev/airlock/client"
)

// airlock cp refuses to upload a FIFO or a device named alone (it used to
// send an empty archive and exit 0); a regular file goes on to the daemon
// (here one that is not there).
func TestCpRefusesSpecialSource(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := client.New("unix://"+filepath.Join(dir, "none.sock"), "")
	if err != nil {
		t.Fatal(err)
	}
	dst := cpArg{remote: true, id: "sb-0000000000000000", path: "/workspace/x"}
	for src, kind := range map[string]string{fifo: "is a named pipe (FIFO)", "/dev/null": "is a character device"} {
		if err := cpToSandbox(context.Background(), c, src, dst, nil); err == nil || !strings.Contains(err.Error(), kind) {
			t.Errorf("cp %s: %v, want %q", src, err, kind)
		}
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cpToSandbox(context.Background(), c, file, dst, nil); err == nil || strings.Contains(err.Error(), "only regular files") {
		t.Errorf("control, a regular file: %v, want the daemon's absence", err)
	}
}
