package main

import (
	"os"
	"reflect"
	"testing"
)

func TestParseLevels(t *testing.T) {
	got, err := parseLevels("1, 10,100,500")
	if err != nil || !reflect.DeepEqual(got, []int{1, 10, 100, 500}) {
		t.Fatalf("parseLevels: %v, %v", got, err)
	}
	for _, bad := range []string{"", "0", "-1", "10,5", "10,10", "1,x", "1,,2"} {
		if got, err := parseLevels(bad); err == nil {
			t.Errorf("parseLevels(%q) = %v, want an error", bad, got)
		}
	}
}

// TestSmapsByKind reads this test's own mappings: its program's text and
// anonymous memory (the Go heap) are resident, so both kinds have PSS.
func TestSmapsByKind(t *testing.T) {
	if _, err := os.Stat("/proc/self/smaps"); err != nil {
		t.Skipf("no /proc/self/smaps: %v", err)
	}
	kinds, ok := smapsByKind(os.Getpid())
	if !ok {
		t.Fatal("smapsByKind failed on this process")
	}
	for _, k := range []string{"binary text", "anonymous (heap, stacks, runtime)"} {
		if kinds[k] <= 0 {
			t.Errorf("%s: PSS %v KiB, want > 0 (all: %v)", k, kinds[k], kinds)
		}
	}
	if _, ok := smapsByKind(-1); ok {
		t.Error("smapsByKind(-1) succeeded")
	}
}
