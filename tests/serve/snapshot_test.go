//go:build linux

package serve

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/internal/testdaemon"
)

// snapDaemon starts a daemon whose workspaces are volumes (snapshots need
// them), or skips.
func snapDaemon(t *testing.T, extra string) *daemon {
	t.Helper()
	d := startDaemon(t, extra)
	if strings.Contains(d.Logs(), "workspaces are tmpfs") {
		t.Skip("this host cannot make loop volumes (see the daemon's warning); snapshots need them")
	}
	return d
}

// snapFiles is where a snapshot's files are: its image in the volume
// directory (copy-on-write) or its copied tree's directory.
func snapFiles(d *daemon, sn *api.Snapshot) string {
	if sn.CopyOnWrite {
		return filepath.Join(d.dir, "data", "volumes", ".snapshots", sn.ID+".img")
	}
	return filepath.Join(d.dir, "data", "snapshots", sn.ID)
}

// wsState lists every entry of /workspace: path, type, mode, size, link
// target, and a digest of each file's bytes.
func wsState(t *testing.T, c *client.Client, id string) string {
	t.Helper()
	res, err := c.Exec(ctxT(t), id, &api.ExecRequest{Argv: []string{"sh", "-c",
		`cd /workspace && find . -mindepth 1 -printf '%p %y %m %s %l\n' | LC_ALL=C sort && find . -type f -exec sha256sum {} + | LC_ALL=C sort`}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("list /workspace: %v %+v", err, res)
	}
	return string(res.Stdout)
}

// changeSet turns a changes answer into "kind path" lines.
func changeSet(ch *api.Changes) []string {
	var out []string
	for _, c := range ch.Changes {
		out = append(out, c.Kind+" "+c.Path)
	}
	sort.Strings(out)
	return out
}

// Snapshot, change (modify, delete, chmod, relink, add), list the changes,
// restore: the workspace is byte-identical to the snapshot, the sandbox
// keeps its id, and its processes were stopped. A name in use is a 409
// next to a fresh name's 201; an unknown snapshot is a 404.
func TestSnapshotRestore(t *testing.T) {
	d := snapDaemon(t, "")
	ctx := ctxT(t)
	sb := d.create(t, &api.CreateSandboxRequest{Labels: map[string]string{"t": "restore"}})
	d.sh(t, sb.ID, `cd /workspace && echo hello > a.txt && mkdir -p dir/sub && head -c 300000 /dev/urandom > dir/b.bin &&
		echo x > x && chmod 600 x && ln -s a.txt link && echo keep > dir/sub/k`)
	before := wsState(t, d.c, sb.ID)

	// Since creation: everything is added.
	ch, err := d.c.Changes(ctx, sb.ID, "", false)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"added a.txt", "added dir/", "added dir/b.bin", "added dir/sub/", "added dir/sub/k", "added link", "added x"}
	if got := changeSet(ch); !reflect.DeepEqual(got, want) {
		t.Errorf("changes since creation = %q, want %q", got, want)
	}

	sn, err := d.c.CreateSnapshot(ctx, sb.ID, &api.CreateSnapshotRequest{Name: "s1", Labels: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	if sn.Name != "s1" || sn.SandboxID != sb.ID || sn.Processes || !sn.Root || !sn.Workspace || sn.Size < 300000 || sn.Labels["k"] != "v" {
		t.Errorf("snapshot = %+v", sn)
	}
	// The sandbox runs on after the snapshot (it was frozen, then thawed).
	d.sh(t, sb.ID, "true")

	_, err = d.c.CreateSnapshot(ctx, sb.ID, &api.CreateSnapshotRequest{Name: "s1"})
	wantCode(t, "snapshot name in use", err, http.StatusConflict)
	// The daemon's label keys are its own: airlock.fork made a named
	// snapshot one the quota's collector deleted (the control: "k" above).
	for _, k := range []string{"airlock.fork", "airlock.anything"} {
		_, err = d.c.CreateSnapshot(ctx, sb.ID, &api.CreateSnapshotRequest{Name: "precious", Labels: map[string]string{k: "mine"}})
		wantCode(t, "snapshot label "+k, err, http.StatusBadRequest)
	}
	_, err = d.c.CreateSnapshot(ctx, sb.ID, &api.CreateSnapshotRequest{Name: ".x"})
	if wantCode(t, "snapshot name .x", err, http.StatusBadRequest); err == nil || !strings.Contains(err.Error(), "starting with a letter or digit") {
		t.Errorf("a name starting with '.': %v, want the rule said", err)
	}
	if _, err := d.c.CreateSnapshot(ctx, sb.ID, &api.CreateSnapshotRequest{Name: "s2"}); err != nil {
		t.Fatalf("control: a fresh name: %v", err)
	}
	_, err = d.c.CreateSnapshot(ctx, sb.ID, &api.CreateSnapshotRequest{Name: "bad/name"})
	wantCode(t, "bad snapshot name", err, http.StatusBadRequest)

	// A process that must not survive the restore.
	p, err := d.c.StartProcess(ctx, sb.ID, &api.ExecRequest{Argv: []string{"sleep", "600"}})
	if err != nil {
		t.Fatal(err)
	}
	d.sh(t, sb.ID, `cd /workspace && echo changed > a.txt && rm dir/b.bin && chmod 755 x && ln -sfn x link &&
		echo new > new.txt && mkdir newdir && rm -r dir/sub`)
	ch, err = d.c.Changes(ctx, sb.ID, "s1", true)
	if err != nil {
		t.Fatal(err)
	}
	want = []string{"added new.txt", "added newdir/", "deleted dir/b.bin", "deleted dir/sub/", "mode x", "modified a.txt", "symlink link"}
	if got := changeSet(ch); !reflect.DeepEqual(got, want) {
		t.Errorf("changes since s1 = %q, want %q", got, want)
	}
	for _, c := range ch.Changes {
		if c.Path == "a.txt" && !strings.Contains(c.Diff, "-hello") {
			t.Errorf("a.txt: no diff: %+v", c)
		}
		if c.Path == "x" && (c.OldMode != "0600" || c.NewMode != "0755") {
			t.Errorf("x: mode change %+v", c)
		}
	}

	_, err = d.c.Restore(ctx, sb.ID, "no-such-snapshot")
	wantCode(t, "restore of an unknown snapshot", err, http.StatusNotFound)
	after, err := d.c.Restore(ctx, sb.ID, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if after.ID != sb.ID || after.State != api.StateRunning || after.Labels["t"] != "restore" {
		t.Errorf("restored sandbox = %+v", after)
	}
	if got := wsState(t, d.c, sb.ID); got != before {
		t.Errorf("after restore:\n%s\nwant (the snapshot's state):\n%s", got, before)
	}
	pr, err := d.c.WaitProcess(ctx, sb.ID, p.ID, 30*time.Second)
	if err != nil || pr.State == api.ProcessRunning {
		t.Errorf("the sandbox's process after restore: %+v %v (want it stopped)", pr, err)
	}
	ch, err = d.c.Changes(ctx, sb.ID, "", false)
	if err != nil || len(ch.Changes) != 0 || ch.Since != sn.ID {
		t.Errorf("changes after restore = %+v %v, want none since %s", ch, err, sn.ID)
	}
	_, err = d.c.GetSnapshot(ctx, "nope")
	wantCode(t, "get unknown snapshot", err, http.StatusNotFound)
	if g, err := d.c.GetSnapshot(ctx, sn.ID); err != nil || g.Name != "s1" {
		t.Errorf("get by id: %+v %v", g, err)
	}
}

// Fork 3: each fork starts with the parent's workspace, and a write in one
// is seen by none of its siblings nor the parent (nor a parent's write by
// the forks). A sandbox made from the snapshot has it too, and its changes
// are counted from it.
func TestSnapshotFork(t *testing.T) {
	d := snapDaemon(t, "max_sandboxes: 6\n")
	ctx := ctxT(t)
	parent := d.create(t, nil)
	d.sh(t, parent.ID, "echo base > /workspace/f && mkdir /workspace/d && echo 1 > /workspace/d/one")
	res, err := d.c.Fork(ctx, parent.ID, &api.ForkRequest{Count: 3, Labels: map[string]string{"k": "fork"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Sandboxes) != 3 || res.Snapshot.Labels["airlock.fork"] != parent.ID {
		t.Fatalf("fork = %+v", res)
	}
	for i, f := range res.Sandboxes {
		if f.ID == parent.ID || f.Labels["airlock.fork.parent"] != parent.ID || f.Labels["k"] != "fork" {
			t.Errorf("fork %d = %+v", i, f)
		}
		if got := d.sh(t, f.ID, "cat /workspace/f /workspace/d/one"); got != "base\n1\n" {
			t.Errorf("fork %d sees %q", i, got)
		}
	}
	f0, f1, f2 := res.Sandboxes[0].ID, res.Sandboxes[1].ID, res.Sandboxes[2].ID
	d.sh(t, f0, "echo mine > /workspace/f && echo new > /workspace/only0")
	d.sh(t, parent.ID, "echo parent > /workspace/d/one")
	for _, id := range []string{f1, f2} {
		if got := d.sh(t, id, "cat /workspace/f /workspace/d/one; ls /workspace"); got != "base\n1\nd\nf\n" {
			t.Errorf("sibling %s sees %q", id, got)
		}
	}
	if got := d.sh(t, parent.ID, "cat /workspace/f; ls /workspace"); got != "base\nd\nf\n" {
		t.Errorf("parent sees %q", got)
	}
	ch, err := d.c.Changes(ctx, f0, "", false)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := changeSet(ch), []string{"added only0", "modified f"}; !reflect.DeepEqual(got, want) || ch.Since != res.Snapshot.ID {
		t.Errorf("fork 0 changes = %q since %s, want %q since %s", got, ch.Since, want, res.Snapshot.ID)
	}

	// From the snapshot, by name.
	sb, err := d.c.CreateSandbox(ctx, &api.CreateSandboxRequest{FromSnapshot: res.Snapshot.Name})
	if err != nil {
		t.Fatal(err)
	}
	if got := d.sh(t, sb.ID, "cat /workspace/f /workspace/d/one"); got != "base\n1\n" {
		t.Errorf("from snapshot: %q", got)
	}
	_, err = d.c.CreateSandbox(ctx, &api.CreateSandboxRequest{FromSnapshot: "snap-0000000000000000"})
	wantCode(t, "from an unknown snapshot", err, http.StatusNotFound)

	// 5 live of 6: a fork of 2 is past admission, and makes nothing.
	before, _ := d.c.AllSandboxes(ctx, client.ListOptions{})
	snapsBefore, _ := d.c.ListSnapshots(ctx)
	_, err = d.c.Fork(ctx, parent.ID, &api.ForkRequest{Count: 2})
	wantCode(t, "fork past max_sandboxes", err, http.StatusTooManyRequests)
	after, _ := d.c.AllSandboxes(ctx, client.ListOptions{})
	snapsAfter, _ := d.c.ListSnapshots(ctx)
	if len(after) != len(before) || len(snapsAfter.Snapshots) != len(snapsBefore.Snapshots) {
		t.Errorf("a refused fork left %d sandboxes (was %d) and %d snapshots (was %d)", len(after), len(before), len(snapsAfter.Snapshots), len(snapsBefore.Snapshots))
	}
	// Control: a fork of 1 fits.
	if r, err := d.c.Fork(ctx, parent.ID, &api.ForkRequest{Count: 1}); err != nil || len(r.Sandboxes) != 1 {
		t.Fatalf("control fork of 1: %+v %v", r, err)
	}
	_, err = d.c.Fork(ctx, parent.ID, &api.ForkRequest{Count: 65})
	wantCode(t, "fork of 65", err, http.StatusBadRequest)
}

// Snapshots survive a daemon restart (listed, usable), outlive their
// sandbox, and are deleted with DELETE (files too).
func TestSnapshotRestart(t *testing.T) {
	d := snapDaemon(t, "")
	ctx := ctxT(t)
	sb := d.create(t, nil)
	d.sh(t, sb.ID, "echo persisted > /workspace/p")
	sn, err := d.c.CreateSnapshot(ctx, sb.ID, &api.CreateSnapshotRequest{Name: "keep"})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.c.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	// A sandbox that lives across the restart (re-adopted).
	live := d.create(t, nil)
	d.sh(t, live.ID, "echo v1 > /workspace/v")
	liveSnap, err := d.c.CreateSnapshot(ctx, live.ID, &api.CreateSnapshotRequest{Name: "live-v1"})
	if err != nil {
		t.Fatal(err)
	}
	d.restart(syscall.SIGTERM)
	ctx = ctxT(t)
	d.sh(t, live.ID, "echo v2 > /workspace/v")
	if ch, err := d.c.Changes(ctx, live.ID, "live-v1", false); err != nil || len(changeSet(ch)) != 1 || changeSet(ch)[0] != "modified v" {
		t.Errorf("changes of the re-adopted sandbox: %+v %v", ch, err)
	}
	if _, err := d.c.Restore(ctx, live.ID, liveSnap.ID); err != nil {
		t.Fatal(err)
	}
	if got := d.sh(t, live.ID, "cat /workspace/v"); got != "v1\n" {
		t.Errorf("re-adopted sandbox after restore: %q", got)
	}
	if err := d.c.DeleteSnapshot(ctx, liveSnap.ID); err != nil {
		t.Fatal(err)
	}
	l, err := d.c.ListSnapshots(ctx)
	if err != nil || len(l.Snapshots) != 1 || l.Snapshots[0].ID != sn.ID || l.Used != sn.Size {
		t.Fatalf("snapshots after restart: %+v %v", l, err)
	}
	nb, err := d.c.CreateSandbox(ctx, &api.CreateSandboxRequest{FromSnapshot: "keep"})
	if err != nil {
		t.Fatal(err)
	}
	if got := d.sh(t, nb.ID, "cat /workspace/p"); got != "persisted\n" {
		t.Errorf("from the snapshot after restart: %q", got)
	}
	dir := snapFiles(d, sn)
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("snapshot files: %v", err)
	}
	if err := d.c.DeleteSnapshot(ctx, "keep"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("snapshot files after delete: %v", err)
	}
	_, err = d.c.GetSnapshot(ctx, sn.ID)
	wantCode(t, "deleted snapshot", err, http.StatusNotFound)
	// The sandbox made from it keeps its copy.
	if got := d.sh(t, nb.ID, "cat /workspace/p"); got != "persisted\n" {
		t.Errorf("after the snapshot's deletion: %q", got)
	}
}

// snapshot_quota: a snapshot past it is a 409 while one within it works;
// fork snapshots no live sandbox uses are collected to make room, named
// ones never.
func TestSnapshotQuota(t *testing.T) {
	d := snapDaemon(t, "snapshot_quota: 1M\n")
	ctx := ctxT(t)
	sb := d.create(t, nil)
	d.sh(t, sb.ID, "head -c 600000 /dev/urandom > /workspace/big")
	if _, err := d.c.CreateSnapshot(ctx, sb.ID, &api.CreateSnapshotRequest{Name: "one"}); err != nil {
		t.Fatalf("within the quota: %v", err)
	}
	_, err := d.c.CreateSnapshot(ctx, sb.ID, &api.CreateSnapshotRequest{Name: "two"})
	wantCode(t, "past the quota", err, http.StatusConflict)
	if err := d.c.DeleteSnapshot(ctx, "one"); err != nil {
		t.Fatal(err)
	}
	// A fork's snapshot, then its sandbox gone: collected for a named one.
	fr, err := d.c.Fork(ctx, sb.ID, &api.ForkRequest{Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.c.CreateSnapshot(ctx, sb.ID, &api.CreateSnapshotRequest{Name: "two"})
	wantCode(t, "past the quota, the fork snapshot in use", err, http.StatusConflict)
	if err := d.c.DeleteSandbox(ctx, fr.Sandboxes[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.CreateSnapshot(ctx, sb.ID, &api.CreateSnapshotRequest{Name: "two"}); err != nil {
		t.Fatalf("with the unused fork snapshot collected: %v", err)
	}
	_, err = d.c.GetSnapshot(ctx, fr.Snapshot.ID)
	wantCode(t, "the collected fork snapshot", err, http.StatusNotFound)

	// A copy copies hard links once per name: a 600 kB file with two
	// more links needs 1.8 MB, refused before any copy, under a quota
	// with room for one. A clone keeps them as links: it holds 600 kB.
	if err := d.c.DeleteSnapshot(ctx, "two"); err != nil {
		t.Fatal(err)
	}
	d.sh(t, sb.ID, "ln /workspace/big /workspace/l1 && ln /workspace/big /workspace/l2")
	links, err := d.c.CreateSnapshot(ctx, sb.ID, &api.CreateSnapshotRequest{Name: "links"})
	if err == nil && links.CopyOnWrite {
		if links.Size > 1<<20 {
			t.Errorf("a clone counts %d bytes for one 600 kB file with three names", links.Size)
		}
		if err := d.c.DeleteSnapshot(ctx, "links"); err != nil {
			t.Fatal(err)
		}
	} else {
		wantCode(t, "hard links past the quota", err, http.StatusConflict)
	}
	d.sh(t, sb.ID, "rm /workspace/l1 /workspace/l2")
	links, err = d.c.CreateSnapshot(ctx, sb.ID, &api.CreateSnapshotRequest{Name: "links"})
	if err != nil {
		t.Fatalf("control: one link: %v", err)
	}
	// .empty and "links"' directory (its copy, or beside a clone its root
	// layer)
	want := 2
	if links.CopyOnWrite {
		if imgs, _ := os.ReadDir(filepath.Join(d.dir, "data", "volumes", ".snapshots")); len(imgs) != 1 {
			t.Errorf("snapshot images left: %v", imgs)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(d.dir, "data", "snapshots")); len(ents) != want {
		t.Errorf("snapshot directories left: %v", ents)
	}
}

// Another tenant's snapshot is a 404 (get, restore, create from it) next
// to the owner's success; a snapshot of another image cannot be restored
// into a sandbox (400) next to a same-image restore.
func TestSnapshotTenantsAndImages(t *testing.T) {
	img := filepath.Join(t.TempDir(), "img")
	if err := os.MkdirAll(filepath.Join(img, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Dir(img), 0o755)
	addr := testdaemon.FreeAddr(t)
	d := snapDaemon(t, "listen: "+addr+"\nimages:\n  empty: "+img+"\n")
	ctx := ctxT(t)
	key := func(name, tenant string) *client.Client {
		t.Helper()
		k, err := d.c.CreateTenantKey(ctx, name, tenant)
		if err != nil {
			t.Fatal(err)
		}
		c, _ := client.New("http://"+addr, k.Key)
		return c
	}
	acme, globex := key("a", "acme"), key("g", "globex")
	sa, err := acme.CreateSandbox(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	sg, err := globex.CreateSandbox(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	sn, err := acme.CreateSnapshot(ctx, sa.ID, &api.CreateSnapshotRequest{Name: "mine"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = globex.GetSnapshot(ctx, sn.ID)
	wantCode(t, "another tenant's snapshot", err, http.StatusNotFound)
	_, err = globex.Restore(ctx, sg.ID, sn.ID)
	wantCode(t, "restore from another tenant's snapshot", err, http.StatusNotFound)
	_, err = globex.CreateSandbox(ctx, &api.CreateSandboxRequest{FromSnapshot: sn.ID})
	wantCode(t, "create from another tenant's snapshot", err, http.StatusNotFound)
	if l, err := globex.ListSnapshots(ctx); err != nil || len(l.Snapshots) != 0 {
		t.Errorf("globex lists %+v %v", l, err)
	}
	_, err = globex.CreateSnapshot(ctx, sa.ID, nil)
	wantCode(t, "snapshot of another tenant's sandbox", err, http.StatusNotFound)
	// The same name in another tenant is its own.
	if _, err := globex.CreateSnapshot(ctx, sg.ID, &api.CreateSnapshotRequest{Name: "mine"}); err != nil {
		t.Errorf("globex's own \"mine\": %v", err)
	}
	if _, err := acme.GetSnapshot(ctx, "mine"); err != nil {
		t.Errorf("control: the owner gets it: %v", err)
	}
	if _, err := acme.Restore(ctx, sa.ID, "mine"); err != nil {
		t.Errorf("control: the owner restores it: %v", err)
	}
	// An operator's snapshot and fork of acme's sandbox are acme's: acme
	// sees and uses them, globex does not.
	osn, err := d.c.CreateSnapshot(ctx, sa.ID, &api.CreateSnapshotRequest{Name: "by-operator"})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := acme.GetSnapshot(ctx, osn.ID); err != nil || got.Name != "by-operator" {
		t.Errorf("acme gets the operator's snapshot of its sandbox: %+v %v", got, err)
	}
	_, err = globex.GetSnapshot(ctx, osn.ID)
	wantCode(t, "another tenant's snapshot taken by an operator", err, http.StatusNotFound)
	fr, err := d.c.Fork(ctx, sa.ID, &api.ForkRequest{Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := acme.GetSandbox(ctx, fr.Sandboxes[0].ID); err != nil {
		t.Errorf("acme gets the fork an operator made of its sandbox: %v", err)
	}
	if _, err := acme.GetSnapshot(ctx, fr.Snapshot.ID); err != nil {
		t.Errorf("acme gets the fork's snapshot: %v", err)
	}
	_, err = globex.GetSandbox(ctx, fr.Sandboxes[0].ID)
	wantCode(t, "another tenant's fork", err, http.StatusNotFound)

	// Another image.
	si := d.create(t, &api.CreateSandboxRequest{Image: "empty"})
	isn, err := d.c.CreateSnapshot(ctx, si.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	plain := d.create(t, nil)
	_, err = d.c.Restore(ctx, plain.ID, isn.ID)
	wantCode(t, "restore of another image's snapshot", err, http.StatusBadRequest)
	_, err = d.c.CreateSandbox(ctx, &api.CreateSandboxRequest{FromSnapshot: isn.ID, PolicyName: "default", Image: ""})
	if err != nil {
		t.Errorf("from_snapshot with no image takes the snapshot's: %v", err)
	}
	if _, err := d.c.Restore(ctx, si.ID, isn.ID); err != nil {
		t.Errorf("control: same image: %v", err)
	}
}

// The CLI: airlock snapshot, snapshots, diff, fork, restore; a bad input
// is a one-line error and a non-zero status next to its working control.
func TestSnapshotCLI(t *testing.T) {
	d := snapDaemon(t, "")
	run := func(args ...string) (string, string, int) {
		t.Helper()
		return cli(t, d, args...)
	}
	sb := d.create(t, nil)
	d.sh(t, sb.ID, "printf 'one\\ntwo\\n' > /workspace/t.txt")
	out, errs, code := run("snapshot", sb.ID, "--name", "cli1")
	snapID := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(snapID, "snap-") || !strings.Contains(errs, "processes not captured") || !strings.Contains(errs, "workspace and root layer;") {
		t.Fatalf("snapshot: %q %q %d", out, errs, code)
	}
	_, errs, code = run("snapshot", sb.ID, "--name", "cli1")
	if code == 0 || strings.Count(strings.TrimSpace(errs), "\n") != 0 || !strings.Contains(errs, "in use") {
		t.Errorf("snapshot with a name in use: %q %d", errs, code)
	}
	if out, _, code := run("snapshots"); code != 0 || !strings.Contains(out, snapID) || !strings.Contains(out, "cli1") || !strings.Contains(out, "workspace+root") {
		t.Errorf("snapshots: %q %d", out, code)
	}
	d.sh(t, sb.ID, "printf 'one\\nTWO\\n' > /workspace/t.txt")
	out, errs, code = run("diff", sb.ID, "--since", "cli1")
	if code != 0 || !strings.Contains(out, "modified t.txt") || !strings.Contains(out, "-two\n+TWO\n") {
		t.Errorf("diff: %q %q %d", out, errs, code)
	}
	out, errs, code = run("fork", sb.ID, "-n", "2")
	ids := strings.Fields(out)
	if code != 0 || len(ids) != 2 {
		t.Fatalf("fork: %q %q %d", out, errs, code)
	}
	if got := d.sh(t, ids[1], "cat /workspace/t.txt"); got != "one\nTWO\n" {
		t.Errorf("fork's file: %q", got)
	}
	if _, errs, code := run("restore", sb.ID, "nope"); code == 0 || !strings.Contains(errs, "not found") {
		t.Errorf("restore to an unknown snapshot: %q %d", errs, code)
	}
	if _, errs, code := run("restore", sb.ID, "cli1"); code != 0 {
		t.Fatalf("restore: %q %d", errs, code)
	}
	if got := d.sh(t, sb.ID, "cat /workspace/t.txt"); got != "one\ntwo\n" {
		t.Errorf("after restore: %q", got)
	}
	if _, errs, code := run("snapshots", "rm", "cli1", "nope"); code == 0 || !strings.Contains(errs, "nope") {
		t.Errorf("snapshots rm with an unknown one: %q %d", errs, code)
	}
	if out, _, _ := run("snapshots"); strings.Contains(out, "cli1") {
		t.Errorf("cli1 still listed after rm: %q", out)
	}
}

// A snapshot larger than a sandbox's disk is refused (400) before its
// workspace is touched, next to a restore that fits; a stopped sandbox
// cannot be snapshotted (409); a daemon with in-memory workspaces makes
// no snapshots (501, saying why).
func TestSnapshotBadInput(t *testing.T) {
	d := snapDaemon(t, "")
	ctx := ctxT(t)
	big := d.create(t, &api.CreateSandboxRequest{Resources: api.Resources{Disk: "96M"}})
	d.sh(t, big.ID, "head -c 40000000 /dev/urandom > /workspace/blob")
	sn, err := d.c.CreateSnapshot(ctx, big.ID, &api.CreateSnapshotRequest{Name: "big"})
	if err != nil {
		t.Fatal(err)
	}
	small := d.create(t, &api.CreateSandboxRequest{Resources: api.Resources{Disk: "16M"}})
	d.sh(t, small.ID, "echo mine > /workspace/mine")
	_, err = d.c.Restore(ctx, small.ID, sn.ID)
	wantCode(t, "restore of a snapshot larger than the disk", err, http.StatusBadRequest)
	if got := d.sh(t, small.ID, "ls /workspace; cat /workspace/mine"); got != "mine\nmine\n" {
		t.Errorf("the refused restore touched the workspace: %q", got)
	}
	_, err = d.c.CreateSandbox(ctx, &api.CreateSandboxRequest{FromSnapshot: "big", Resources: api.Resources{Disk: "16M"}})
	wantCode(t, "create from a snapshot larger than the disk", err, http.StatusBadRequest)
	if _, err := d.c.CreateSandbox(ctx, &api.CreateSandboxRequest{FromSnapshot: "big", Resources: api.Resources{Disk: "96M"}}); err != nil {
		t.Errorf("control: a disk that fits: %v", err)
	}
	if err := d.c.DeleteSandbox(ctx, small.ID); err != nil {
		t.Fatal(err)
	}
	_, err = d.c.CreateSnapshot(ctx, small.ID, nil)
	wantCode(t, "snapshot of a deleted sandbox", err, http.StatusNotFound)
	_, err = d.c.Changes(ctx, big.ID, "nope", false)
	wantCode(t, "changes since an unknown snapshot", err, http.StatusNotFound)

	m := startDaemon(t, "disk_quota: tmpfs")
	sb := m.create(t, nil)
	_, err = m.c.CreateSnapshot(ctx, sb.ID, nil)
	wantCode(t, "snapshot with tmpfs workspaces", err, http.StatusNotImplemented)
	var e *client.Error
	if errors.As(err, &e) && !strings.Contains(e.Message, "disk_quota: loop") {
		t.Errorf("the 501 does not say what is needed: %q", e.Message)
	}
	_, err = m.c.Fork(ctx, sb.ID, nil)
	wantCode(t, "fork with tmpfs workspaces", err, http.StatusNotImplemented)
	if l, err := m.c.ListSnapshots(ctx); err != nil || len(l.Snapshots) != 0 {
		t.Errorf("list with tmpfs workspaces: %+v %v", l, err)
	}
}

// The diffs of one changes answer stop at 16 MiB (the rest listed without
// one, and said so); below it (the control) every diff is there.
func TestSnapshotDiffCap(t *testing.T) {
	d := snapDaemon(t, "")
	ctx := ctxT(t)
	sb := d.create(t, &api.CreateSandboxRequest{Resources: api.Resources{Disk: "128M"}})
	// 12 text files of 1000 lines of 999 bytes (about 1 MB each).
	d.sh(t, sb.ID, `cd /workspace && line=$(head -c 998 /dev/zero | tr '\0' a) && for i in $(seq 12); do yes "$line" | head -n 1000 > f$i; done`)
	if _, err := d.c.CreateSnapshot(ctx, sb.ID, &api.CreateSnapshotRequest{Name: "text"}); err != nil {
		t.Fatal(err)
	}
	d.sh(t, sb.ID, `cd /workspace && line=$(head -c 998 /dev/zero | tr '\0' b) && for i in 1 2; do yes "$line" | head -n 1000 > f$i; done`)
	ch, err := d.c.Changes(ctx, sb.ID, "text", true)
	if err != nil {
		t.Fatal(err)
	}
	if len(ch.Changes) != 2 || ch.DiffsTruncated || ch.Changes[0].Diff == "" || ch.Changes[1].Diff == "" {
		t.Errorf("2 files changed: truncated %v, %d changes", ch.DiffsTruncated, len(ch.Changes))
	}
	d.sh(t, sb.ID, `cd /workspace && line=$(head -c 998 /dev/zero | tr '\0' b) && for i in $(seq 12); do yes "$line" | head -n 1000 > f$i; done`)
	ch, err = d.c.Changes(ctx, sb.ID, "text", true)
	if err != nil {
		t.Fatal(err)
	}
	total, without := 0, 0
	for _, c := range ch.Changes {
		total += len(c.Diff)
		if c.Diff == "" {
			without++
		}
	}
	if len(ch.Changes) != 12 || !ch.DiffsTruncated || total > 16<<20 || without == 0 {
		t.Errorf("12 files of ~2 MB of diff each: %d changes, truncated %v, %d diff bytes, %d without", len(ch.Changes), ch.DiffsTruncated, total, without)
	}
}

// A snapshot that a delete races gets a conflict or not found, never a
// 500 naming the host's cgroup path (the freezer's files vanish under the
// copy). The race is not forced: several rounds, each one's snapshot and
// delete sent together; any round where they cross must answer 4xx.
// Control: a snapshot alone succeeds.
func TestSnapshotRacingDelete(t *testing.T) {
	d := snapDaemon(t, "")
	ctx := ctxT(t)
	if _, err := d.c.CreateSnapshot(ctx, d.create(t, nil).ID, &api.CreateSnapshotRequest{}); err != nil {
		t.Fatalf("control: %v", err)
	}
	for i := 0; i < 6; i++ {
		sb := d.create(t, nil)
		d.sh(t, sb.ID, "head -c 4M /dev/urandom > /workspace/blob")
		errc := make(chan error, 1)
		go func() {
			_, err := d.c.CreateSnapshot(ctx, sb.ID, &api.CreateSnapshotRequest{})
			errc <- err
		}()
		d.c.DeleteSandbox(ctx, sb.ID)
		err := <-errc
		var ae *client.Error
		if err != nil && (!errors.As(err, &ae) || ae.Status >= 500 || strings.Contains(err.Error(), "/sys/fs/cgroup")) {
			t.Errorf("round %d: snapshot racing a delete: %v", i, err)
		}
	}
}

// A FIFO that did not change since a snapshot is no change (every diff
// listed it as kept); one made since is listed (the control).
func TestSnapshotDiffSpecialFiles(t *testing.T) {
	d := snapDaemon(t, "")
	ctx := ctxT(t)
	sb := d.create(t, nil)
	d.sh(t, sb.ID, "mkfifo /workspace/ff && echo x > /workspace/f")
	if _, err := d.c.CreateSnapshot(ctx, sb.ID, &api.CreateSnapshotRequest{Name: "withfifo"}); err != nil {
		t.Fatal(err)
	}
	ch, err := d.c.Changes(ctx, sb.ID, "withfifo", false)
	if err != nil {
		t.Fatal(err)
	}
	if got := changeSet(ch); len(got) != 0 {
		t.Errorf("changes of an unchanged workspace with a FIFO: %q", got)
	}
	d.sh(t, sb.ID, "mkfifo /workspace/newff")
	if ch, err = d.c.Changes(ctx, sb.ID, "withfifo", false); err != nil {
		t.Fatal(err)
	}
	if got := changeSet(ch); !reflect.DeepEqual(got, []string{"kept newff"}) {
		t.Errorf("changes after a new FIFO: %q, want it alone", got)
	}
}

// Restores of one sandbox at once each work (one after the other): those
// that waited answered 409 "ended meanwhile" about a running sandbox. The
// control: the sandbox runs afterwards, with the snapshot's file.
func TestConcurrentRestores(t *testing.T) {
	d := snapDaemon(t, "")
	ctx := ctxT(t)
	sb := d.create(t, nil)
	d.sh(t, sb.ID, "echo snap > /workspace/f")
	if _, err := d.c.CreateSnapshot(ctx, sb.ID, &api.CreateSnapshotRequest{Name: "r1"}); err != nil {
		t.Fatal(err)
	}
	d.sh(t, sb.ID, "echo later > /workspace/f")
	const n = 4
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() {
			_, err := d.c.Restore(ctx, sb.ID, "r1")
			errs <- err
		}()
	}
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			t.Errorf("restore %d of %d at once: %v", i+1, n, err)
		}
	}
	if got := d.sh(t, sb.ID, "cat /workspace/f"); got != "snap\n" {
		t.Errorf("after the restores: %q", got)
	}
}
