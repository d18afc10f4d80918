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
	// The handler does nothing; the main loop prints. A handler that
	// printed could run inside the main loop's print ("reentrant call
	// inside BufferedWriter"). The signal is seen through the wakeup fd,
	// which the interpreter writes from the signal itself: a handler is
	// run between bytecodes, and one for a signal that arrives just before
	// select would wait until select timed out.
	script := `import os,select,signal,time
r, w = os.pipe()
os.set_blocking(w, False)
signal.set_wakeup_fd(w)
signal.signal(signal.SIGWINCH, lambda *a: None)
print("ready", flush=True)
end = time.monotonic() + 30
while time.monotonic() < end:
    if select.select([r], [], [], max(0, end - time.monotonic()))[0] and signal.SIGWINCH in os.read(r, 64):
        print("winch", "%dx%d" % tuple(os.get_terminal_size()), flush=True)
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
