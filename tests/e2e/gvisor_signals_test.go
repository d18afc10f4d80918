package e2e

import (
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/runtime/gvisor"
)

// TestGVisorSignals: the signals `airlock run` forwards reach the command
// of a gVisor sandbox through its init (which catches them before the
// command starts): a trapped one runs the command's handler (its exit code),
// an untrapped one ends the command with 128+N.
func TestGVisorSignals(t *testing.T) {
	need(t)
	if why := backends()[gvisor.Name]; why != "" {
		t.Skip(why)
	}
	cases := []struct {
		sig  syscall.Signal
		name string
		trap bool
		want int
	}{
		{syscall.SIGTERM, "TERM", true, 3},
		{syscall.SIGUSR1, "USR1", true, 3},
		{syscall.SIGHUP, "HUP", true, 3},
		{syscall.SIGTERM, "TERM", false, 128 + int(syscall.SIGTERM)},
		{syscall.SIGINT, "INT", false, 128 + int(syscall.SIGINT)},
	}
	for _, c := range cases {
		name := c.name
		if !c.trap {
			name += "-untrapped"
		}
		t.Run(name, func(t *testing.T) {
			script := "echo ready; sleep 60"
			if c.trap {
				script = `trap 'echo got-` + c.name + `; exit 3' ` + c.name + `; echo ready; sleep 60 & wait`
			}
			b := start(t, opts{}, "run", "--runtime", gvisor.Name, "--", "/bin/sh", "-c", script)
			b.stdout.waitFor(t, regexp.MustCompile(`^ready$`), 60*time.Second)
			if err := b.cmd.Process.Signal(c.sig); err != nil {
				t.Fatal(err)
			}
			if got := b.wait(t, 30*time.Second); got != c.want {
				t.Fatalf("exit %d after SIG%s, want %d\nstdout:\n%s\nstderr:\n%s", got, c.name, c.want, b.stdout, b.stderr)
			}
			if c.trap && !strings.Contains(b.stdout.String(), "got-"+c.name) {
				t.Fatalf("the command's handler did not run\nstdout:\n%s", b.stdout)
			}
		})
	}
}
