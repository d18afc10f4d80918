//go:build linux

package native_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/cgroup"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/quota"
	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/sandbox"
	"github.com/airlock-dev/airlock/internal/uidpool"
)

// createIn makes a sandbox for p with rt, destroyed at the end of the test.
func createIn(t *testing.T, rt interface {
	Create(context.Context, *runtime.Spec) (runtime.Sandbox, error)
}, p *policy.Policy) runtime.Sandbox {
	t.Helper()
	spec, err := sandbox.Spec(p, sandbox.Opts{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb, err := rt.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Destroy(context.Background()) })
	return sb
}

// fillScript writes 64 MiB into $1 and prints dd's verdict, the file's
// size and the size statfs reports for its directory.
const fillScript = `dd if=/dev/zero of="$1" bs=1M count=64 2>&1 | grep -o 'No space left on device' | head -1; echo rc=$?
echo size=$(stat -c %s "$1")
echo fs=$(( $(stat -f -c '%b * %S' "$(dirname "$1")") ))
rm -f "$1"
dd if=/dev/zero of="$1" bs=1M count=4 2>/dev/null; echo control=$?`

func fill(t *testing.T, sb runtime.Sandbox, path string) map[string]string {
	t.Helper()
	out, _ := run(t, sb, "/bin/sh", "-c", fillScript, "sh", path)
	m := map[string]string{"out": out}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			m[k] = v
		}
	}
	if strings.Contains(out, "No space left on device") {
		m["enospc"] = "yes"
	}
	return m
}

func num(t *testing.T, m map[string]string, k string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(m[k], 10, 64)
	if err != nil {
		t.Fatalf("%s: %q is not a number\n%s", k, m[k], m["out"])
	}
	return n
}

// A fresh workspace on a volume (the daemon's way) is capped at the disk
// size: writing past it fails with ENOSPC inside, the host image holds no
// more than the cap, df inside shows the cap (not the host disk), and
// nothing is left once the sandbox is destroyed.
func TestWorkspaceVolumeCapped(t *testing.T) {
	needRoot(t)
	vs, err := quota.Open(filepath.Join(t.TempDir(), "volumes"), quota.KindAuto, 0)
	if err != nil {
		t.Skipf("no loop volumes here: %v", err)
	}
	rt := privateRuntime(t)
	rt.Volumes = vs
	sb := createIn(t, rt, &policy.Policy{Resources: policy.Resources{Disk: 16 << 20}})
	img := filepath.Join(vs.Dir(), sb.ID()+".img")
	mnt := filepath.Join(vs.Dir(), sb.ID())

	m := fill(t, sb, "/workspace/f")
	if m["enospc"] != "yes" || num(t, m, "size") > 16<<20 {
		t.Errorf("64 MiB into /workspace under disk 16MiB: want ENOSPC below 16 MiB\n%s", m["out"])
	}
	if fs := num(t, m, "fs"); fs > 16<<20 || fs < 12<<20 {
		t.Errorf("statfs /workspace inside: %d bytes, want the 16 MiB cap (less file system overhead)", fs)
	}
	if m["control"] != "0" {
		t.Errorf("control: 4 MiB into /workspace under disk 16MiB failed\n%s", m["out"])
	}
	var st unix.Stat_t
	if err := unix.Stat(img, &st); err != nil {
		t.Fatalf("the sandbox's volume image: %v", err)
	}
	if st.Blocks*512 > 17<<20 {
		t.Errorf("the volume image holds %d bytes of host storage under a 16 MiB cap", st.Blocks*512)
	}
	// The workspace is the volume: what the sandbox wrote is there.
	if _, err := os.Stat(filepath.Join(mnt, "f")); err != nil {
		t.Errorf("the sandbox's file is not in its volume on the host: %v", err)
	}

	if err := sb.Destroy(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{img, mnt} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s left after Destroy (%v)", p, err)
		}
	}
	if mi, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mi), mnt) {
		t.Errorf("%s still mounted after Destroy", mnt)
	}
}

