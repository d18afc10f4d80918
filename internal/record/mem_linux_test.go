package record

import (
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

// memReader on this process's own memory: an argv whose strings and
// pointers cross pages, an empty argv, a string past the limit.
func TestMemReader(t *testing.T) {
	f, err := os.Open("/proc/self/mem")
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	want := []string{"a", "", strings.Repeat("x", 5000), "last one"}
	bufs := make([][]byte, len(want))
	ptrs := make([]uint64, len(want)+1)
	for i, s := range want {
		bufs[i] = append([]byte(s), 0)
		ptrs[i] = uint64(uintptr(unsafe.Pointer(&bufs[i][0])))
	}
	m := &memReader{f: f, pages: map[uint64][]byte{}}
	got, trunc := m.readArgv(uint64(uintptr(unsafe.Pointer(&ptrs[0]))))
	if trunc || !slices.Equal(got, want) {
		t.Errorf("argv: truncated %v, %d strings, lens %v", trunc, len(got), lens(got))
	}
	if got, trunc := m.readArgv(0); trunc || len(got) != 0 {
		t.Errorf("NULL argv: %q %v", got, trunc)
	}
	s, trunc, _ := m.readString(ptrs[2], 100)
	if !trunc || s != strings.Repeat("x", 100) {
		t.Errorf("limit: %d bytes, truncated %v", len(s), trunc)
	}
	if _, _, err := m.readString(8, 10); err == nil {
		t.Error("an unmapped address read without error")
	}
	runtime.KeepAlive(bufs)
	runtime.KeepAlive(ptrs)
}

func lens(ss []string) []int {
	var out []int
	for _, s := range ss {
		out = append(out, len(s))
	}
	return out
}
