//go:build linux

package serve

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
)

// R5 for the daemon: a sandbox's workspace is capped at its disk size on
// the daemon's data disk (a volume of its own): writing past the cap fails
// with ENOSPC inside, the host holds no more than the cap for it, df
// inside shows the cap rather than the host disk, and deleting the
// sandbox frees it. A write within the cap works (the control).
func TestDiskQuota(t *testing.T) {
	d := startDaemon(t, "")
	if strings.Contains(d.Logs(), "workspaces are tmpfs") {
		t.Skip("this host cannot make loop volumes (see the daemon's warning); workspaces are tmpfs")
	}
	sb := d.create(t, &api.CreateSandboxRequest{Resources: api.Resources{Disk: "16M"}})
	res, err := d.c.Exec(ctxT(t), sb.ID, &api.ExecRequest{Argv: []string{"sh", "-c",
		`dd if=/dev/zero of=/workspace/f bs=1M count=64 2>&1; echo size=$(stat -c %s /workspace/f); echo fs=$(( $(stat -f -c '%b * %S' /workspace) ))`}})
	if err != nil {
		t.Fatal(err)
	}
	out := string(res.Stdout)
	if !strings.Contains(out, "No space left on device") {
		t.Errorf("64 MiB into /workspace under disk 16M: want ENOSPC\n%s", out)
	}
	m := map[string]int64{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			m[k], _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if m["size"] > 16<<20 || m["size"] == 0 {
		t.Errorf("the file grew to %d bytes under a 16 MiB cap", m["size"])
	}
	if m["fs"] > 16<<20 || m["fs"] < 12<<20 {
		t.Errorf("df /workspace inside: %d bytes, want the sandbox's 16 MiB cap, not the host disk", m["fs"])
	}
	// Host side: the volume holds at most the cap.
	img := filepath.Join(d.dir, "data", "volumes", strings.TrimPrefix(sb.ID, "sb-")+".img")
	var st syscall.Stat_t
	if err := syscall.Stat(img, &st); err != nil {
		t.Fatalf("the sandbox's volume on the data disk: %v", err)
	}
	if st.Blocks*512 > 17<<20 {
		t.Errorf("the sandbox holds %d bytes of the data disk under a 16 MiB cap", st.Blocks*512)
	}
	// Control: within the cap, writing works.
	d.sh(t, sb.ID, "rm /workspace/f && dd if=/dev/zero of=/workspace/g bs=1M count=4 2>/dev/null")

	if err := d.c.DeleteSandbox(ctxT(t), sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(img); !os.IsNotExist(err) {
		t.Errorf("the volume is still on the data disk after delete (%v)", err)
	}
}

// With disk_quota: tmpfs (what auto falls back to on a host without loop
// volumes) the workspace is a tmpfs of the disk size inside the sandbox:
// capped the same, nothing on the data disk.
func TestDiskQuotaTmpfs(t *testing.T) {
	d := startDaemon(t, "disk_quota: tmpfs")
	sb := d.create(t, &api.CreateSandboxRequest{Resources: api.Resources{Disk: "16M"}})
	res, err := d.c.Exec(ctxT(t), sb.ID, &api.ExecRequest{Argv: []string{"sh", "-c",
		`dd if=/dev/zero of=/workspace/f bs=1M count=64 2>&1; echo fs=$(( $(stat -f -c '%b * %S' /workspace) ))`}})
	if err != nil {
		t.Fatal(err)
	}
	if out := string(res.Stdout); !strings.Contains(out, "No space left on device") || !strings.Contains(out, "fs=16777216\n") {
		t.Errorf("64 MiB into /workspace under disk 16M (tmpfs): want ENOSPC and df showing 16 MiB\n%s", out)
	}
	d.sh(t, sb.ID, "rm /workspace/f && dd if=/dev/zero of=/workspace/g bs=1M count=4 2>/dev/null")
	if _, err := os.Stat(filepath.Join(d.dir, "data", "volumes")); !os.IsNotExist(err) {
		t.Errorf("disk_quota: tmpfs made a volume directory (%v)", err)
	}
}

// A sandbox whose disk cap does not fit beside the reserve (disk_reserve)
// is refused with 429 and a message saying why; the default reserve lets
// the same request through (the control). A disk the data disk could never
// hold is a 400.
func TestDiskReserve(t *testing.T) {
	d := startDaemon(t, "")
	if strings.Contains(d.Logs(), "workspaces are tmpfs") {
		t.Skip("this host cannot make loop volumes (see the daemon's warning); workspaces are tmpfs")
	}
	d.create(t, &api.CreateSandboxRequest{Resources: api.Resources{Disk: "64M"}})
	// A disk larger than the data disk could ever hold is the caller's
	// mistake: a 400 saying so, not a 429 to retry; nothing is left.
	before := d.stateEntries()
	_, err := d.c.CreateSandbox(ctxT(t), &api.CreateSandboxRequest{Resources: api.Resources{Disk: "1P"}})
	wantCode(t, "create with a disk larger than the data disk", err, 400)
	if err == nil || !strings.Contains(err.Error(), "can never fit") || strings.Contains(err.Error(), d.dir) {
		t.Errorf("refusal of a 1P disk: %v", err)
	}
	if after := d.stateEntries(); len(after) != len(before) {
		t.Errorf("a refused sandbox was left behind: %v -> %v", before, after)
	}

	full := startDaemon(t, "disk_reserve: 1P")
	_, err = full.c.CreateSandbox(ctxT(t), &api.CreateSandboxRequest{Resources: api.Resources{Disk: "64M"}})
	wantCode(t, "create with the data disk's space all in reserve", err, 429)
	if !strings.Contains(err.Error(), "kept in reserve") {
		t.Errorf("refusal does not say why: %v", err)
	}
	// Any caller (tenants too) reads it: no host path in it.
	if strings.Contains(err.Error(), full.dir) || strings.Contains(err.Error(), "/volumes") {
		t.Errorf("refusal names a host path: %v", err)
	}
	list, err := full.c.AllSandboxes(ctxT(t), client.ListOptions{})
	if err != nil || len(list) != 0 || len(full.stateEntries()) != 0 {
		t.Errorf("a refused sandbox was left behind: %v %v %v", list, err, full.stateEntries())
	}
}

// A disk_quota the daemon cannot honour stops it at start, naming the key
// and why (fail closed: loop volumes asked for and not possible).
func TestDiskQuotaConfig(t *testing.T) {
	need(t)
	dir := t.TempDir()
	// A volume directory others could write to: loop volumes refuse it.
	if err := os.MkdirAll(filepath.Join(dir, "data", "volumes"), 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Join(dir, "data", "volumes"), 0o777)
	for _, c := range []struct{ conf, want string }{
		{"disk_quota: zfs", "want auto, loop or tmpfs"},
		{"disk_reserve: lots", "disk_reserve: invalid size"},
		{"disk_quota: loop", "disk_quota: disk quota in " + filepath.Join(dir, "data", "volumes")},
	} {
		cfg := filepath.Join(dir, "c.yaml")
		conf := "socket: " + filepath.Join(dir, "s.sock") + "\ndata_dir: " + filepath.Join(dir, "data") + "\nstate_dir: " + filepath.Join(dir, "state") + "\n" + c.conf + "\n"
		if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := exec.CommandContext(ctx, airlockBin, "serve", "--config", cfg).CombinedOutput()
		cancel()
		if err == nil || !strings.Contains(string(out), c.want) {
			t.Errorf("serve with %q: err %v, want a start failure naming %s\n%s", c.conf, err, c.want, out)
		}
	}
}
