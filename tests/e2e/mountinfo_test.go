//go:build linux

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// mountTables prints, inside the sandbox, the mount tables the sandbox can
// read, each after a "== NAME" line.
const mountTables = `for f in /proc/self/mountinfo /proc/1/mountinfo /proc/self/mounts /proc/1/mounts; do echo "== $f"; cat $f; done`

// splitTables parses mountTables' output.
func splitTables(t *testing.T, out string) map[string][]string {
	t.Helper()
	tables := map[string][]string{}
	cur := ""
	for _, l := range strings.Split(out, "\n") {
		if name, ok := strings.CutPrefix(l, "== "); ok {
			cur = name
			tables[cur] = []string{}
			continue
		}
		if cur != "" && l != "" {
			tables[cur] = append(tables[cur], l)
		}
	}
	for _, name := range []string{"/proc/self/mountinfo", "/proc/1/mountinfo", "/proc/self/mounts", "/proc/1/mounts"} {
		if len(tables[name]) == 0 {
			t.Fatalf("%s: empty or unreadable inside the sandbox:\n%s", name, out)
		}
	}
	return tables
}

// checkMountTables fails the test for any host path (needles) in the mount
// tables. The overlay workspace (the default) names none: it is an overlay
// whose layers are named relative to a directory the sandbox does not see.
// A live workspace (--workspace-mode live) is a bind mount, whose root
// field the kernel prints as its path in its file system (nothing in the
// mount API changes that: a detached clone keeps it), so the workspace a
// caller chose shows there; as a control, that field must name it: the
// oracle sees a host path where one is.
func checkMountTables(t *testing.T, tables map[string][]string, ws string, live bool, needles ...string) {
	t.Helper()
	leak := func(s string) string {
		for _, n := range needles {
			if strings.Contains(s, n) {
				return n
			}
		}
		return ""
	}
	sawWorkspace, sawOverlay := false, false
	for name, lines := range tables {
		info := strings.HasSuffix(name, "mountinfo")
		for _, l := range lines {
			f := strings.Fields(l)
			if info && len(f) >= 5 {
				root, target := f[3], f[4]
				if target == "/workspace" || strings.HasPrefix(target, "/workspace/") {
					if target == "/workspace" {
						sawWorkspace = true
						if live && root != ws {
							t.Errorf("control: %s: the workspace's root field is %q, want the host path %q", name, root, ws)
						}
						if !live && !strings.Contains(l, " - overlay workspace ") {
							t.Errorf("%s: the workspace is not the overlay:\n%s", name, l)
						}
					}
					if live {
						f[3] = "-" // the kernel's, see above
					}
				}
				if strings.Contains(l, " - overlay ") {
					sawOverlay = true
				}
			}
			if n := leak(strings.Join(f, " ")); n != "" {
				t.Errorf("%s names the host path %q:\n%s", name, n, l)
			}
		}
	}
	if !sawWorkspace || !sawOverlay {
		t.Errorf("control: want /workspace and an overlay in mountinfo (saw workspace %v, overlay %v)", sawWorkspace, sawOverlay)
	}
}

// The mount tables inside the sandbox name no host path of airlock's:
// not the state directory (its layers, the /etc cache), not /run/airlock,
// not /var/lib/airlock. Overlays name their layers relative to a directory
// the sandbox does not see.
func TestMountTablesHideHostPaths(t *testing.T) {
	needRoot(t)
	for _, mode := range []string{"overlay", "live"} {
		t.Run(mode, func(t *testing.T) {
			ws := t.TempDir()
			os.Chmod(ws, 0o755)
			r := sh(t, opts{}, []string{"-v", "--workspace-mode", mode, "--workspace", ws}, mountTables)
			mustOK(t, r, "mount tables")
			m := sandboxIDRE.FindStringSubmatch(r.stderr)
			if m == nil {
				t.Fatalf("no sandbox id in -v output\n%s", r)
			}
			checkMountTables(t, splitTables(t, r.stdout), ws, mode == "live",
				"/run/airlock", "/run/airlock/"+m[1], m[1], "/var/lib/airlock", "layers", "etc-", ws)
		})
	}
}

// The same, rootless: the state root is the caller's own (XDG_RUNTIME_DIR),
// and the overlays' lower layers that are not system directories (the /etc
// cache, an image) are bound to neutral names first.
func TestMountTablesHideHostPathsRootless(t *testing.T) {
	for _, mode := range []string{"overlay", "live"} {
		t.Run(mode, func(t *testing.T) {
			runtimeDir := nobodyDir(t)
			ws := nobodyDir(t)
			o := opts{nobody: true, env: []string{"XDG_RUNTIME_DIR=" + runtimeDir}}
			changes := changesEnv(t, &o)
			r := sh(t, o, []string{"-v", "--workspace-mode", mode, "--workspace", ws}, mountTables)
			mustOK(t, r, "mount tables (rootless)")
			m := sandboxIDRE.FindStringSubmatch(r.stderr)
			if m == nil {
				t.Fatalf("no sandbox id in -v output\n%s", r)
			}
			checkMountTables(t, splitTables(t, r.stdout), ws, mode == "live",
				runtimeDir, filepath.Dir(runtimeDir), "/run/airlock", m[1], "layers", "etc-", ws, changes)
		})
	}
}