// A sandbox whose volume does not fit beside the reserve is refused, and
// leaves nothing behind: no volume, no state, and, since the volume is
// made while the init starts, no cgroup (so no process) and no uid lease;
// a smaller one fits (the control).
func TestWorkspaceVolumeReserve(t *testing.T) {
	needRoot(t)
	dir := filepath.Join(t.TempDir(), "volumes")
	probe, err := quota.Open(dir, quota.KindAuto, 0)
	if err != nil {
		t.Skipf("no loop volumes here: %v", err)
	}
	free, promised, _, err := probe.Space()
	if err != nil {
		t.Fatal(err)
	}
	// Leave exactly 64 MiB above the reserve.
	vs, err := quota.Open(dir, quota.KindAuto, free-promised-64<<20)
	if err != nil {
		t.Fatal(err)
	}
	rt := privateRuntime(t)
	rt.Volumes = vs
	spec, err := sandbox.Spec(&policy.Policy{Resources: policy.Resources{Disk: 1 << 30}}, sandbox.Opts{})
	if err != nil {
		t.Fatal(err)
	}
	spec.ID = "0fa1ed00d15c0001"
	_, err = rt.Create(context.Background(), spec)
	if err == nil || !strings.Contains(err.Error(), "kept in reserve") {
		t.Fatalf("a 1 GiB sandbox with 64 MiB above the reserve: err %v, want a reserve refusal", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 1 { // .lock
		t.Errorf("a refused sandbox left %v in the volume directory", entries)
	}
	if ids, _ := rt.List(); len(ids) != 0 {
		t.Errorf("a refused sandbox left state %v", ids)
	}
	for _, pattern := range []string{"/sys/fs/cgroup/*/" + cgroup.Prefix + "/" + spec.ID, "/sys/fs/cgroup/" + cgroup.Prefix + "/" + spec.ID} {
		if left, _ := filepath.Glob(pattern); len(left) > 0 {
			t.Errorf("a refused sandbox left its cgroups %v", left)
		}
	}
	leases, _ := os.ReadDir(uidpool.DefaultDir)
	for _, e := range leases {
		if b, _ := os.ReadFile(filepath.Join(uidpool.DefaultDir, e.Name())); strings.Contains(string(b), spec.ID) {
			t.Errorf("a refused sandbox left its uid lease %s: %s", e.Name(), b)
		}
	}
	createIn(t, rt, &policy.Policy{Resources: policy.Resources{Disk: 16 << 20}})
}

// Without volumes (airlock run), a fresh workspace is a tmpfs capped at
// the disk size; df shows the cap.
func TestWorkspaceTmpfsCapped(t *testing.T) {
	needRoot(t)
	sb := createIn(t, privateRuntime(t), &policy.Policy{Resources: policy.Resources{Disk: 16 << 20}})
	m := fill(t, sb, "/workspace/f")
	if m["enospc"] != "yes" || num(t, m, "size") > 16<<20 {
		t.Errorf("64 MiB into /workspace under disk 16MiB: want ENOSPC below 16 MiB\n%s", m["out"])
	}
	if fs := num(t, m, "fs"); fs != 16<<20 {
		t.Errorf("statfs /workspace inside: %d bytes, want the 16 MiB cap", fs)
	}
	if m["control"] != "0" {
		t.Errorf("control: 4 MiB into /workspace under disk 16MiB failed\n%s", m["out"])
	}
}

// Every tmpfs a sandbox gets has an inode cap proportional to its size:
// creating empty files (which take no pages) stops with ENOSPC; fewer
// files than the cap can be created (the control).
func TestTmpfsInodeCaps(t *testing.T) {
	needRoot(t)
	const size = 8 << 20 // 1024 inodes at one per 8 KiB
	sb := createIn(t, privateRuntime(t), &policy.Policy{Resources: policy.Resources{Disk: size, Tmp: size, Shm: size}})
	script := `d=$1; n=$2; mkdir -p $d/many || exit 9; i=0
while [ $i -lt $n ]; do : > $d/many/$i 2>/tmp/err.txt || { cat /tmp/err.txt; break; }; i=$((i+1)); done
echo made=$i; rm -rf $d/many`
	for _, dir := range []string{"/tmp", "/dev/shm", "/workspace", "/root", "/usr/local"} {
		out, _ := run(t, sb, "/bin/sh", "-c", script, "sh", dir, "3000")
		if !strings.Contains(out, "No space left on device") || strings.Contains(out, "made=3000") {
			t.Errorf("3000 empty files in %s (8 MiB, 1024 inodes): want ENOSPC first\n%s", dir, out)
		}
		out, _ = run(t, sb, "/bin/sh", "-c", script, "sh", dir, "500")
		if !strings.Contains(out, "made=500") {
			t.Errorf("control: 500 empty files in %s\n%s", dir, out)
		}
	}
}

// The kernel memory of tmpfs inodes created inside is charged to the
// sandbox's memory cgroup.
func TestTmpfsInodesChargedToSandbox(t *testing.T) {
	needRoot(t)
	sb := createIn(t, privateRuntime(t), &policy.Policy{Resources: policy.Resources{Tmp: 512 << 20}})
	usage := memoryUsage(t, sb)
	const n = 20000
	script := `mkdir /tmp/m && cd /tmp/m && i=0; while [ $i -lt $1 ]; do : > $i; i=$((i+1)); done; ls | wc -l`
	// Warm up: the shell's own pages are charged by the first run.
	run(t, sb, "/bin/sh", "-c", script+"; rm -rf /tmp/m", "sh", "10")
	before := usage()
	out, st := run(t, sb, "/bin/sh", "-c", script, "sh", strconv.Itoa(n))
	if st.Code != 0 || strings.TrimSpace(out) != strconv.Itoa(n) {
		t.Fatalf("creating %d files: exit %+v\n%s", n, st, out)
	}
	after := usage()
	// An inode and its dentry take about 1 KiB of slab; ask for a quarter.
	if grew := after - before; grew < n*256 {
		t.Errorf("%d empty files in /tmp grew the sandbox's memory cgroup by %d bytes, want at least %d", n, grew, n*256)
	} else {
		t.Logf("%d empty files: +%d bytes in the sandbox's memory cgroup (%d per file)", n, grew, grew/n)
	}
}

// memoryUsage returns a reader of the sandbox cgroup's memory usage (v1
// memory.usage_in_bytes, v2 memory.current).
func memoryUsage(t *testing.T, sb runtime.Sandbox) func() int64 {
	t.Helper()
	for _, p := range sb.Info().CgroupPaths {
		for _, f := range []string{"memory.current", "memory.usage_in_bytes"} {
			file := filepath.Join(p, f)
			if _, err := os.Stat(file); err == nil {
				return func() int64 {
					b, err := os.ReadFile(file)
					if err != nil {
						t.Fatal(err)
					}
					n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
					if err != nil {
						t.Fatal(err)
					}
					return n
				}
			}
		}
	}
	t.Fatalf("no memory cgroup among %v", sb.Info().CgroupPaths)
	return nil
}
