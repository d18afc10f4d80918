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
	// Signals from inside the sandbox to its init that airlock does not
	// forward are ignored there, as Linux ignores them for a PID 1 without
	// a handler: SIGTSTP stopped the init (the run hung) and SIGALRM was
	// passed on to the command. The same signals to the command itself
	// (the control) still act.
	t.Run("to-init-from-inside", func(t *testing.T) {
		for _, c := range []struct {
			target string
			want   int
		}{{"1", 7}, {"$$", 128 + int(syscall.SIGALRM)}} {
			script := "kill -TSTP " + c.target + " 2>/dev/null; kill -ALRM " + c.target + "; sleep 0.2; exit 7"
			if c.target == "$$" {
				// TSTP would stop the command for good: the control sends
				// ALRM alone.
				script = "kill -ALRM $$; sleep 5; exit 7"
			}
			b := start(t, opts{}, "run", "--runtime", gvisor.Name, "--", "/bin/sh", "-c", script)
			if got := b.wait(t, 60*time.Second); got != c.want {
				t.Fatalf("kill to %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", c.target, got, c.want, b.stdout, b.stderr)
			}
		}
	})
}
