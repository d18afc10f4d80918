//go:build linux

package serve

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-dev/airlock/api"
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
	want := rootState(t, d, parent.ID, victimDir, victim)
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
		if got := rootState(t, d, id, victimDir, victim); got != want {
			t.Errorf("fork %s root:\n%s\nwant (the parent's):\n%s", id, got, want)
		}
	}
	d.sh(t, f0, "echo conf-f0 > /etc/rootsnap.conf && echo f0 > /usr/local/bin/only-f0 && rm /root/.cache/rs/state")
	for _, id := range []string{f1, parent.ID} {
		if got := rootState(t, d, id, victimDir, victim); got != want {
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
	for rel, uid := range map[string]uint32{"upper/usr/local/bin/rs-tool": 0, "rootfs/opt/rs-opt": 0, "rootfs/var/rs-top": 0} {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(dir, rel), &st); err != nil || st.Uid != uid {
			t.Errorf("snapshot file %s: owner %d (%v), want %d", rel, st.Uid, err, uid)
		}
	}
}
