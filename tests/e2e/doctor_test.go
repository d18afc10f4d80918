//go:build linux

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"syscall"
	"testing"
)

type doctorReport struct {
	FullIsolation bool `json:"full_isolation"`
	Checks        []struct {
		Name     string `json:"name"`
		OK       bool   `json:"ok"`
		Required bool   `json:"required"`
		Detail   string `json:"detail"`
	} `json:"checks"`
}

func doctorJSON(t *testing.T, o opts) (doctorReport, result) {
	t.Helper()
	r := airlock(t, o, "doctor", "--json")
	var rep doctorReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("doctor --json is not JSON: %v\n%s", err, r)
	}
	return rep, r
}

// As root on this host every layer is there: doctor says so, exits 0, and
// its self-test sandbox ran (the canary and outside-write probes failed,
// their controls succeeded); loop volumes for the daemon's workspaces work
// (as nobody they are absent). As nobody on a cgroup v1 host the cgroups layer
// is missing: doctor exits 1 and names it (the negative control).
func TestDoctor(t *testing.T) {
	needRoot(t)
	rep, r := doctorJSON(t, opts{})
	if r.code != 0 || !rep.FullIsolation {
		t.Fatalf("doctor as root: exit %d, full isolation %v\n%s", r.code, rep.FullIsolation, r)
	}
	seen := map[string]bool{}
	for _, c := range rep.Checks {
		seen[c.Name] = c.OK
		if c.Required && !c.OK {
			t.Errorf("required check %q failed: %s", c.Name, c.Detail)
		}
	}
	for _, name := range []string{"user namespaces", "seccomp", "landlock", "cgroups", "overlayfs", "host id pool",
		"disk quota (airlock run)", "disk quota (airlock serve)", "tmpfs memory accounting",
		"self-test: read canary outside", "self-test: read workspace (control)",
		"self-test: write outside workspace", "self-test: write workspace (control)"} {
		if !seen[name] {
			t.Errorf("doctor did not report %q as ok", name)
		}
	}
	// On a cgroup v1 host, the attach cost is reported: as root none (the
	// init is forked from a thread inside its cgroup), else as the kernel
	// setting says (absent is not a failure: it costs time, not isolation).
	if b, err := os.ReadFile("/sys/kernel/rcu_expedited"); err == nil && !fileExists("/sys/fs/cgroup/cgroup.controllers") {
		ok, found := seen["cgroup v1 attach"]
		if want := os.Geteuid() == 0 || strings.TrimSpace(string(b)) != "0"; !found || ok != want {
			t.Errorf("cgroup v1 attach: reported %v (found %v), want ok=%v for rcu_expedited=%s", ok, found, want, strings.TrimSpace(string(b)))
		}
	}
	// As root, whether /run/airlock is in memory: ok exactly when it is a
	// tmpfs (where /run is not one, airlock mounts one if it can: see
	// internal/rundir).
	if os.Geteuid() == 0 {
		var st syscall.Statfs_t
		ok, found := seen["runtime directory"]
		if err := syscall.Statfs("/run/airlock", &st); err != nil || !found || ok != (st.Type == 0x01021994) {
			t.Errorf("runtime directory: reported %v (found %v), want ok=%v (statfs type %#x, %v)", ok, found, st.Type == 0x01021994, st.Type, err)
		}
	}
	// Sleeping agents: this build (linux/amd64) has the sleeper, and the
	// host executes memfds unless vm.memfd_noexec says otherwise.
	if goruntime.GOARCH == "amd64" {
		b, _ := os.ReadFile("/proc/sys/vm/memfd_noexec")
		ok, found := seen["idle agents sleep (airlock serve, sleep_after)"]
		if want := strings.TrimSpace(string(b)) != "2"; !found || ok != want {
			t.Errorf("idle agents sleep: reported %v (found %v), want ok=%v (vm.memfd_noexec %q)", ok, found, want, b)
		}
	}
	// Workspace snapshots: with xfsprogs installed (as .ci/run does),
	// copy-on-write, naming where the reflinks come from; a data
	// directory whose volumes directory is a mount without reflinks (a
	// tmpfs) says copy (the control).
	if _, err := os.Stat("/usr/sbin/mkfs.xfs"); err == nil {
		snapCheck := func(data string) (bool, string) {
			rep, _ := doctorJSON(t, opts{env: []string{"AIRLOCK_DATA_DIR=" + data}})
			for _, c := range rep.Checks {
				if c.Name == "workspace snapshots (airlock serve)" {
					return c.OK, c.Detail
				}
			}
			t.Fatal("doctor does not say how the daemon takes workspace snapshots")
			return false, ""
		}
		data := t.TempDir()
		if ok, detail := snapCheck(data); !ok || !strings.HasPrefix(detail, "clone: ") || !strings.Contains(detail, data) {
			t.Errorf("workspace snapshots with xfsprogs: ok=%v %s", ok, detail)
		}
		vols := filepath.Join(data, "volumes")
		if err := os.Mkdir(vols, 0o711); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mount("tmpfs", vols, "tmpfs", 0, "size=1m"); err != nil {
			t.Fatal(err)
		}
		defer syscall.Unmount(vols, syscall.MNT_DETACH)
		if ok, detail := snapCheck(data); ok || !strings.HasPrefix(detail, "copy: ") {
			t.Errorf("workspace snapshots on a tmpfs: ok=%v %s, want copy", ok, detail)
		}
	}
	human := airlock(t, opts{}, "doctor")
	if human.code != 0 || !strings.Contains(human.stdout, "full isolation: yes") {
		t.Errorf("doctor (human): exit %d\n%s", human.code, human)
	}

	// A uid pool that would share ids with the host's own users: the
	// check fails, and so does the doctor.
	rep, r = doctorJSON(t, opts{env: []string{"AIRLOCK_UID_POOL=1000:65536"}})
	poolFailed := false
	for _, c := range rep.Checks {
		if c.Name == "host id pool" && !c.OK && strings.Contains(c.Detail, "must start at or above") {
			poolFailed = true
		}
	}
	if r.code != 1 || rep.FullIsolation || !poolFailed {
		t.Errorf("doctor with a bad uid pool: exit %d, full isolation %v, pool check failed %v\n%s", r.code, rep.FullIsolation, poolFailed, r)
	}

	rep, r = doctorJSON(t, opts{nobody: true, noFlag: true})
	// Loop volumes need root: as nobody they are reported absent, with why.
	for _, c := range rep.Checks {
		if c.Name == "disk quota (airlock serve)" && (c.OK || !strings.Contains(c.Detail, "needs root")) {
			t.Errorf("doctor as nobody: %q ok=%v (%s), want absent because it needs root", c.Name, c.OK, c.Detail)
		}
	}
	if r.code == 0 || rep.FullIsolation {
		t.Skip("nobody can create cgroups on this host: no missing layer to report")
	}
	failed := false
	for _, c := range rep.Checks {
		if c.Name == "cgroups" && !c.OK {
			failed = true
		}
	}
	if r.code != 1 || !failed {
		t.Errorf("doctor as nobody: exit %d, cgroups check failed %v\n%s", r.code, failed, r)
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }
