package spawn

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func needRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (a user namespace mapping a range of host ids)")
	}
	if _, err := os.Stat("/proc/self/ns/user"); err != nil {
		t.Skip("user namespaces are not available")
	}
}

// report is what the child prints about itself: ids inside and their
// maps, the session, the signal mask and ignored signals, the
// parent-death signal's effect aside (it cannot be read back), and its
// descriptors 0-3.
const report = `id -u; id -g; cat /proc/self/uid_map /proc/self/gid_map /proc/self/setgroups
read -r self < /proc/self/stat; set -- $self; [ "$1" = "$6" ] && echo session-leader
grep -E '^(SigBlk|SigIgn|CapEff|NoNewPrivs)' /proc/self/status
for n in 0 1 2 3; do [ -e /proc/self/fd/$n ] && echo "fd $n open"; done
readlink /proc/self/ns/user /proc/self/ns/net /proc/self/ns/pid | sed 's/[0-9]//g'
[ "$(readlink /proc/self/ns/net)" != "$HOST_NET" ] && echo "own network namespace"
echo "$AIRLOCK_SPAWN_TEST"`

// run starts the report through fork (spawn.ForkExec or
// syscall.ForkExec) and returns its output, with the pid and pidfd checked.
func run(t *testing.T, fork func(string, []string, *syscall.ProcAttr) (int, error), setgroups bool) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	hostNet, _ := os.Readlink("/proc/self/ns/net")
	pidfd := -1
	attr := &syscall.ProcAttr{
		Env:   []string{"PATH=/usr/bin:/bin", "AIRLOCK_SPAWN_TEST=env passed", "HOST_NET=" + hostNet},
		Files: []uintptr{null.Fd(), w.Fd(), w.Fd(), null.Fd()},
		Sys: &syscall.SysProcAttr{
			Cloneflags: unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWNET |
				unix.CLONE_NEWIPC | unix.CLONE_NEWUTS,
			UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: 1<<31 - 1<<20, Size: 65536}},
			GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: 1<<31 - 1<<20, Size: 65536}},
			GidMappingsEnableSetgroups: setgroups,
			Credential:                 &syscall.Credential{Uid: 0, Gid: 0},
			Setsid:                     true,
			Pdeathsig:                  unix.SIGKILL,
			PidFD:                      &pidfd,
		},
	}
	runtime.LockOSThread() // Pdeathsig follows the forking thread
	defer runtime.UnlockOSThread()
	pid, err := fork("/bin/sh", []string{"sh", "-c", report}, attr)
	w.Close()
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	if pidfd < 0 {
		t.Fatal("no pidfd")
	}
	defer unix.Close(pidfd)
	if err := unix.PidfdSendSignal(pidfd, 0, nil, 0); err != nil {
		t.Fatalf("signal 0 through the pidfd: %v", err)
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	var ws unix.WaitStatus
	if _, err := unix.Wait4(pid, &ws, 0, nil); err != nil || ws.ExitStatus() != 0 {
		t.Fatalf("child: %v, status %v, output:\n%s", err, ws, out)
	}
	return string(out)
}

// The child spawn.ForkExec starts is the one syscall.ForkExec starts for
// the same attributes (the control): the same ids and maps, setgroups,
// session, signal mask, capabilities, descriptors, namespaces and
// environment.
func TestForkExecLikeSyscall(t *testing.T) {
	needRoot(t)
	for _, setgroups := range []bool{true, false} {
		want := run(t, syscall.ForkExec, setgroups)
		got := run(t, ForkExec, setgroups)
		if !Used() {
			t.Fatal("spawn.ForkExec fell back to syscall.ForkExec: the clone3 path was not tested (kernel older than 5.5, or clone3 filtered)")
		}
		if got != want {
			t.Fatalf("setgroups %v: spawn.ForkExec's child:\n%s\nsyscall.ForkExec's child:\n%s", setgroups, got, want)
		}
		for _, line := range []string{"0\n0\n", "session-leader", "fd 3 open", "own network namespace", "env passed", "SigBlk:\t0000000000000000"} {
			if !strings.Contains(got, line) {
				t.Fatalf("the child's report lacks %q:\n%s", line, got)
			}
		}
		if setgroups != strings.Contains(got, "allow") {
			t.Fatalf("setgroups %v, the child's report:\n%s", setgroups, got)
		}
	}
}

