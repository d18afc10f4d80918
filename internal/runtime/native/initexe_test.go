//go:build linux

package native

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"
	"unsafe"
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
	if err := copyFromExe(f, bin); err != nil {
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
	if err := copyFromExe(f, heap); err == nil {
		t.Fatal("heap bytes were 'copied from the executable'")
	}
}
