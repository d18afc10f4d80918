//go:build linux

package serve

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/internal/testdaemon"
)

// rootDocVictim is a host file under /usr/share/doc that the sandbox
// deletes from its view (a whiteout in the /usr overlay's upper layer),
// with its directory, which the sandbox then re-creates (an opaque
// directory).
func rootDocVictim(t *testing.T) (dir, file string) {
	t.Helper()
	ents, err := os.ReadDir("/usr/share/doc")
	if err != nil {
		t.Skipf("no /usr/share/doc on this host: %v", err)
	}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		sub, err := os.ReadDir(filepath.Join("/usr/share/doc", e.Name()))
		if err != nil {
			continue
		}
		for _, f := range sub {
			if f.Type().IsRegular() {
				return "/usr/share/doc/" + e.Name(), "/usr/share/doc/" + e.Name() + "/" + f.Name()
			}
		}
	}
	t.Skip("no regular file in a directory of /usr/share/doc on this host")
	return "", ""
}

// groupOwned is a host file under /usr/bin whose group is not root (the
// sandbox sees it with that group), or "".
func groupOwned() (string, uint32) {
	ents, _ := os.ReadDir("/usr/bin")
	for _, e := range ents {
		var st syscall.Stat_t
		p := "/usr/bin/" + e.Name()
		if syscall.Lstat(p, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFREG && st.Uid == 0 && st.Gid != 0 && st.Gid < 65536 {
			return p, st.Gid
		}
	}
	return "", 0
}

// setuidFile is a set-uid root file of the host under /usr/bin, or "".
func setuidFile() string {
	for _, n := range []string{"passwd", "su", "mount", "chsh", "newgrp"} {
		var st syscall.Stat_t
		p := "/usr/bin/" + n
		if syscall.Stat(p, &st) == nil && st.Uid == 0 && st.Mode&syscall.S_ISUID != 0 {
			return p
		}
	}
	return ""
}

// rootChanges writes into /usr/local/bin, /etc, /root and /opt, deletes
// a host file and replaces a host directory (whiteouts, an opaque
// directory), and changes a mode.
func rootChanges(victimDir, victim string) string {
	return `set -e
printf '#!/bin/sh\necho tool-v1\n' > /usr/local/bin/rs-tool && chmod 755 /usr/local/bin/rs-tool
echo conf-v1 > /etc/rootsnap.conf
mkdir -p /root/.cache/rs && echo root-v1 > /root/.cache/rs/state
echo opt > /opt/rs-opt && chmod 640 /opt/rs-opt
echo top > /var/rs-top
ln -s /etc/rootsnap.conf /root/rs-link
rm ` + victim + `
ls ` + victimDir + ` > /root/rs-kept
rm -rf ` + victimDir + `/* && echo only > ` + victimDir + `/rs-only
`
}

// rootState is what rootChanges leaves, as seen inside.
const rootStateScript = `for f in /usr/local/bin/rs-tool /etc/rootsnap.conf /root/.cache/rs/state /opt/rs-opt /var/rs-top; do
  printf '%s %s ' $f "$(stat -c '%u:%g %a' $f)"; cat $f | tr '\n' ' '; echo; done
/usr/local/bin/rs-tool
readlink /root/rs-link
ls -A VICTIMDIR
test -e VICTIM && echo victim-present || echo victim-absent
`

func rootState(t *testing.T, d *daemon, id, victimDir, victim string) string {
	t.Helper()
	return d.sh(t, id, strings.NewReplacer("VICTIMDIR", victimDir, "VICTIM", victim).Replace(rootStateScript))
}

// A snapshot holds the root layer (root: true); each of two forks starts
// with it (files, modes, owners, links, the deleted host file absent and
// the replaced directory holding only the new file), and a write in one
// fork's root reaches neither its sibling nor the parent.
func TestRootSnapshotFork(t *testing.T) {
	d := snapDaemon(t, "max_sandboxes: 6\n")
	ctx := ctxT(t)
	victimDir, victim := rootDocVictim(t)
	parent := d.create(t, nil)
	d.sh(t, parent.ID, rootChanges(victimDir, victim))
	// A copied-up host file keeps its group (not root): the snapshot
	// stores the in-sandbox id.
	grp, gid := groupOwned()
	if grp != "" {
		d.sh(t, parent.ID, "chmod 750 "+grp)
	}
	want := rootState(t, d, parent.ID, victimDir, victim)
	if grp != "" {
		want += d.sh(t, parent.ID, "stat -c '%u:%g %a' "+grp)
		if !strings.HasSuffix(want, fmt.Sprintf("0:%d 750\n", gid)) {
			t.Fatalf("the parent's %s: %q", grp, want)
		}
	}
	state := func(id string) string {
		s := rootState(t, d, id, victimDir, victim)
		if grp != "" {
			s += d.sh(t, id, "stat -c '%u:%g %a' "+grp)
		}
		return s
	}
	for _, s := range []string{"/usr/local/bin/rs-tool 0:0 755 #!/bin/sh", "/opt/rs-opt 0:0 640 opt", "tool-v1\n/etc/rootsnap.conf\nrs-only\nvictim-absent\n"} {
		if !strings.Contains(want, s) {
			t.Fatalf("the parent's own state lacks %q:\n%s", s, want)
		}
	}
	// Control: the host is untouched.
	if _, err := os.Stat(victim); err != nil {
		t.Fatalf("the host's %s: %v", victim, err)
	}

	res, err := d.c.Fork(ctx, parent.ID, &api.ForkRequest{Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Snapshot.Root || !res.Snapshot.Workspace || res.Snapshot.Processes {
		t.Errorf("fork snapshot = %+v, want root and workspace", res.Snapshot)
	}
	if g, err := d.c.GetSnapshot(ctx, res.Snapshot.ID); err != nil || !g.Root {
		t.Errorf("GET snapshot: %+v %v, want root: true", g, err)
	}
	f0, f1 := res.Sandboxes[0].ID, res.Sandboxes[1].ID
	for _, id := range []string{f0, f1} {
		if got := state(id); got != want {
			t.Errorf("fork %s root:\n%s\nwant (the parent's):\n%s", id, got, want)
		}
	}
	d.sh(t, f0, "echo conf-f0 > /etc/rootsnap.conf && echo f0 > /usr/local/bin/only-f0 && rm /root/.cache/rs/state")
	for _, id := range []string{f1, parent.ID} {
		if got := state(id); got != want {
			t.Errorf("%s after a write in fork %s:\n%s\nwant:\n%s", id, f0, got, want)
		}
		if got := d.sh(t, id, "test -e /usr/local/bin/only-f0 && echo leaked || echo absent"); got != "absent\n" {
			t.Errorf("%s sees fork %s's new file: %q", id, f0, got)
		}
	}
	if got := d.sh(t, f0, "cat /etc/rootsnap.conf; test -e /root/.cache/rs/state || echo gone"); got != "conf-f0\ngone\n" {
		t.Errorf("fork %s's own write: %q", f0, got)
	}

	// The snapshot's files carry in-sandbox owners (root: 0), never the
	// sandbox's host ids.
	dir := filepath.Join(d.dir, "data", "snapshots", res.Snapshot.ID, "root")
	// No regular file of it is set-id on the host (in-sandbox root is
	// host root there), though the parent had a copied-up set-id file.
	if suid := setuidFile(); suid != "" {
		if got := d.sh(t, parent.ID, "touch "+suid+" && stat -c %a "+suid); !strings.HasPrefix(got, "4") {
			t.Fatalf("control: the copied-up %s inside: mode %q", suid, got)
		}
		sn, err := d.c.CreateSnapshot(ctx, parent.ID, &api.CreateSnapshotRequest{})
		if err != nil {
			t.Fatal(err)
		}
		sdir := filepath.Join(d.dir, "data", "snapshots", sn.ID, "root")
		if _, err := os.Stat(filepath.Join(sdir, "upper", suid)); err != nil {
			t.Fatalf("control: the copied-up %s is not in the snapshot: %v", suid, err)
		}
		filepath.Walk(sdir, func(p string, fi os.FileInfo, err error) error {
			if err == nil && fi.Mode().IsRegular() && fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
				t.Errorf("snapshot file %s is %v on the host", p, fi.Mode())
			}
			return nil
		})
	}
	owners := map[string][2]uint32{"upper/usr/local/bin/rs-tool": {0, 0}, "rootfs/opt/rs-opt": {0, 0}, "rootfs/var/rs-top": {0, 0}}
	if grp != "" {
		owners["upper"+grp] = [2]uint32{0, gid}
	}
	for rel, o := range owners {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(dir, rel), &st); err != nil || st.Uid != o[0] || st.Gid != o[1] {
			t.Errorf("snapshot file %s: owner %d:%d (%v), want %d:%d", rel, st.Uid, st.Gid, err, o[0], o[1])
		}
	}
}

// Restore in place brings the root layer back with the workspace: the
// sandbox keeps its id and labels, files written into the root since are
// gone, changed ones are as they were, its processes ended, and it runs
// on (exec, a further snapshot). A snapshot of it made before the root
// changes restores the host's view (the deleted file back).
func TestRootSnapshotRestore(t *testing.T) {
	d := snapDaemon(t, "")
	ctx := ctxT(t)
	victimDir, victim := rootDocVictim(t)
	sb := d.create(t, &api.CreateSandboxRequest{Labels: map[string]string{"t": "rootrestore"}})
	clean, err := d.c.CreateSnapshot(ctx, sb.ID, &api.CreateSnapshotRequest{Name: "clean"})
	if err != nil || !clean.Root {
		t.Fatalf("snapshot of a fresh sandbox: %+v %v", clean, err)
	}
	d.sh(t, sb.ID, rootChanges(victimDir, victim)+"echo ws > /workspace/w\n")
	want := rootState(t, d, sb.ID, victimDir, victim)
	sn, err := d.c.CreateSnapshot(ctx, sb.ID, &api.CreateSnapshotRequest{Name: "changed"})
	if err != nil || !sn.Root {
		t.Fatalf("snapshot: %+v %v", sn, err)
	}
	p, err := d.c.StartProcess(ctx, sb.ID, &api.ExecRequest{Argv: []string{"sleep", "600"}})
	if err != nil {
		t.Fatal(err)
	}
	d.sh(t, sb.ID, `echo conf-v2 > /etc/rootsnap.conf && echo later > /usr/local/bin/later && rm -r /root/.cache && echo ws2 > /workspace/w`)
	if got := rootState(t, d, sb.ID, victimDir, victim); got == want {
		t.Fatal("control: the changes after the snapshot show no difference")
	}
	after, err := d.c.Restore(ctx, sb.ID, "changed")
	if err != nil {
		t.Fatal(err)
	}
	if after.ID != sb.ID || after.State != api.StateRunning || after.Labels["t"] != "rootrestore" {
		t.Errorf("restored sandbox = %+v", after)
	}
	if got := rootState(t, d, sb.ID, victimDir, victim); got != want {
		t.Errorf("root after restore:\n%s\nwant:\n%s", got, want)
	}
	if got := d.sh(t, sb.ID, "cat /workspace/w; test -e /usr/local/bin/later && echo later-present || echo later-absent"); got != "ws\nlater-absent\n" {
		t.Errorf("after restore: %q", got)
	}
	pr, err := d.c.WaitProcess(ctx, sb.ID, p.ID, 30*time.Second)
	if err != nil || pr.State == api.ProcessRunning {
		t.Errorf("the sandbox's process after restore: %+v %v (want it ended)", pr, err)
	}
	// Back to before the root changes: the host's file is there again.
	if _, err := d.c.Restore(ctx, sb.ID, "clean"); err != nil {
		t.Fatal(err)
	}
	if got := d.sh(t, sb.ID, "test -e "+victim+" && echo victim-present; test -e /etc/rootsnap.conf || echo conf-absent; ls /workspace"); got != "victim-present\nconf-absent\n" {
		t.Errorf("after restoring the clean snapshot: %q", got)
	}
	// It goes on: another snapshot, with the root.
	if s, err := d.c.CreateSnapshot(ctx, sb.ID, &api.CreateSnapshotRequest{}); err != nil || !s.Root {
		t.Errorf("snapshot after restore: %+v %v", s, err)
	}
	if g, err := d.c.GetSandbox(ctx, sb.ID); err != nil || g.State != api.StateRunning {
		t.Errorf("sandbox after restores: %+v %v", g, err)
	}
}

// After kill -9 of the daemon, the re-adopted sandbox's root layer is
// still reachable (its init keeps the descriptor): a snapshot holds it,
// and a sandbox made from it has the root state.
func TestRootSnapshotAfterKill(t *testing.T) {
	d := snapDaemon(t, "")
	victimDir, victim := rootDocVictim(t)
	sb := d.create(t, nil)
	d.sh(t, sb.ID, rootChanges(victimDir, victim))
	want := rootState(t, d, sb.ID, victimDir, victim)
	d.restart(syscall.SIGKILL)
	ctx := ctxT(t)
	sn, err := d.c.CreateSnapshot(ctx, sb.ID, &api.CreateSnapshotRequest{Name: "after-kill"})
	if err != nil || !sn.Root {
		t.Fatalf("snapshot after kill -9 of the daemon: %+v %v", sn, err)
	}
	nb, err := d.c.CreateSandbox(ctx, &api.CreateSandboxRequest{FromSnapshot: "after-kill"})
	if err != nil {
		t.Fatal(err)
	}
	if got := rootState(t, d, nb.ID, victimDir, victim); got != want {
		t.Errorf("from the snapshot taken after the restart:\n%s\nwant:\n%s", got, want)
	}
	// A sandbox restored in place (its runtime made anew, on new host
	// ids) is re-adopted after another kill -9, with its root.
	d.sh(t, sb.ID, "echo later > /etc/rootsnap.conf")
	if _, err := d.c.Restore(ctx, sb.ID, "after-kill"); err != nil {
		t.Fatal(err)
	}
	d.restart(syscall.SIGKILL)
	ctx = ctxT(t)
	if g, err := d.c.GetSandbox(ctx, sb.ID); err != nil || g.State != api.StateRunning {
		t.Fatalf("restored sandbox after kill -9: %+v %v", g, err)
	}
	if got := rootState(t, d, sb.ID, victimDir, victim); got != want {
		t.Errorf("restored sandbox after kill -9:\n%s\nwant:\n%s", got, want)
	}
	if s, err := d.c.CreateSnapshot(ctx, sb.ID, &api.CreateSnapshotRequest{}); err != nil || !s.Root {
		t.Errorf("snapshot of it: %+v %v", s, err)
	}
}

// Nothing in the sandbox reaches the init's descriptor of the root layer
// (/proc/1/fd or pidfd_getfd, next to its own /proc/self/fd and the host's
// view of the descriptor as the controls) or the
// snapshot's host directory (present on the host, absent inside, and not
// named in its mount table).
func TestRootSnapshotIsolation(t *testing.T) {
	d := snapDaemon(t, "")
	ctx := ctxT(t)
	sb := d.create(t, nil)
	d.sh(t, sb.ID, "echo secret-root > /root/mark")
	sn, err := d.c.CreateSnapshot(ctx, sb.ID, &api.CreateSnapshotRequest{Name: "iso"})
	if err != nil || !sn.Root {
		t.Fatalf("snapshot: %+v %v", sn, err)
	}
	nb, err := d.c.CreateSandbox(ctx, &api.CreateSandboxRequest{FromSnapshot: "iso"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(d.stateDir, strings.TrimPrefix(nb.ID, "sb-"), "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		RootFD int `json:"root_fd"`
		Init   int `json:"init"`
	}
	if err := json.Unmarshal(b, &st); err != nil || st.RootFD <= 2 || st.Init <= 1 {
		t.Fatalf("state.json root_fd, init: %s %v", b, err)
	}
	// Control, from the host: the init holds that descriptor, a directory.
	if fi, err := os.Stat(fmt.Sprintf("/proc/%d/fd/%d", st.Init, st.RootFD)); err != nil || !fi.IsDir() {
		t.Fatalf("control: the init's descriptor %d from the host: %v %v", st.RootFD, fi, err)
	}
	host := filepath.Join(d.dir, "data", "snapshots", sn.ID, "root", "rootfs", "root", "mark")
	if got, err := os.ReadFile(host); err != nil || string(got) != "secret-root\n" {
		t.Fatalf("control: the snapshot's file on the host: %q %v", got, err)
	}
	fd := strconv.Itoa(st.RootFD)
	res, err := d.c.Exec(ctx, nb.ID, &api.ExecRequest{Argv: []string{"sh", "-c", `
readlink /proc/self/fd/1 >/dev/null && echo self-ok
readlink /proc/1/fd/` + fd + ` && echo init-fd-READ
ls /proc/1/fd/` + fd + `/ && echo init-dir-READ
cat /proc/1/fdinfo/` + fd + ` && echo init-fdinfo-READ
cat ` + host + ` && echo host-READ
grep -c snapshots /proc/self/mountinfo
cat /root/mark
python3 -c '
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def getfd(pid, fd):
    pfd = os.pidfd_open(pid)
    r = libc.syscall(438, pfd, fd, 0)
    return r if r >= 0 else -ctypes.get_errno()
r = getfd(1, ` + fd + `)
print("init-getfd-READ" if r >= 0 else "init-getfd-denied %d" % -r)
'`}})
	if err != nil {
		t.Fatal(err)
	}
	out := string(res.Stdout)
	t.Logf("inside:\n%s%s", out, res.Stderr)
	if !strings.Contains(out, "self-ok") || !strings.Contains(out, "secret-root") || !strings.Contains(out, "init-getfd-denied") {
		t.Errorf("controls failed (own descriptors, the restored file): %q %q", out, res.Stderr)
	}
	if strings.Contains(out, "READ") {
		t.Errorf("the sandbox reached what it must not:\n%s", out)
	}
	if !strings.Contains(out, "\n0\n") {
		t.Errorf("the mount table names the snapshots' directory: %q", out)
	}
}

// A restore in place with the root layer keeps the activity record going
// (earlier events kept, execs after the restore recorded) and a paused
// sandbox paused (it runs again on resume).
func TestRootSnapshotRestoreKeeps(t *testing.T) {
	needRecordRoot(t)
	d := snapDaemon(t, "")
	ctx := ctxT(t)
	sb, err := d.c.CreateSandbox(ctx, &api.CreateSandboxRequest{Record: true})
	if err != nil {
		t.Fatal(err)
	}
	d.sh(t, sb.ID, "echo v1 > /etc/keep.conf && /bin/echo before-restore")
	waitEvent(t, d.c, sb.ID, "", "the exec before the restore", func(ev api.RecordEvent) bool {
		return ev.Type == api.RecordExec && len(ev.Argv) == 2 && ev.Argv[1] == "before-restore"
	})
	sn, err := d.c.CreateSnapshot(ctx, sb.ID, &api.CreateSnapshotRequest{})
	if err != nil || !sn.Root {
		t.Fatalf("snapshot: %+v %v", sn, err)
	}
	d.sh(t, sb.ID, "echo v2 > /etc/keep.conf")
	if _, err := d.c.Restore(ctx, sb.ID, sn.ID); err != nil {
		t.Fatal(err)
	}
	if got := d.sh(t, sb.ID, "cat /etc/keep.conf && /bin/echo after-restore"); got != "v1\nafter-restore\n" {
		t.Errorf("after restore: %q", got)
	}
	waitEvent(t, d.c, sb.ID, "", "the exec after the restore", func(ev api.RecordEvent) bool {
		return ev.Type == api.RecordExec && len(ev.Argv) == 2 && ev.Argv[1] == "after-restore"
	})
	evs := recordEvents(t, d.c, sb.ID, client.EventsQuery{})
	var before bool
	for _, e := range execsOf(evs) {
		before = before || (len(e.Argv) == 2 && e.Argv[1] == "before-restore")
	}
	if !before {
		t.Error("the record lost the events from before the restore")
	}
	var starts int
	for _, e := range evs {
		if e.Type == api.RecordStart {
			starts++
		}
	}
	if starts != 2 {
		t.Errorf("%d start events, want 2 (creation and restore)", starts)
	}

	if _, err := d.c.Pause(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	r, err := d.c.Restore(ctx, sb.ID, sn.ID)
	if err != nil || r.State != api.StatePaused {
		t.Fatalf("restore of a paused sandbox: %+v %v (want it paused)", r, err)
	}
	if _, err := d.c.Resume(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if got := d.sh(t, sb.ID, "cat /etc/keep.conf"); got != "v1\n" {
		t.Errorf("after a paused restore and resume: %q", got)
	}
}

// A restore in place with the root layer keeps the sandbox's egress: the
// gateway serves the new runtime sandbox with the same policy (an allowed
// host works, another is refused), and the network audit holds the
// requests from before and after the restore.
func TestRootSnapshotRestoreNetwork(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s", r.Host)
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	d := snapDaemon(t, "egress_hosts:\n  api.test: [127.0.0.1]\n  other.test: [127.0.0.1]\n")
	ctx := ctxT(t)
	sb := d.create(t, &api.CreateSandboxRequest{Policy: "network:\n  mode: allowlist\n  allow: [api.test, 127.0.0.1]\n"})
	script := fmt.Sprintf(`curl -s -m 10 http://api.test:%[1]s/; echo; curl -s -m 10 -o /dev/null -w '%%{http_code}' http://other.test:%[1]s/`, u.Port())
	want := fmt.Sprintf("hello api.test:%s\n403", u.Port())
	if out := d.sh(t, sb.ID, script); out != want {
		t.Fatalf("egress before the restore: %q, want %q", out, want)
	}
	sn, err := d.c.CreateSnapshot(ctx, sb.ID, &api.CreateSnapshotRequest{})
	if err != nil || !sn.Root {
		t.Fatalf("snapshot: %+v %v", sn, err)
	}
	if _, err := d.c.Restore(ctx, sb.ID, sn.ID); err != nil {
		t.Fatal(err)
	}
	if out := d.sh(t, sb.ID, script); out != want {
		t.Fatalf("egress after the restore: %q, want %q", out, want)
	}
	eventually(t, 15*time.Second, "4 audited requests (2 before, 2 after the restore)", func() bool {
		page, err := d.c.NetworkEvents(ctx, sb.ID, client.NetworkQuery{})
		if err != nil {
			return false
		}
		var ok, denied int
		for _, e := range page.Events {
			switch {
			case e.Host == "api.test" && e.Allowed:
				ok++
			case e.Host == "other.test" && !e.Allowed:
				denied++
			}
		}
		return ok == 2 && denied == 2
	})
}

// shellImage makes an image directory with /bin/sh, rm and cat (and the
// libraries they need, copied from the host), an /etc with one file and
// an empty /dev.
func shellImage(t *testing.T) string {
	t.Helper()
	parent := t.TempDir()
	os.Chmod(parent, 0o755)
	img := filepath.Join(parent, "img")
	files := map[string]string{"/bin/sh": "", "/bin/rm": "", "/bin/cat": "", "/lib/x86_64-linux-gnu/libc.so.6": "", "/lib64/ld-linux-x86-64.so.2": ""}
	for f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Skipf("cannot build a shell image from this host's %s: %v", f, err)
		}
		dst := filepath.Join(img, f)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"dev", "etc", "root", "tmp"} {
		if err := os.MkdirAll(filepath.Join(img, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(img, "etc", "image-file"), []byte("from the image\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return img
}

// A sandbox of an image: its root layer is the image overlay's upper
// layer; a fork has it (a new file, a deleted image file), a restore
// brings it back, and the image on the host is untouched.
func TestRootSnapshotImage(t *testing.T) {
	img := shellImage(t)
	d := snapDaemon(t, "images:\n  shell: "+img+"\n")
	ctx := ctxT(t)
	sb := d.create(t, &api.CreateSandboxRequest{Image: "shell"})
	state := `cat /etc/new /root/r; test -e /etc/image-file && echo image-file-present || echo image-file-absent`
	d.sh(t, sb.ID, "echo new > /etc/new && echo r > /root/r && rm /etc/image-file")
	want := "new\nr\nimage-file-absent\n"
	if got := d.sh(t, sb.ID, state); got != want {
		t.Fatalf("the sandbox's own state: %q", got)
	}
	res, err := d.c.Fork(ctx, sb.ID, &api.ForkRequest{Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Snapshot.Root {
		t.Errorf("snapshot of an image sandbox: root false")
	}
	if got := d.sh(t, res.Sandboxes[0].ID, state); got != want {
		t.Errorf("fork of an image sandbox: %q, want %q", got, want)
	}
	d.sh(t, sb.ID, "echo changed > /etc/new && rm /root/r")
	if _, err := d.c.Restore(ctx, sb.ID, res.Snapshot.ID); err != nil {
		t.Fatal(err)
	}
	if got := d.sh(t, sb.ID, state); got != want {
		t.Errorf("image sandbox after restore: %q, want %q", got, want)
	}
	if b, err := os.ReadFile(filepath.Join(img, "etc", "image-file")); err != nil || string(b) != "from the image\n" {
		t.Errorf("the image on the host: %q %v", b, err)
	}
}

// A restore with the root layer, asked by an operator key, binds the
// sandbox's tenant's caches again, not the operator's: the tenant's token
// is there after the restore, the operator's is not (and was before in an
// operator sandbox with the same cache, the control).
func TestRootSnapshotRestoreTenantCaches(t *testing.T) {
	addr := testdaemon.FreeAddr(t)
	d := snapDaemon(t, "listen: "+addr+"\n")
	ctx := ctxT(t)
	k, err := d.c.CreateTenantKey(ctx, "a", "acme")
	if err != nil {
		t.Fatal(err)
	}
	acme, _ := client.New("http://"+addr, k.Key)
	op := d.create(t, &api.CreateSandboxRequest{Caches: []string{"npm"}})
	d.sh(t, op.ID, "echo operator > /cache/npm/tok")
	sb, err := acme.CreateSandbox(ctx, &api.CreateSandboxRequest{Caches: []string{"npm"}})
	if err != nil {
		t.Fatal(err)
	}
	d.sh(t, sb.ID, "test -e /cache/npm/tok && echo LEAK; echo acme > /cache/npm/acme")
	sn, err := acme.CreateSnapshot(ctx, sb.ID, &api.CreateSnapshotRequest{})
	if err != nil || !sn.Root {
		t.Fatalf("snapshot: %+v %v", sn, err)
	}
	if _, err := d.c.Restore(ctx, sb.ID, sn.ID); err != nil { // the operator's key
		t.Fatal(err)
	}
	got := d.sh(t, sb.ID, "cat /cache/npm/acme; test -e /cache/npm/tok && echo OPERATOR-CACHE || echo own-cache")
	if got != "acme\nown-cache\n" {
		t.Errorf("the tenant's sandbox after an operator's restore: %q", got)
	}
	if got := d.sh(t, op.ID, "cat /cache/npm/tok"); got != "operator\n" {
		t.Errorf("control: the operator's cache: %q", got)
	}
}

// A root layer larger than a sandbox's disk limit: from_snapshot and a
// restore in place are 400s that change nothing (the restored sandbox
// runs on with its own root), next to the same requests with room.
func TestRootSnapshotTooLarge(t *testing.T) {
	d := snapDaemon(t, "")
	ctx := ctxT(t)
	big := d.create(t, &api.CreateSandboxRequest{Resources: api.Resources{Disk: "256M"}})
	d.sh(t, big.ID, "head -c 100000000 /dev/zero | tr '\\0' x > /usr/local/big")
	sn, err := d.c.CreateSnapshot(ctx, big.ID, &api.CreateSnapshotRequest{Name: "big"})
	if err != nil || !sn.Root || sn.Size < 100000000 {
		t.Fatalf("snapshot: %+v %v", sn, err)
	}
	small := d.create(t, &api.CreateSandboxRequest{Resources: api.Resources{Disk: "64M"}})
	d.sh(t, small.ID, "echo mine > /etc/mine")
	before, _ := d.c.AllSandboxes(ctx, client.ListOptions{})
	_, err = d.c.CreateSandbox(ctx, &api.CreateSandboxRequest{FromSnapshot: "big", Resources: api.Resources{Disk: "64M"}})
	wantCode(t, "from_snapshot into a smaller disk", err, http.StatusBadRequest)
	if err != nil && !strings.Contains(err.Error(), "root layer") {
		t.Errorf("the 400 does not say why: %v", err)
	}
	if after, _ := d.c.AllSandboxes(ctx, client.ListOptions{}); len(after) != len(before) {
		t.Errorf("a refused from_snapshot left %d sandboxes (was %d)", len(after), len(before))
	}
	_, err = d.c.Restore(ctx, small.ID, "big")
	wantCode(t, "restore into a smaller disk", err, http.StatusBadRequest)
	if got := d.sh(t, small.ID, "cat /etc/mine"); got != "mine\n" {
		t.Errorf("the sandbox after a refused restore: %q", got)
	}
	// Controls: with room.
	nb, err := d.c.CreateSandbox(ctx, &api.CreateSandboxRequest{FromSnapshot: "big", Resources: api.Resources{Disk: "256M"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := d.sh(t, nb.ID, "wc -c < /usr/local/big"); got != "100000000\n" {
		t.Errorf("from the snapshot with room: %q", got)
	}
}

// Process ids go on across a restore that makes the runtime anew: the
// new processes get ids the sandbox never had, and the old ones keep
// their records (argv, output). Control: before the restore ids are
// handed out one after the other from p1.
func TestRestoreKeepsProcessIDs(t *testing.T) {
	d := snapDaemon(t, "")
	ctx := ctxT(t)
	sb := d.create(t, nil)
	var ids []string
	for _, w := range []string{"before-1", "before-2"} {
		r, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"echo", w}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ProcessID)
	}
	if ids[0] != "p1" || ids[1] != "p2" {
		t.Fatalf("control: ids %v, want p1 p2", ids)
	}
	sn, err := d.c.CreateSnapshot(ctx, sb.ID, &api.CreateSnapshotRequest{})
	if err != nil || !sn.Root {
		t.Fatalf("snapshot: %+v %v", sn, err)
	}
	if _, err := d.c.Restore(ctx, sb.ID, sn.ID); err != nil {
		t.Fatal(err)
	}
	r, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"echo", "after-1"}})
	if err != nil {
		t.Fatal(err)
	}
	if r.ProcessID == "p1" || r.ProcessID == "p2" || string(r.Stdout) != "after-1\n" {
		t.Errorf("after the restore: %s %q, want a new id", r.ProcessID, r.Stdout)
	}
	p1, err := d.c.GetProcess(ctx, sb.ID, "p1")
	if err != nil || len(p1.Argv) != 2 || p1.Argv[1] != "before-1" {
		t.Errorf("p1 after the restore: %+v %v, want echo before-1", p1, err)
	}
	// The same after a restore followed at once by a daemon restart
	// (the new agent has seen no process yet).
	if _, err := d.c.Restore(ctx, sb.ID, sn.ID); err != nil {
		t.Fatal(err)
	}
	d.restart(syscall.SIGKILL)
	r2, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"echo", "after-2"}})
	if err != nil {
		t.Fatal(err)
	}
	if r2.ProcessID == "p1" || r2.ProcessID == "p2" || r2.ProcessID == r.ProcessID {
		t.Errorf("after a restore and a daemon restart: %s, want an id not used before (%v, %s)", r2.ProcessID, ids, r.ProcessID)
	}
}
