//go:build linux

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/runtime/gvisor"
)

// backend is the runtime every `airlock run` of the probes uses ("":
// the default, native). TestBackends sets it while it runs the probes
// again for each other backend; tests never run in parallel.
var backend string

// backendLive: runs on backend get --workspace-mode live with a workspace.
var backendLive = true

// probe is one entry of the conformance table: a test that must hold on
// every backend, or the reason it cannot hold on some.
type probe struct {
	name string
	fn   func(*testing.T)
	// cannot maps a backend to why this probe does not hold there (also
	// listed in the README).
	cannot map[string]string
}

// conformance lists the probes that run against every backend. The native
// backend runs them as the top-level tests; TestBackends runs them again
// for each other backend installed here.
var conformance = []probe{
	{name: "ExitStatus", fn: TestExitStatus},
	{name: "CommandNotFound", fn: TestCommandNotFound},
	{name: "Stdio", fn: TestStdio},
	{name: "Timeout", fn: TestTimeout},
	{name: "Environment", fn: TestEnvironment},
	{name: "F1HostRead", fn: TestF1HostRead},
	{name: "F2HostWrite", fn: TestF2HostWrite},
	{name: "F5Mount", fn: TestF5Mount},
	{name: "F11Setuid", fn: TestF11Setuid, cannot: map[string]string{
		"gvisor": "runsc mounts the sandbox's root without nosuid (the OCI spec has no option for it); that root is read-only and holds only mount points and symlinks, and every process runs with no_new_privs and no capabilities",
	}},
	{name: "N1N8NoEgress", fn: TestN1N8NoEgress},
	{name: "P6HostPIDs", fn: TestP6HostPIDs},
	{name: "P9LeakedFDs", fn: TestP9LeakedFDs},
	{name: "SeccompDenials", fn: TestSeccompDenials},
	{name: "WorkspaceProtection", fn: TestWorkspaceProtection},
	{name: "R3Memory", fn: TestR3Memory},
	{name: "R7Nofile", fn: TestR7Nofile},
	{name: "PolicyFile", fn: TestPolicyFile},
	{name: "CacheEnv", fn: TestCacheEnv},
	{name: "CacheShared", fn: TestCacheShared},
	{name: "CacheErrors", fn: TestCacheErrors},
	{name: "R1ForkBomb", fn: TestR1ForkBomb, cannot: map[string]string{
		"gvisor": "guest processes are Sentry tasks, not host tasks: there is no per-sandbox pids cgroup inside gVisor for the supervisor to set; --pids N caps the host tasks (Sentry, Gofer, systrap stubs) at N+128, so a fork bomb ends the whole sandbox (exit 137) instead of getting EAGAIN",
	}},
	{name: "R2Threads", fn: TestR2Threads, cannot: map[string]string{
		"gvisor": "as R1ForkBomb: --pids caps the sandbox's host tasks, not the threads of one guest process",
	}},
	{name: "R4R5Disk", fn: TestR4R5Disk, cannot: map[string]string{
		"gvisor": "the host's system directories are read-only on gvisor (EROFS, not ENOSPC in a copy-on-write layer); /tmp, /dev/shm and the fresh workspace keep their caps",
	}},
	{name: "CPULimit", fn: TestCPULimit},
	{name: "F3MaskedProc", fn: TestF3MaskedProc},
	{name: "F4ProcSys", fn: TestF4ProcSys, cannot: map[string]string{
		"gvisor": "gVisor's /proc has no /proc/sys/kernel/core_pattern (the probe's read control); the writes it tries are refused",
	}},
	{name: "F9DevShm", fn: TestF9DevShm, cannot: map[string]string{
		"gvisor": "gVisor's /proc has no /proc/sysvipc (the probe's SysV control); /dev/shm is private per sandbox",
	}},
	{name: "F10Devices", fn: TestF10Devices, cannot: map[string]string{
		"gvisor": "the Sentry adds its own emulated /dev/net/tun, /dev/fuse and /dev/char: no host device is reachable",
	}},
	{name: "N9Lateral", fn: TestN9Lateral},
	{name: "N6N11Sockets", fn: TestN6N11Sockets, cannot: map[string]string{
		"gvisor": "gVisor's netstack allows ICMP datagram sockets; with --network=none they reach only the sandbox's own loopback",
	}},
	{name: "N10UnixSockets", fn: TestN10UnixSockets},
	{name: "P1PrivilegeState", fn: TestP1PrivilegeState, cannot: map[string]string{
		"gvisor": "the probe reads the host tasks in the sandbox's cgroup: runsc's Gofer keeps CAP_CHOWN, DAC_OVERRIDE, DAC_READ_SEARCH, FOWNER, FSETID and SYS_CHROOT (in its own namespaces, chrooted, under runsc's seccomp filter) to serve files; the sandboxed processes have none",
	}},
	{name: "P16KillAll", fn: TestP16KillAll, cannot: map[string]string{
		"gvisor": "kill -9 1 inside ends the gVisor sandbox (the Sentry delivers SIGKILL to the container's init); only that sandbox ends, other sandboxes and host processes survive",
	}},
	{name: "Unprotect", fn: TestUnprotect},
	{name: "TTY", fn: TestTTY, cannot: map[string]string{
		"gvisor": "tty(1) says \"not a tty\": the terminal is a pty runsc passes in from the host, with no name under /dev (fd 0 is host:[N]); isatty, the size, job control, resize and ^C work (TTYResizeAndInterrupt)",
	}},
	{name: "TTYResizeAndInterrupt", fn: TestTTYResizeAndInterrupt},
	{name: "TIOCSTI", fn: TestTIOCSTI},
	{name: "LargeArgv", fn: TestLargeArgv},
	{name: "EgressAllowDeny", fn: TestEgressAllowDeny},
	{name: "EgressPrivateAddresses", fn: TestEgressPrivateAddresses},
	{name: "EgressNoneAndNoDNS", fn: TestEgressNoneAndNoDNS},
	{name: "EgressAudit", fn: TestEgressAudit},
	{name: "EgressCredentials", fn: TestEgressCredentials},
	{name: "EgressProbes", fn: TestEgressProbes},
	{name: "EgressCaps", fn: TestEgressCaps},
	{name: "EgressClients", fn: TestEgressClients},
}

