//go:build linux

package serve

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
)

// cowDaemon starts a daemon whose snapshots are copy-on-write, or skips.
func cowDaemon(t *testing.T, extra string) *daemon {
	t.Helper()
	d := snapDaemon(t, extra)
	if !strings.Contains(d.Logs(), "workspace snapshots: copy-on-write") {
		t.Skip("this daemon's snapshots are not copy-on-write (install xfsprogs): " + tail(d.Logs(), 20))
	}
	return d
}

// poolUsed is the bytes in use on the volume directory's filesystem.
func poolUsed(t *testing.T, dir string) int64 {
	t.Helper()
	unix.Sync()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Blocks-st.Bfree) * st.Bsize
}

// volumeLeftovers lists what of volumes, snapshot images, loop devices
// and mounts is under the daemon's data directory.
func volumeLeftovers(t *testing.T, d *daemon) []string {
	t.Helper()
	data := filepath.Join(d.dir, "data")
	var out []string
	ents, _ := os.ReadDir(filepath.Join(data, "volumes"))
	for _, e := range ents {
		out = append(out, "volumes/"+e.Name())
	}
	imgs, _ := os.ReadDir(filepath.Join(data, "volumes", ".snapshots"))
	for _, e := range imgs {
		out = append(out, "image "+e.Name())
	}
	snaps, _ := os.ReadDir(filepath.Join(data, "snapshots"))
	for _, e := range snaps {
		out = append(out, "snapshots/"+e.Name())
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for _, l := range strings.Split(string(mi), "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], data+"/") {
			out = append(out, "mount "+f[4])
		}
	}
	loops, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, p := range loops {
		if b, err := os.ReadFile(p); err == nil && strings.HasPrefix(string(b), data+"/") {
			out = append(out, "loop "+strings.TrimSpace(string(b)))
		}
	}
	sort.Strings(out)
	return out
}

