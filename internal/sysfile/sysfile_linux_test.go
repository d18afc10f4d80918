package sysfile

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// ReadFile, WriteFile, Write and Touch do what their os counterparts do,
// errors included; the control is os itself on the same files.
func TestLikeOS(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	big := bytes.Repeat([]byte("0123456789abcdef"), 1000) // past the first buffer
	if err := WriteFile(p, big, 0o640); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o640&^umask() {
		t.Fatalf("WriteFile made %v %v", fi.Mode(), err)
	}
	got, err := ReadFile(p)
	want, _ := os.ReadFile(p)
	if err != nil || !bytes.Equal(got, big) || !bytes.Equal(got, want) {
		t.Fatalf("ReadFile: %d bytes, %v", len(got), err)
	}
	// Truncates, as os.WriteFile does.
	if err := WriteFile(p, []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, _ := ReadFile(p); string(got) != "short" {
		t.Fatalf("after a shorter WriteFile: %q", got)
	}
	// Write does not create.
	missing := filepath.Join(dir, "missing")
	err = Write(missing, []byte("x"))
	var pe *fs.PathError
	if !errors.As(err, &pe) || pe.Op != "open" || pe.Path != missing || !errors.Is(err, fs.ErrNotExist) || !os.IsNotExist(err) {
		t.Fatalf("Write to a missing file: %#v", err)
	}
	if _, err := ReadFile(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("ReadFile of a missing file: %v", err)
	}
	if err := Touch(missing, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Write(missing, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(missing); string(got) != "x" {
		t.Fatalf("after Touch and Write: %q", got)
	}
	// A file of /proc reports no size: read to its end all the same.
	self, err := ReadFile("/proc/self/status")
	if err != nil || !bytes.Contains(self, []byte("\nPid:\t")) {
		t.Fatalf("/proc/self/status: %q %v", self, err)
	}
	if SelfStart() == "" || SelfStart() != ProcStart(os.Getpid()) {
		t.Fatalf("SelfStart %q, ProcStart %q", SelfStart(), ProcStart(os.Getpid()))
	}
	if _, err := strconv.Atoi(SelfStart()); err != nil {
		t.Fatalf("start time %q: %v", SelfStart(), err)
	}
	if ProcStart(-1) != "" || ProcStart(1<<30) != "" {
		t.Fatal("a start time for no process")
	}
}

func umask() fs.FileMode {
	p := filepath.Join(os.TempDir(), "sysfile-umask-probe")
	os.Remove(p)
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o777)
	if err != nil {
		return 0
	}
	f.Close()
	defer os.Remove(p)
	fi, _ := os.Stat(p)
	return 0o777 &^ fi.Mode().Perm()
}
