package progfile

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// rodata is a constant of this test binary, mapped from its file.
const rodata = "airlock initexe test: bytes that live in the executable's read-only data" +
	" and are copied from its file, not from memory"

func TestCopyFromExe(t *testing.T) {
	bin := unsafe.Slice(unsafe.StringData(rodata), len(rodata))
	f, err := os.CreateTemp(t.TempDir(), "copy")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := CopyFromExe(f, bin); err != nil {
		t.Fatalf("copyFromExe: %v", err)
	}
	got, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, bin) {
		t.Fatalf("copied %q, want %q", got, bin)
	}
	// The control: bytes on the heap are in no file mapping, and are refused
	// rather than copied from the wrong place.
	heap := []byte(strings.Repeat("x", 64))
	if err := CopyFromExe(f, heap); err == nil {
		t.Fatal("heap bytes were 'copied from the executable'")
	}
}

// TestMemfd: the program in a memfd is the bytes given, and sealed: a write
// or a resize fails, where the same write to an unsealed memfd succeeds.
func TestMemfd(t *testing.T) {
	bin := unsafe.Slice(unsafe.StringData(rodata), len(rodata))
	f, err := Memfd("progfile-test", bin)
	if err != nil {
		t.Skipf("no executable memfd on this host: %v", err)
	}
	defer f.Close()
	got, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<20))
	if err != nil || !bytes.Equal(got, bin) {
		t.Fatalf("the memfd holds %q (%v), want %q", got, err, bin)
	}
	if _, err := f.WriteAt([]byte("X"), 0); err == nil {
		t.Error("a write into the sealed program succeeded")
	}
	if err := f.Truncate(1); err == nil {
		t.Error("the sealed program was shrunk")
	}
	// The control: an unsealed memfd takes the same write.
	fd, err := unix.MemfdCreate("progfile-control", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	c := os.NewFile(uintptr(fd), "control")
	defer c.Close()
	if _, err := c.WriteAt([]byte("X"), 0); err != nil {
		t.Errorf("the control write failed: %v", err)
	}
}
