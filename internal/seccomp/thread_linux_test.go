package seccomp

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// threadChildMain installs the default filter with InstallThread on a
// locked thread and reports, one line each: that thread's state, the other
// threads' (they must stay unfiltered: the control), a denied call on the
// thread and on another one, and a program started from the thread
// (filtered: it inherits the filter) and from another thread (not).
func threadChildMain() int {
	prog, err := Default().Compile()
	if err != nil {
		fmt.Println("ERROR compile:", err)
		return 2
	}
	// Another thread that exists before the install.
	other := make(chan func(), 1)
	otherDone := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		for f := range other {
			f()
			otherDone <- struct{}{}
		}
	}()
	onOther := func(f func()) { other <- f; <-otherDone }
	var otherTid int
	onOther(func() { otherTid = unix.Gettid() })

	runtime.LockOSThread()
	if err := InstallThread(prog); err != nil {
		fmt.Println("ERROR install:", err)
		return 3
	}
	fmt.Printf("self %s\n", seccompStatus("/proc/thread-self/status"))
	fmt.Printf("other %s\n", seccompStatus(fmt.Sprintf("/proc/self/task/%d/status", otherTid)))
	// bpf(2) with a bogus command: EPERM from the filter, EINVAL from the
	// kernel for root (unprivileged bpf may be refused with EPERM too).
	bpf := func() string {
		_, err := sys(unix.SYS_BPF, 0xffff, 0, 0)
		return errName(err)
	}
	fmt.Printf("bpf-self %s\n", bpf())
	var onOtherBPF string
	onOther(func() { onOtherBPF = bpf() })
	fmt.Printf("bpf-other %s\n", onOtherBPF)
	nested := func() string {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), childEnv+"=nested")
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)) + " exit=" + errName(err)
	}
	// exec.Command forks from the calling thread: this locked one.
	fmt.Printf("fromself %s\n", nested())
	var fromOther string
	onOther(func() { fromOther = nested() })
	fmt.Printf("fromother %s\n", fromOther)
	return 0
}

func TestInstallThread(t *testing.T) {
	if _, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0); err != nil {
		t.Skipf("seccomp unavailable: prctl(PR_GET_SECCOMP): %v", err)
	}
	if _, err := archFor(runtime.GOARCH); err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=thread")
	out, err := cmd.CombinedOutput()
	t.Logf("child output:\n%s", out)
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		k, v, _ := strings.Cut(l, " ")
		got[k] = v
	}
	want := map[string]string{
		"self":      "seccomp=2",
		"other":     "seccomp=0", // control: only the calling thread
		"bpf-self":  "EPERM",
		"fromself":  "nested seccomp=2 exit=ok",
		"fromother": "nested seccomp=0 exit=ok", // control
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: %q, want %q", k, got[k], w)
		}
	}
	if other := got["bpf-other"]; other == "" || (other == "EPERM" && os.Geteuid() == 0) {
		t.Errorf("bpf on another thread: %q, want the call's own error (not the filter's EPERM)", got["bpf-other"])
	}
}

func TestInstallThreadRejectsBadPrograms(t *testing.T) {
	if err := InstallThread(nil); err == nil || !strings.HasPrefix(err.Error(), "seccomp: install filter: ") {
		t.Errorf("InstallThread(nil) = %v", err)
	}
	if err := InstallThread(make([]SockFilter, MaxInstructions+1)); err == nil || !strings.HasPrefix(err.Error(), "seccomp: install filter: ") {
		t.Errorf("InstallThread(too long) = %v", err)
	}
}