// backends are the runtimes other than native that can run here, with
// the reason each one that cannot is skipped.
func backends() map[string]string {
	reason := ""
	if os.Geteuid() != 0 {
		reason = "gvisor probes need root (runsc's cgroups)"
	} else if _, err := gvisor.Find(); err != nil {
		reason = err.Error()
	}
	return map[string]string{gvisor.Name: reason}
}

func TestBackends(t *testing.T) {
	need(t)
	for name, reason := range backends() {
		t.Run(name, func(t *testing.T) {
			if reason != "" {
				t.Skip(reason)
			}
			backend = name
			defer func() { backend = "" }()
			// The table really runs on this backend.
			if r := run(t, opts{}, []string{"-v"}, "true"); r.code != 0 || !strings.Contains(r.stderr, "(runtime "+name+",") {
				t.Fatalf("airlock run -v does not report runtime %s\n%s", name, r)
			}
			for _, p := range conformance {
				t.Run(p.name, func(t *testing.T) {
					if why := p.cannot[name]; why != "" {
						t.Skip("does not hold on " + name + ": " + why)
					}
					p.fn(t)
				})
			}
		})
	}
}

// TestGVisorBadInput: a missing runsc, a policy the backend cannot honour
// (cgroups without root), an unknown runtime and a missing --ro path are
// refused with one line and exit 125, and so is a memory limit too small
// for the Sentry to start; none leaves runsc state behind (not even
// runsc's lock file); the same run with runsc installed succeeds.
func TestGVisorBadInput(t *testing.T) {
	needRoot(t)
	runsc, err := gvisor.Find()
	if err != nil {
		t.Skip(err)
	}
	state := filepath.Join("/run", "airlock-gvisor")
	before, beforeFiles := entries(state), runscFiles(state)
	r := run(t, opts{env: []string{"AIRLOCK_RUNSC=/nonexistent/runsc"}}, []string{"--runtime", "gvisor"}, "true")
	if r.code != 125 || !strings.Contains(r.stderr, "install-runsc") || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
		t.Errorf("missing runsc: want exit 125 and one line naming scripts/install-runsc\n%s", r)
	}
	r = run(t, opts{env: []string{"AIRLOCK_RUNSC=" + runsc}, nobody: true, noFlag: true}, []string{"--runtime", "gvisor"}, "true")
	if r.code != 125 || !strings.Contains(r.stderr, "cgroups without root") || !strings.Contains(r.stderr, "gvisor") {
		t.Errorf("gvisor as nobody with cgroups: want exit 125 naming the feature and the backend\n%s", r)
	}
	r = run(t, opts{}, []string{"--runtime", "firecracker"}, "true")
	if r.code != 125 || !strings.Contains(r.stderr, `unknown runtime "firecracker"`) {
		t.Errorf("unknown runtime: want exit 125\n%s", r)
	}
	missing := filepath.Join(t.TempDir(), "not-there")
	r = run(t, opts{}, []string{"--runtime", "gvisor", "--ro", missing}, "true")
	if r.code != 125 || !strings.Contains(r.stderr, "read-only path") || !strings.Contains(r.stderr, missing) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
		t.Errorf("missing --ro path: want exit 125 and one line naming it\n%s", r)
	}
	r = run(t, opts{}, []string{"--runtime", "gvisor", "--memory", "8MiB"}, "true")
	if r.code != 125 || !strings.Contains(r.stderr, "below the 32MiB the gvisor runtime needs") || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
		t.Errorf("--memory 8MiB: want exit 125 and one line with the backend's minimum\n%s", r)
	}
	if after := entries(state); after != before {
		t.Errorf("failed creations left state behind in %s: before %q, after %q", state, before, after)
	}
	if after := runscFiles(state); after != beforeFiles {
		t.Errorf("failed creations left runsc's files behind in %s/runsc: before %q, after %q", state, beforeFiles, after)
	}
	// Control: the same run with runsc installed works.
	mustOK(t, run(t, opts{env: []string{"AIRLOCK_RUNSC=" + runsc}}, []string{"--runtime", "gvisor"}, "true"), "gvisor true")
	if after := entries(state); after != before {
		t.Errorf("a finished run left state behind in %s: before %q, after %q", state, before, after)
	}
}

