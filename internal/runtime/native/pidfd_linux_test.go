package native

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func threads(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	t.Fatal("no Threads line")
	return 0
}

// TestPidfdExitedHoldsNoThread: goroutines waiting for processes to exit
// with pidfdExited park without an OS thread each, and each returns once
// its process is gone. The control: the same number of goroutines in a
// blocking wait4 add a thread each (what every sandbox of a daemon cost
// before).
func TestPidfdExitedHoldsNoThread(t *testing.T) {
	const n = 16
	wait := func(blocking bool) (grew int) {
		var cmds []*exec.Cmd
		var fds []int
		for i := 0; i < n; i++ {
			fd := -1
			c := exec.Command("sleep", "60")
			c.SysProcAttr = &syscall.SysProcAttr{PidFD: &fd}
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			cmds, fds = append(cmds, c), append(fds, fd)
		}
		before := threads(t)
		var wg sync.WaitGroup
		done := make(chan int, n)
		for i := range cmds {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if blocking {
					var ws unix.WaitStatus
					unix.Wait4(cmds[i].Process.Pid, &ws, 0, nil)
				} else if err := pidfdExited(fds[i]); err != nil {
					t.Errorf("pidfdExited: %v", err)
				}
				done <- i
			}()
		}
		// Every waiter is parked once no thread count changes for a while
		// (bounded: 2 s).
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
			grew = threads(t) - before
			if blocking && grew >= n {
				break
			}
		}
		select {
		case i := <-done:
			t.Fatalf("a wait returned while process %d still ran", i)
		default:
		}
		for i, c := range cmds {
			c.Process.Kill()
			if !blocking {
				c.Wait()
			}
			unix.Close(fds[i])
		}
		wg.Wait()
		if len(done) != n {
			t.Fatalf("%d of %d waits returned after the kills", len(done), n)
		}
		return grew
	}
	if grew := wait(false); grew >= n/2 {
		t.Errorf("%d goroutines in pidfdExited added %d threads, want (almost) none", n, grew)
	}
	if grew := wait(true); grew < n/2 {
		t.Errorf("control: %d goroutines in a blocking wait4 added only %d threads", n, grew)
	}
}
