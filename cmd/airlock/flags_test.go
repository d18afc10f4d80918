package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// A flag given no value takes the end-of-flags marker as its value: that
// is refused before the command does anything (`airlock run --net-log --
// CMD` wrote the network log to a file named "--"). The controls: the same
// commands with a value get past the check (to their own failure here).
func TestFlagTakesMarker(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	sock := "unix://" + filepath.Join(dir, "none.sock")
	for _, c := range []struct {
		args []string
		bad  string
	}{
		{[]string{"run", "--net-log", "--", "/bin/true"}, "--net-log needs a value"},
		{[]string{"run", "--ro", "--", "/bin/true"}, "--ro needs a value"},
		{[]string{"ls", "--host", "--"}, "--host needs a value"},
		{[]string{"ls", "--host", sock}, ""},
		{[]string{"run", "--net-log", "log.jsonl", "--memory", "1KiB", "--", "/bin/true"}, ""},
	} {
		root := newRootCmd()
		root.SetArgs(c.args)
		root.SetOut(io.Discard)
		root.SetErr(io.Discard)
		err := root.Execute()
		if err == nil {
			t.Errorf("airlock %v: no error", c.args)
			continue
		}
		if got := strings.Contains(err.Error(), "needs a value"); got != (c.bad != "") || c.bad != "" && !strings.Contains(err.Error(), c.bad) {
			t.Errorf("airlock %v: %v, want %q", c.args, err, c.bad)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "--")); err == nil {
		t.Error(`a file named "--" was created`)
	}
}

// TestRunRootAsFull: `airlock run` answers the same from the root that
// holds run alone (what main uses for it) as from the whole one: its
// help, its refusals of bad flags and arguments, and a run that fails.
func TestRunRootAsFull(t *testing.T) {
	t.Chdir(t.TempDir())
	for _, args := range [][]string{
		{"run", "--help"},
		{"run", "-h"},
		{"run"},
		{"run", "--no-such-flag", "--", "/bin/true"},
		{"run", "--net-log", "--", "/bin/true"},
		{"run", "--memory", "1KiB", "--", "/bin/true"},
		{"run", "--timeout", "soon", "--", "/bin/true"},
	} {
		var outs [2]string
		for i, mk := range []func() *cobra.Command{newRootCmd, newRunRootCmd} {
			var b strings.Builder
			root := mk()
			root.SetArgs(args)
			root.SetOut(&b)
			root.SetErr(&b)
			err := root.Execute()
			fmt.Fprintf(&b, "\nerror: %v", err)
			outs[i] = b.String()
		}
		if outs[0] != outs[1] {
			t.Errorf("airlock %v:\nthe whole root:\n%s\nrun alone:\n%s", args, outs[0], outs[1])
		}
		if !strings.Contains(outs[0], "Usage:") && !strings.Contains(outs[0], "error: ") {
			t.Errorf("airlock %v: %s", args, outs[0])
		}
	}
}

// TestVersion: `airlock --version` names the source, the Go release and
// the platform, and exits 0; `airlock run --version` is not it (run has no
// such flag).
func TestVersion(t *testing.T) {
	root := newRootCmd()
	var b strings.Builder
	root.SetArgs([]string{"--version"})
	root.SetOut(&b)
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !strings.HasPrefix(out, "airlock version ") || !strings.Contains(out, runtime.Version()) || !strings.Contains(out, runtime.GOOS+"/"+runtime.GOARCH) {
		t.Errorf("airlock --version printed %q", out)
	}
	root = newRunRootCmd()
	root.SetArgs([]string{"run", "--version"})
	root.SetOut(io.Discard)
	root.SetErr(io.Discard)
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "unknown flag: --version") {
		t.Errorf("airlock run --version: %v", err)
	}
}