// runscFiles lists every file in a state root's runsc directory.
func runscFiles(dir string) string {
	var names []string
	es, _ := os.ReadDir(filepath.Join(dir, "runsc"))
	for _, e := range es {
		names = append(names, e.Name())
	}
	return strings.Join(names, ",")
}

// entries lists the sandbox directories in a state root (and runsc's).
func entries(dir string) string {
	var names []string
	for _, d := range []string{dir, filepath.Join(dir, "runsc")} {
		es, _ := os.ReadDir(d)
		for _, e := range es {
			if len(e.Name()) == 16 {
				names = append(names, e.Name())
			}
		}
	}
	return strings.Join(names, ",")
}

// TestDoctorGVisor: doctor reports runsc usable (a sandbox ran `true`) when
// it is installed, and absent with the install command when it is not;
// either way the native runtime's full isolation is unaffected.
func TestDoctorGVisor(t *testing.T) {
	needRoot(t)
	runsc, err := gvisor.Find()
	if err != nil {
		t.Skip(err)
	}
	find := func(rep doctorReport) (bool, string, bool) {
		for _, c := range rep.Checks {
			if c.Name == "runtime gvisor (runsc)" {
				return c.OK, c.Detail, true
			}
		}
		return false, "", false
	}
	rep, r := doctorJSON(t, opts{env: []string{"AIRLOCK_RUNSC=" + runsc}})
	if ok, detail, seen := find(rep); !seen || !ok || !strings.Contains(detail, "systrap") {
		t.Errorf("doctor with runsc installed: gvisor check ok=%v seen=%v (%s)\n%s", ok, seen, detail, r)
	}
	rep, r = doctorJSON(t, opts{env: []string{"AIRLOCK_RUNSC=/nonexistent/runsc"}})
	if ok, detail, _ := find(rep); ok || !strings.Contains(detail, "install-runsc") {
		t.Errorf("doctor without runsc: gvisor check ok=%v (%s), want absent naming scripts/install-runsc", ok, detail)
	}
	if !rep.FullIsolation {
		t.Errorf("a missing runsc must not cost the native runtime's full isolation\n%s", r)
	}
}

// TestGVisorSupervisorDeath: `airlock run --runtime gvisor` killed with
// SIGKILL takes its sandbox with it (the init's watch pipe closes, runsc
// ends the sandbox: its host process goes away), and the next run sweeps
// the state and cgroup left behind.
func TestGVisorSupervisorDeath(t *testing.T) {
	needRoot(t)
	runsc, err := gvisor.Find()
	if err != nil {
		t.Skip(err)
	}
	state := "/run/airlock-gvisor"
	before := entries(state)
	ctx, cancel := runContext(t, opts{})
	defer cancel()
	cmd := command(ctx, opts{}, "run", "--runtime", "gvisor", "--", "sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	// Wait for its sandbox to run; its host pid is runsc's to tell.
	var id string
	var pid int
	deadline := time.Now().Add(30 * time.Second)
	for pid == 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		for _, e := range strings.Split(entries(state), ",") {
			if e == "" || strings.Contains(before, e) {
				continue
			}
			out, err := exec.Command(runsc, "--root", filepath.Join(state, "runsc"), "state", e).Output()
			var st struct {
				Status string `json:"status"`
				Pid    int    `json:"pid"`
			}
			if err == nil && json.Unmarshal(out, &st) == nil && st.Status == "running" && st.Pid > 0 {
				id, pid = e, st.Pid
			}
		}
	}
	if pid == 0 {
		t.Fatalf("no running gvisor sandbox appeared in %s", state)
	}
	// Control: the sandbox's host process is there while the supervisor lives.
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
		t.Fatalf("control: sandbox process %d: %v", pid, err)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	gone := false
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err != nil || strings.Contains(string(b), ") Z ") {
			gone = true
			break
		}
	}
	if !gone {
		t.Fatalf("sandbox process %d (sandbox %s) still runs after its supervisor was killed", pid, id)
	}
	mustOK(t, run(t, opts{}, []string{"--runtime", "gvisor"}, "true"), "next gvisor run")
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if !strings.Contains(entries(state), id) {
			break
		}
	}
	if strings.Contains(entries(state), id) {
		t.Errorf("sandbox %s's state was not swept by the next run: %s", id, entries(state))
	}
	if m, _ := filepath.Glob("/sys/fs/cgroup/*/airlock/" + id); len(m) > 0 {
		t.Errorf("sandbox %s's cgroups remain: %v", id, m)
	}
}
