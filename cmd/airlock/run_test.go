package main

import (
	"os"
	"strings"
	"testing"
)

// An empty path in --ro, --rw or --bind is refused: filepath.Abs would
// make it the current directory, bound into the sandbox. The same flags
// with a path are accepted (the control).
func TestBuildPolicyEmptyPaths(t *testing.T) {
	for name, f := range map[string]runFlags{
		"--ro ''":         {ro: []string{""}},
		"--rw ''":         {rw: []string{""}},
		"--bind :/x":      {binds: []string{":/x"}},
		"--bind :/x:rw":   {binds: []string{":/x:rw"}},
		"--bind /tmp::rw": {binds: []string{"/tmp::rw"}},
	} {
		if _, err := buildPolicy(&f); err == nil || !strings.Contains(err.Error(), "empty path") {
			t.Errorf("%s: %v, want an empty path error", name, err)
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	p, err := buildPolicy(&runFlags{ro: []string{"."}, rw: []string{"/tmp"}, binds: []string{".:/x:rw"}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Filesystem.ReadOnly[0] != wd || p.Filesystem.Writable[0] != "/tmp" || p.Filesystem.Binds[0].Source != wd || !p.Filesystem.Binds[0].Writable {
		t.Errorf("paths given: %+v", p.Filesystem)
	}
}