// Copy-on-write: the volumes live in an XFS pool; a snapshot of a
// workspace holding 1 GiB adds almost nothing to it (a 64 MiB write, the
// control, adds its size), and so does a fork of 3, whose children hold
// the same bytes; a write in one fork is seen neither by its siblings nor
// by its parent.
func TestSnapshotCopyOnWrite(t *testing.T) {
	d := cowDaemon(t, "")
	ctx := ctxT(t)
	vols := filepath.Join(d.dir, "data", "volumes")
	var st unix.Statfs_t
	if err := unix.Statfs(vols, &st); err != nil || uint32(st.Type) != unix.XFS_SUPER_MAGIC {
		t.Fatalf("the volume directory is not on XFS: type %#x %v", st.Type, err)
	}
	if !strings.Contains(d.Logs(), "XFS pool") {
		t.Errorf("the daemon does not say where its reflinks come from:\n%s", tail(d.Logs(), 20))
	}
	sb := d.create(t, &api.CreateSandboxRequest{Resources: api.Resources{Disk: "1200M"}})
	res, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"sh", "-c", "head -c 1073741824 /dev/urandom > /workspace/blob && echo parent > /workspace/note && sync"}, TimeoutSeconds: 300})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("fill: %v %+v", err, res)
	}
	sum := d.sh(t, sb.ID, "cd /workspace && md5sum blob")
	before := poolUsed(t, vols)
	sn, err := d.c.CreateSnapshot(ctx, sb.ID, &api.CreateSnapshotRequest{Name: "big"})
	if err != nil {
		t.Fatal(err)
	}
	if !sn.CopyOnWrite || sn.Size < 1<<30 {
		t.Fatalf("snapshot: copy_on_write %v, size %d", sn.CopyOnWrite, sn.Size)
	}
	if grew := poolUsed(t, vols) - before; grew > 32<<20 {
		t.Errorf("a snapshot of 1 GiB added %d bytes to the pool, want a clone (< 32 MiB)", grew)
	}
	if _, err := os.Stat(snapFiles(d, sn)); err != nil {
		t.Errorf("the snapshot's image: %v", err)
	}
	// Control: the measure sees a real write.
	b0 := poolUsed(t, vols)
	d.sh(t, sb.ID, "head -c 67108864 /dev/urandom > /workspace/more && sync")
	if grew := poolUsed(t, vols) - b0; grew < 60<<20 {
		t.Errorf("control: 64 MiB written added only %d bytes to the pool", grew)
	}
	d.sh(t, sb.ID, "rm /workspace/more && sync")

	b1 := poolUsed(t, vols)
	fr, err := d.c.Fork(ctx, sb.ID, &api.ForkRequest{Count: 3})
	if err != nil {
		t.Fatal(err)
	}
	if !fr.Snapshot.CopyOnWrite || len(fr.Sandboxes) != 3 {
		t.Fatalf("fork: %+v", fr)
	}
	if grew := poolUsed(t, vols) - b1; grew > 96<<20 {
		t.Errorf("a fork of 3 at 1 GiB added %d bytes to the pool, want clones (< 96 MiB)", grew)
	}
	// One fork's blob read whole, the others' sizes (reading 1 GiB takes
	// seconds here).
	if got := d.sh(t, fr.Sandboxes[0].ID, "cd /workspace && md5sum blob"); got != sum {
		t.Errorf("fork 0: blob %q, want %q", got, sum)
	}
	for i, f := range fr.Sandboxes[1:] {
		if got := d.sh(t, f.ID, "stat -c %s /workspace/blob"); got != "1073741824\n" {
			t.Errorf("fork %d: blob of %q bytes", i+1, got)
		}
	}
	d.sh(t, fr.Sandboxes[0].ID, "echo child0 > /workspace/note && echo x > /workspace/only0")
	for i, f := range fr.Sandboxes[1:] {
		if got := d.sh(t, f.ID, "cat /workspace/note; ls /workspace"); got != "parent\nblob\nnote\n" {
			t.Errorf("sibling %d sees %q", i+1, got)
		}
	}
	if got := d.sh(t, sb.ID, "cat /workspace/note; ls /workspace"); got != "parent\nblob\nnote\n" {
		t.Errorf("the parent sees %q", got)
	}
	if got := d.sh(t, fr.Sandboxes[0].ID, "cat /workspace/note"); got != "child0\n" {
		t.Errorf("the fork lost its own write: %q", got)
	}
	// Changes against the clone, and a restore from it.
	ch, err := d.c.Changes(ctx, fr.Sandboxes[0].ID, "", false)
	if err != nil || strings.Join(changeSet(ch), ",") != "added only0,modified note" {
		t.Errorf("changes of the fork: %v %v", changeSet(ch), err)
	}
	if _, err := d.c.Restore(ctx, fr.Sandboxes[0].ID, fr.Snapshot.ID); err != nil {
		t.Fatal(err)
	}
	if got := d.sh(t, fr.Sandboxes[0].ID, "cat /workspace/note; ls /workspace"); got != "parent\nblob\nnote\n" {
		t.Errorf("after restore: %q", got)
	}
	// A larger disk than the snapshot's grows the clone.
	nb, err := d.c.CreateSandbox(ctx, &api.CreateSandboxRequest{FromSnapshot: "big", Resources: api.Resources{Disk: "2G"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := d.sh(t, nb.ID, "df -k /workspace | awk 'NR==2 {print ($2 > 1800000)}'"); got != "1\n" {
		t.Errorf("a 2G sandbox from a 1200M snapshot: df says %q", d.sh(t, nb.ID, "df -k /workspace"))
	}
}

// copy_on_write: off: the daemon says at start that snapshots copy (and
// how to get copy-on-write), makes no pool, and snapshots are copied
// trees (copy_on_write false) that forks and restores still use.
func TestSnapshotCopyFallback(t *testing.T) {
	d := snapDaemon(t, "copy_on_write: off")
	ctx := ctxT(t)
	if !strings.Contains(d.Logs(), "workspace snapshots: by copying files") || !strings.Contains(d.Logs(), "install xfsprogs") {
		t.Errorf("the daemon does not say that snapshots copy:\n%s", tail(d.Logs(), 20))
	}
	if _, err := os.Stat(filepath.Join(d.dir, "data", "volumes.pool")); !os.IsNotExist(err) {
		t.Errorf("copy_on_write: off made a pool: %v", err)
	}
	sb := d.create(t, nil)
	d.sh(t, sb.ID, "echo parent > /workspace/note")
	fr, err := d.c.Fork(ctx, sb.ID, &api.ForkRequest{Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	if fr.Snapshot.CopyOnWrite {
		t.Fatalf("copy_on_write: off made a copy-on-write snapshot")
	}
	if fi, err := os.Stat(filepath.Join(snapFiles(d, &fr.Snapshot), "workspace", "note")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("the copied tree: %v", err)
	}
	d.sh(t, fr.Sandboxes[0].ID, "echo child > /workspace/note")
	if got := d.sh(t, fr.Sandboxes[1].ID, "cat /workspace/note"); got != "parent\n" {
		t.Errorf("sibling sees %q", got)
	}
	if l, err := d.c.ListSnapshots(ctx); err != nil || len(l.Snapshots) != 1 || l.Snapshots[0].CopyOnWrite {
		t.Errorf("list: %+v %v", l, err)
	}
	// The configuration's value is checked.
	bad := startDaemonErr(t, "copy_on_write: sometimes")
	if !strings.Contains(bad, "copy_on_write") {
		t.Errorf("copy_on_write: sometimes: %s", bad)
	}
}

// A failure half-way leaves nothing: a sandbox from a snapshot whose
// clone cannot be shrunk to the asked disk (it passes the first check,
// resize2fs refuses) is a 400 with no volume, image, loop device, mount
// or row left, next to one that fits; a fork whose children cannot all
// start (the uid pool holds two sandboxes: the parent and one child)
// removes the child made and the fork's snapshot.
func TestSnapshotCowFailures(t *testing.T) {
	d := cowDaemon(t, fmt.Sprintf("uid_pool: {start: %d, size: %d}", hostIDPoolStart, 3*65536))
	ctx := ctxT(t)
	sb := d.create(t, &api.CreateSandboxRequest{Resources: api.Resources{Disk: "96M"}})
	d.sh(t, sb.ID, "head -c 40000000 /dev/urandom > /workspace/blob")
	sn, err := d.c.CreateSnapshot(ctx, sb.ID, &api.CreateSnapshotRequest{Name: "s"})
	if err != nil {
		t.Fatal(err)
	}
	base := volumeLeftovers(t, d)
	list0, _ := d.c.AllSandboxes(ctx, clientListAll)
	tight := fmt.Sprintf("%dK", (sn.Size>>10)+256)
	_, err = d.c.CreateSandbox(ctx, &api.CreateSandboxRequest{FromSnapshot: "s", Resources: api.Resources{Disk: tight}})
	wantCode(t, "from a snapshot onto a disk it cannot shrink to", err, http.StatusBadRequest)
	if !strings.Contains(err.Error(), "holds more than a volume of") {
		t.Errorf("not refused by the shrink (after the clone): %v", err)
	}
	if left := volumeLeftovers(t, d); strings.Join(left, "\n") != strings.Join(base, "\n") {
		t.Errorf("left behind by the failed creation:\n%s\nbefore:\n%s", strings.Join(left, "\n"), strings.Join(base, "\n"))
	}
	if list, _ := d.c.AllSandboxes(ctx, clientListAll); len(list) != len(list0) {
		t.Errorf("sandboxes: %d, before %d", len(list), len(list0))
	}
	ok, err := d.c.CreateSandbox(ctx, &api.CreateSandboxRequest{FromSnapshot: "s", Resources: api.Resources{Disk: "64M"}})
	if err != nil {
		t.Fatalf("control: a 64M disk from it: %v", err)
	}
	if got := d.sh(t, ok.ID, "stat -c %s /workspace/blob"); got != "40000000\n" {
		t.Errorf("the shrunk clone: %q", got)
	}
	if err := d.c.DeleteSandbox(ctx, ok.ID); err != nil {
		t.Fatal(err)
	}

	// The uid pool holds three: the parent and two more.
	base = volumeLeftovers(t, d)
	_, err = d.c.Fork(ctx, sb.ID, &api.ForkRequest{Count: 3})
	if err == nil {
		t.Fatal("a fork of 3 with room for 2 worked")
	}
	if left := volumeLeftovers(t, d); strings.Join(left, "\n") != strings.Join(base, "\n") {
		t.Errorf("left behind by the failed fork:\n%s\nbefore:\n%s", strings.Join(left, "\n"), strings.Join(base, "\n"))
	}
	if list, _ := d.c.AllSandboxes(ctx, clientListAll); len(list) != len(list0) {
		t.Errorf("sandboxes after the failed fork: %d, before %d", len(list), len(list0))
	}
	if l, err := d.c.ListSnapshots(ctx); err != nil || len(l.Snapshots) != 1 {
		t.Errorf("snapshots after the failed fork: %+v %v", l, err)
	}
	fr, err := d.c.Fork(ctx, sb.ID, &api.ForkRequest{Count: 2})
	if err != nil {
		t.Fatalf("control: a fork of 2: %v", err)
	}
	if len(fr.Sandboxes) != 2 {
		t.Fatalf("fork of 2: %+v", fr)
	}
}

var clientListAll = client.ListOptions{}

// startDaemonErr runs `airlock serve` with extra configuration, expects
// it to fail at start (at most 30 s) and returns its output.
func startDaemonErr(t *testing.T, extra string) string {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.yaml")
	conf := "socket: " + filepath.Join(dir, "s.sock") + "\ndata_dir: " + filepath.Join(dir, "data") + "\nstate_dir: " + filepath.Join(dir, "state") + "\n" + extra + "\n"
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, airlockBin, "serve", "--config", cfg).CombinedOutput()
	if err == nil {
		t.Errorf("serve with %q started", extra)
	}
	return string(out)
}

// A fork carries its parent's network policy as it is now: a fork made
// before the parent's policy change keeps the policy of creation (its
// request to the host's service is refused), one made after it gets the
// change (the request goes through; the child's policy reads the same).
func TestSnapshotForkNetwork(t *testing.T) {
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "host service")
	}))
	defer svc.Close()
	port := svc.Listener.Addr().(*net.TCPAddr).Port
	d := snapDaemon(t, fmt.Sprintf("egress_host_ports: [%d]\n", port))
	ctx := ctxT(t)
	name := fmt.Sprintf("host.airlock.internal:%d", port)
	sb := d.create(t, &api.CreateSandboxRequest{Policy: "network:\n  mode: allowlist\n  allow: [example.invalid]\n"})
	get := "curl -s -m 10 -o /dev/null -w '%{http_code}' http://" + name + "/ || true"
	before, err := d.c.Fork(ctx, sb.ID, &api.ForkRequest{Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.SetNetworkPolicy(ctx, sb.ID, api.NetworkPolicy{Mode: "allowlist", Allow: []string{name}}); err != nil {
		t.Fatal(err)
	}
	after, err := d.c.Fork(ctx, sb.ID, &api.ForkRequest{Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got := d.sh(t, after.Sandboxes[0].ID, get); got != "200" {
		t.Errorf("the fork made after the change: HTTP %q, want 200", got)
	}
	if got := d.sh(t, before.Sandboxes[0].ID, get); got == "200" {
		t.Errorf("the fork made before the change reached the service")
	}
	np, err := d.c.NetworkPolicy(ctx, after.Sandboxes[0].ID)
	if err != nil || np.Mode != "allowlist" || strings.Join(np.Allow, ",") != name {
		t.Errorf("the fork's network policy: %+v %v", np, err)
	}
	// It survives a restart (stored with the child).
	d.restart(syscall.SIGTERM)
	if np, err := d.c.NetworkPolicy(ctxT(t), after.Sandboxes[0].ID); err != nil || strings.Join(np.Allow, ",") != name {
		t.Errorf("the fork's network policy after a restart: %+v %v", np, err)
	}
}

// A daemon restarted with copy_on_write: off keeps the copy-on-write
// snapshots made before: listed, and a sandbox made from one gets a copy
// of it (read from a read-only mount of its image); new snapshots copy.
func TestSnapshotCowThenOff(t *testing.T) {
	d := cowDaemon(t, "")
	ctx := ctxT(t)
	sb := d.create(t, nil)
	d.sh(t, sb.ID, "echo kept > /workspace/k && mkdir /workspace/d && ln -s ../k /workspace/d/l")
	sn, err := d.c.CreateSnapshot(ctx, sb.ID, &api.CreateSnapshotRequest{Name: "before"})
	if err != nil || !sn.CopyOnWrite {
		t.Fatalf("snapshot: %+v %v", sn, err)
	}
	want := wsState(t, d.c, sb.ID)
	if err := d.c.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	d.stop(syscall.SIGTERM)
	conf, err := os.ReadFile(d.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(d.cfg, append(conf, []byte("copy_on_write: off\n")...), 0o600); err != nil {
		t.Fatal(err)
	}
	d.start()
	ctx = ctxT(t)
	if !strings.Contains(d.Logs(), "workspace snapshots: by copying files") {
		t.Fatalf("the restarted daemon does not copy:\n%s", tail(d.Logs(), 20))
	}
	got, err := d.c.GetSnapshot(ctx, "before")
	if err != nil || !got.CopyOnWrite {
		t.Fatalf("the snapshot after the restart: %+v %v", got, err)
	}
	nb, err := d.c.CreateSandbox(ctx, &api.CreateSandboxRequest{FromSnapshot: "before"})
	if err != nil {
		t.Fatal(err)
	}
	if st := wsState(t, d.c, nb.ID); st != want {
		t.Errorf("from the snapshot by copy:\n%s\nwant:\n%s", st, want)
	}
	n2, err := d.c.CreateSnapshot(ctx, nb.ID, nil)
	if err != nil || n2.CopyOnWrite {
		t.Errorf("a new snapshot with copy_on_write off: %+v %v", n2, err)
	}
	d.sh(t, nb.ID, "rm -r /workspace/d")
	if _, err := d.c.Restore(ctx, nb.ID, "before"); err != nil {
		t.Fatal(err)
	}
	if st := wsState(t, d.c, nb.ID); st != want {
		t.Errorf("restored:\n%s\nwant:\n%s", st, want)
	}
}

// A copy-on-write clone frees what the source held only for a file deleted
// while open (its workspace's ext4 keeps no orphan list): a fork had the
// 64 MiB of such a file in use for good. The clone is checked, and comes
// without the lost+found the check makes, whatever its size; the control
// is the kept file, there whole.
func TestSnapshotCloneFreesOrphans(t *testing.T) {
	d := cowDaemon(t, "")
	ctx := ctxT(t)
	sb := d.create(t, nil)
	if _, err := d.c.StartProcess(ctx, sb.ID, &api.ExecRequest{Argv: []string{"sh", "-c",
		"head -c 67108864 /dev/urandom > /workspace/tmp && echo keep > /workspace/keep && exec 3</workspace/tmp && rm /workspace/tmp && echo ready > /workspace/ready && exec sleep 600"}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for d.sh(t, sb.ID, "cat /workspace/ready 2>/dev/null || true") != "ready\n" && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	fr, err := d.c.Fork(ctx, sb.ID, &api.ForkRequest{Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	other, err := d.c.CreateSandbox(ctx, &api.CreateSandboxRequest{FromSnapshot: fr.Snapshot.ID, Resources: api.Resources{Disk: "2G"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{fr.Sandboxes[0].ID, other.ID} {
		out := d.sh(t, id, "cat /workspace/keep; ls -A /workspace | tr '\\n' ' '; echo; df -k /workspace | awk 'NR==2{print $3}'")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 3 || lines[0] != "keep" || strings.Contains(lines[1], "lost+found") || !inRange(lines[2], 0, 8<<10) {
			t.Errorf("clone %s: keep, entries, KiB used = %q; want keep, no lost+found, under 8 MiB used", id, lines)
		}
	}
}

// Snapshots copied file by file (the root layer always; the workspace with
// copy_on_write: off) keep hard links and user extended attributes: a fork
// had two files for one with two names, and no user.* attribute. The
// control: a file with one name is a file of its own.
func TestSnapshotCopyKeepsLinksAndXattrs(t *testing.T) {
	d := snapDaemon(t, "copy_on_write: off")
	ctx := ctxT(t)
	sb := d.create(t, nil)
	const setup = `set -e
for dir in /workspace /usr/local/lib/t; do
  mkdir -p $dir/sub && head -c 100000 /dev/urandom > $dir/a && ln $dir/a $dir/sub/b && echo one > $dir/single
  python3 -c "import os,sys; os.setxattr(sys.argv[1], 'user.k', b'v')" $dir/a
done`
	d.sh(t, sb.ID, setup)
	fr, err := d.c.Fork(ctx, sb.ID, &api.ForkRequest{Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	const check = `for dir in /workspace /usr/local/lib/t; do
  echo $(stat -c '%h' $dir/a) $( [ $(stat -c %i $dir/a) = $(stat -c %i $dir/sub/b) ] && echo same || echo split ) $(stat -c '%h' $dir/single) $(python3 -c "import os,sys; print(os.getxattr(sys.argv[1], 'user.k').decode())" $dir/sub/b)
done`
	want := "2 same 1 v\n2 same 1 v\n"
	if got := d.sh(t, sb.ID, check); got != want {
		t.Fatalf("the source: %q", got)
	}
	if got := d.sh(t, fr.Sandboxes[0].ID, check); got != want {
		t.Errorf("the fork: %q, want %q (links, shared inode, a single file's links, user.k)", got, want)
	}
}
