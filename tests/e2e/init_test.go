//go:build linux

package e2e

import (
	"context"
	"golang.org/x/sys/unix"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestInitProgramSealed: the sandbox's PID 1 runs the small init embedded
// in airlock, from root's read-only copy (as root) or a sealed memfd, that
// nothing in a sandbox can write; the command inside still runs (the
// control).
func TestInitProgramSealed(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	cmd := command(ctx, opts{}, "run", "--", "/bin/sh", "-c", "echo ready; exec sleep 30")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	buf := make([]byte, 6)
	if _, err := out.Read(buf); err != nil || string(buf) != "ready\n" {
		t.Fatalf("the command inside did not start: %q %v", buf, err)
	}
	// The init is the child of airlock whose arguments name it.
	initPid := ""
	deadline := time.Now().Add(10 * time.Second)
	for initPid == "" && time.Now().Before(deadline) {
		procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, p := range procs {
			b, _ := os.ReadFile(p)
			stat, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "stat"))
			if !strings.Contains(string(b), "__sandbox-init") || len(stat) == 0 {
				continue
			}
			f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
			if f[1] == strconv.Itoa(cmd.Process.Pid) {
				initPid = filepath.Base(filepath.Dir(p))
			}
		}
	}
	if initPid == "" {
		t.Fatal("the sandbox's init was not found on the host")
	}
	exe, err := os.Readlink("/proc/" + initPid + "/exe")
	if err != nil {
		t.Fatal(err)
	}
	if f, err := os.OpenFile("/proc/"+initPid+"/exe", os.O_WRONLY, 0); err == nil {
		f.Close()
		t.Fatal("the init's program could be opened for writing")
	}
	// A running program refuses writers anyway (ETXTBSY): what keeps it
	// unwritable once it no longer runs is, as root, that it is root's
	// read-only copy in a directory only root can write; else the memfd's
	// seals.
	f, err := os.Open("/proc/" + initPid + "/exe")
	if err != nil {
		t.Fatalf("control: open the init's program for reading: %v", err)
	}
	defer f.Close()
	if strings.HasPrefix(exe, "/memfd:airlock-init") {
		seals, err := unix.FcntlInt(f.Fd(), unix.F_GET_SEALS, 0)
		if err != nil {
			t.Fatalf("F_GET_SEALS: %v", err)
		}
		want := unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
		if seals&want != want {
			t.Fatalf("the init's memfd has seals %#x, want %#x", seals, want)
		}
		return
	}
	if filepath.Dir(exe) != "/run/airlock/init" || !strings.HasPrefix(filepath.Base(exe), "airlock-init-") {
		t.Fatalf("the sandbox's init runs %q, want the embedded init (root's copy in /run/airlock/init, or memfd:airlock-init)", exe)
	}
	for _, p := range []string{"/run/airlock", "/run/airlock/init"} {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil || st.Uid != 0 || st.Mode&0o022 != 0 || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			t.Errorf("%s: uid %d mode %o (%v): want a directory of root's only root can write", p, st.Uid, st.Mode, err)
		}
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Uid != 0 || st.Mode&0o222 != 0 {
		t.Errorf("the init's program: uid %d mode %o (%v): want root's, writable by nobody", st.Uid, st.Mode, err)
	}
}

// TestInitProgramRefusesOtherBuild: the embedded init runs only for the
// airlock build that carries it.
func TestInitProgramRefusesOtherBuild(t *testing.T) {
	need(t)
	bin := filepath.Join(t.TempDir(), "airlock-init")
	build := exec.Command("go", "build", "-o", bin, "github.com/airlock-dev/airlock/cmd/airlock-init")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "__sandbox-init")
	cmd.Env = []string{"AIRLOCK_INIT_BUILD=another-build"}
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 120 || !strings.Contains(string(out), "rebuild both") {
		t.Fatalf("an init of another build ran: %v\n%s", err, out)
	}
	// The control: with no build id on either side the check passes and the
	// init goes on to its own checks (it has no control channel here).
	cmd = exec.Command(bin)
	cmd.Env = []string{}
	out, _ = cmd.CombinedOutput()
	if strings.Contains(string(out), "rebuild both") {
		t.Fatalf("matching build ids refused: %s", out)
	}
}
