//go:build linux

package e2e

import (
	"bufio"
	"context"
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestTTYResizeAndInterrupt drives an interactive run the way a person at
// a terminal does: a window resize reaches the command (SIGWINCH and the
// new size), and Ctrl-C typed at the terminal interrupts it.
func TestTTYResizeAndInterrupt(t *testing.T) {
	need(t)
	master, slave := openPTY(t)
	defer master.Close()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	script := `import os,signal,time
signal.signal(signal.SIGWINCH, lambda *a: print("winch", "%dx%d" % tuple(os.get_terminal_size()), flush=True))
print("ready", flush=True)
time.sleep(30)
print("not interrupted", flush=True)`
	cmd := startOnPTY(t, ctx, slave, "run", "--", "/usr/bin/python3", "-c", script)
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(master)
		for sc.Scan() {
			lines <- strings.TrimSpace(sc.Text())
		}
		close(lines)
	}()
	var seen []string
	waitLine := func(prefix string) string {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("terminal closed before %q; saw %q", prefix, seen)
				}
				seen = append(seen, l)
				if strings.HasPrefix(l, prefix) {
					return l
				}
			case <-deadline:
				t.Fatalf("no %q line within 20s; saw %q", prefix, seen)
			}
		}
	}
	waitLine("ready")
	// Resize the terminal; the kernel tells the foreground process
	// (airlock) with SIGWINCH, as a terminal emulator would.
	unix.IoctlSetWinsize(int(master.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 50, Col: 132})
	cmd.Process.Signal(syscall.SIGWINCH)
	if got := waitLine("winch"); got != "winch 132x50" {
		t.Errorf("after resize the command saw %q, want winch 132x50", got)
	}
	master.Write([]byte{3}) // Ctrl-C
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Fatalf("after Ctrl-C: %v, want exit 130 (SIGINT)", err)
	}
}