// A command that cannot be executed is the same error as with
// syscall.ForkExec; a map that cannot be written stops the child. Either
// way the child is reaped and no descriptor is left open.
func TestForkExecFailures(t *testing.T) {
	needRoot(t)
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	attr := func(maps []syscall.SysProcIDMap) *syscall.ProcAttr {
		return &syscall.ProcAttr{
			Files: []uintptr{null.Fd(), null.Fd(), null.Fd()},
			Sys: &syscall.SysProcAttr{
				Cloneflags:  unix.CLONE_NEWUSER | unix.CLONE_NEWNS,
				UidMappings: maps, GidMappings: maps,
				Credential: &syscall.Credential{Uid: 0, Gid: 0},
			},
		}
	}
	good := []syscall.SysProcIDMap{{ContainerID: 0, HostID: 1<<31 - 1<<20, Size: 65536}}
	fdsBefore := openFDs(t)

	_, want := syscall.ForkExec("/nonexistent/cmd", []string{"cmd"}, attr(good))
	_, err = ForkExec("/nonexistent/cmd", []string{"cmd"}, attr(good))
	if err == nil || err != want {
		t.Fatalf("missing command: %v, want %v (syscall.ForkExec's)", err, want)
	}
	if !Used() {
		t.Fatal("the clone3 path was not taken")
	}
	// Overlapping ranges: the kernel refuses the map.
	overlap := []syscall.SysProcIDMap{{ContainerID: 0, HostID: 1<<31 - 1<<20, Size: 10}, {ContainerID: 5, HostID: 1<<31 - 1<<19, Size: 10}}
	if _, err := ForkExec("/bin/true", []string{"true"}, attr(overlap)); err == nil {
		t.Fatal("a map the kernel refuses: no error")
	}
	// The control: the same attributes with a valid map start /bin/true.
	pid, err := ForkExec("/bin/true", []string{"true"}, attr(good))
	if err != nil {
		t.Fatalf("control: %v", err)
	}
	var ws unix.WaitStatus
	if _, err := unix.Wait4(pid, &ws, 0, nil); err != nil || !ws.Exited() || ws.ExitStatus() != 0 {
		t.Fatalf("control: %v %v", err, ws)
	}
	if _, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil); err != unix.ECHILD {
		t.Fatalf("a child is left unreaped: %v", err)
	}
	if after := openFDs(t); after != fdsBefore {
		t.Fatalf("open descriptors: %d before, %d after", fdsBefore, after)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// BenchmarkForkExec: the start of a process in new namespaces (to its
// execve of /bin/true; the wait is outside the timer), by syscall.ForkExec
// and by spawn.ForkExec, from a process with 0 and 100 MiB of heap in use.
// go test -run XXX -bench ForkExec ./internal/spawn/ (root)
func BenchmarkForkExec(b *testing.B) {
	needRoot(b)
	null, _ := os.Open(os.DevNull)
	defer null.Close()
	attr := &syscall.ProcAttr{
		Files: []uintptr{null.Fd(), null.Fd(), null.Fd()},
		Sys: &syscall.SysProcAttr{
			Cloneflags:  unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 1<<31 - 1<<20, Size: 65536}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 1<<31 - 1<<20, Size: 65536}},
			Credential:  &syscall.Credential{Uid: 0, Gid: 0},
		},
	}
	var ballast []byte
	for _, heap := range []int{0, 100} {
		ballast = make([]byte, heap<<20)
		for i := 0; i < len(ballast); i += 4096 {
			ballast[i] = 1
		}
		for _, f := range []struct {
			name string
			fork func(string, []string, *syscall.ProcAttr) (int, error)
		}{{"syscall", syscall.ForkExec}, {"spawn", ForkExec}} {
			b.Run(fmt.Sprintf("%s/heap=%dMiB", f.name, heap), func(b *testing.B) {
				var total time.Duration
				for i := 0; i < b.N; i++ {
					t0 := time.Now()
					pid, err := f.fork("/bin/true", []string{"true"}, attr)
					total += time.Since(t0)
					if err != nil {
						b.Fatal(err)
					}
					var ws unix.WaitStatus
					unix.Wait4(pid, &ws, 0, nil)
				}
				b.ReportMetric(float64(total.Microseconds())/float64(b.N), "us/start")
			})
		}
	}
	runtime.KeepAlive(ballast)
}
