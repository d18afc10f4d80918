package gvisor

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlock-dev/airlock/internal/runtime"
)

// mountAt is the mount in effect at dst: the last one there.
func mountAt(s *specs.Spec, dst string) *specs.Mount {
	for i := len(s.Mounts) - 1; i >= 0; i-- {
		if s.Mounts[i].Destination == dst {
			return &s.Mounts[i]
		}
	}
	return nil
}

// The OCI spec carries every part of the sandbox spec: read-only root and
// system directories, the workspace read-write, protected paths read-only
// (placeholders for missing ones, parents pinned), denied paths masked,
// sizes, rlimits and cgroup resources.
func TestOCISpec(t *testing.T) {
	ws := t.TempDir()
	if err := os.MkdirAll(filepath.Join(ws, ".git", "hooks"), 0o755); err != nil {
		t.Fatal(err)
	}
	hidden := t.TempDir()
	rootfs := t.TempDir()
	spec := &runtime.Spec{
		Protected: []string{".git/hooks", ".vscode", ".github/workflows"},
		ReadOnly:  []string{"/opt"},
		Deny:      []string{hidden},
		Limits:    runtime.Limits{Memory: 64 << 20, Pids: 100, CPU: 0.5, Tmp: 1 << 20, NoFile: 77, FileSize: 1 << 20},
	}
	b, err := ociSpec("0123456789abcdef", spec, rootfs, ws, "/etc", "/bin/true", "/dev/null", "", true)
	if err != nil {
		t.Fatal(err)
	}
	s := b.spec
	if !s.Root.Readonly {
		t.Error("root is writable")
	}
	if m := mountAt(s, "/usr"); m == nil || !slices.Contains(m.Options, "ro") {
		t.Errorf("/usr: %+v, want a read-only bind", m)
	}
	if m := mountAt(s, "/workspace"); m == nil || m.Source != ws || !slices.Contains(m.Options, "rw") {
		t.Errorf("/workspace: %+v, want a read-write bind of %s", m, ws)
	}
	for _, p := range []string{"/workspace/.git/hooks", "/workspace/.vscode", "/workspace/.github/workflows"} {
		if m := mountAt(s, p); m == nil || !slices.Contains(m.Options, "ro") {
			t.Errorf("%s: %+v, want read-only", p, m)
		}
	}
	for _, p := range []string{"/workspace/.git", "/workspace/.github"} {
		if m := mountAt(s, p); m == nil || m.Type != "bind" {
			t.Errorf("%s: %+v, want pinned (bound onto itself)", p, m)
		}
	}
	// Missing protected paths (and their missing parents) are placeholders.
	want := []string{filepath.Join(ws, ".vscode"), filepath.Join(ws, ".github"), filepath.Join(ws, ".github", "workflows")}
	if !slices.Equal(b.placeholder, want) {
		t.Errorf("placeholders %q, want %q", b.placeholder, want)
	}
	// Control: an existing protected path is no placeholder.
	if slices.Contains(b.placeholder, filepath.Join(ws, ".git", "hooks")) {
		t.Error(".git/hooks exists but was listed as a placeholder")
	}
	if m := mountAt(s, hidden); m == nil || m.Type != "tmpfs" || !slices.Contains(m.Options, "ro") {
		t.Errorf("denied %s: %+v, want masked", hidden, m)
	}
	if m := mountAt(s, "/opt"); m == nil || !slices.Contains(m.Options, "ro") {
		t.Errorf("--ro /opt: %+v", m)
	}
	if m := mountAt(s, "/tmp"); m == nil || !slices.Contains(m.Options, "size=1048576") {
		t.Errorf("/tmp: %+v, want size=1048576", m)
	}
	if m := mountAt(s, "/sys"); m == nil || m.Type != "tmpfs" || !slices.Contains(m.Options, "ro") {
		t.Errorf("/sys: %+v, want an empty read-only tmpfs", m)
	}
	// The host cgroup is airlock's, not runsc's: nothing in the spec
	// for runsc to make, and the limits go to airlock's cgroup.
	if s.Linux.Resources != nil || s.Linux.CgroupsPath != "" {
		t.Errorf("resources %+v, cgroupsPath %q: want none (airlock makes the cgroup)", s.Linux.Resources, s.Linux.CgroupsPath)
	}
	if l := cgroupLimits(spec); l.Memory != 64<<20 || l.Pids != 100+sentryPids || l.CPU != 0.5 {
		t.Errorf("cgroup limits %+v", l)
	}
	if !slices.Contains(s.Process.Rlimits, specs.POSIXRlimit{Type: "RLIMIT_NOFILE", Hard: 77, Soft: 77}) {
		t.Errorf("rlimits %+v, want nofile 77", s.Process.Rlimits)
	}
	if c := s.Process.Capabilities; c == nil || len(c.Bounding)+len(c.Effective)+len(c.Permitted) != 0 || !s.Process.NoNewPrivileges {
		t.Errorf("process privileges: caps %+v, no_new_privs %v", c, s.Process.NoNewPrivileges)
	}
}

// A symlinked protected path is refused, not followed.
func TestOCISpecProtectedSymlink(t *testing.T) {
	ws := t.TempDir()
	if err := os.Symlink("/etc", filepath.Join(ws, ".vscode")); err != nil {
		t.Fatal(err)
	}
	_, err := ociSpec("0123456789abcdef", &runtime.Spec{Protected: []string{".vscode"}}, t.TempDir(), ws, "/etc", "/bin/true", "", "", true)
	if err == nil {
		t.Fatal("a symlinked protected path was accepted")
	}
	// Control: the same path as a directory is accepted.
	ws2 := t.TempDir()
	os.Mkdir(filepath.Join(ws2, ".vscode"), 0o755)
	if _, err := ociSpec("0123456789abcdef", &runtime.Spec{Protected: []string{".vscode"}}, t.TempDir(), ws2, "/etc", "/bin/true", "", "", true); err != nil {
		t.Fatal(err)
	}
}

// A spec without a seccomp filter is refused; with one it is accepted.
func TestUnsupported(t *testing.T) {
	if err := unsupported(&runtime.Spec{}); err == nil {
		t.Fatal("a spec without a seccomp filter was accepted")
	}
	if os.Geteuid() == 0 {
		if err := unsupported(&runtime.Spec{Seccomp: []runtime.SockFilter{{}}}); err != nil {
			t.Fatal(err)
		}
	}
	// The overlay workspace needs root (airlock mounts it on the host):
	// refused without, naming live mode; accepted as root.
	err := unsupported(&runtime.Spec{Seccomp: []runtime.SockFilter{{}}, Insecure: runtime.Insecure{NoCgroups: true}, Workspace: "/w", WorkspaceLayer: "/l"})
	if os.Geteuid() == 0 && err != nil {
		t.Errorf("an overlay workspace as root: %v", err)
	}
	if os.Geteuid() != 0 && (!errors.Is(err, ErrUnsupported) || !contains(err.Error(), "--workspace-mode live")) {
		t.Errorf("an overlay workspace without root: %v", err)
	}
	// So is a root layer from a snapshot.
	err = unsupported(&runtime.Spec{Seccomp: []runtime.SockFilter{{}}, Insecure: runtime.Insecure{NoCgroups: true}, RootFrom: "/snap/root"})
	if !errors.Is(err, ErrUnsupported) || !contains(err.Error(), "root layer") {
		t.Errorf("a root layer from a snapshot: %v", err)
	}
}

// Find names the install command when runsc is missing.
func TestFindMissing(t *testing.T) {
	t.Setenv("AIRLOCK_RUNSC", filepath.Join(t.TempDir(), "runsc"))
	_, err := Find()
	if err == nil || !errors.Is(err, ErrNotInstalled) {
		t.Fatalf("Find: %v", err)
	}
	if msg := err.Error(); !contains(msg, "scripts/install-runsc") || !contains(msg, Version) {
		t.Errorf("error %q does not name the install command and version", msg)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// A --ro, --rw or --bind source that is not on the host is refused with
// what it is, before runsc would fail to start; an existing one is bound.
func TestOCISpecMissingSource(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "not-there")
	for _, c := range []struct {
		what string
		spec runtime.Spec
	}{
		{"read-only path", runtime.Spec{ReadOnly: []string{missing}}},
		{"writable path", runtime.Spec{Writable: []string{missing}}},
		{"bind source", runtime.Spec{Binds: []runtime.Bind{{Source: missing, Target: "/x"}}}},
	} {
		_, err := ociSpec("0123456789abcdef", &c.spec, t.TempDir(), "", "/etc", "/bin/true", "", "", true)
		if err == nil || !strings.Contains(err.Error(), c.what) || !strings.Contains(err.Error(), missing) {
			t.Errorf("%s missing: %v", c.what, err)
		}
	}
	// Control: the same entries with a source that exists.
	there := t.TempDir()
	b, err := ociSpec("0123456789abcdef", &runtime.Spec{ReadOnly: []string{there}, Binds: []runtime.Bind{{Source: there, Target: "/x"}}}, t.TempDir(), "", "/etc", "/bin/true", "", "", true)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range b.spec.Mounts {
		if m.Source == there {
			n++
		}
	}
	if n != 2 {
		t.Errorf("%d mounts of %s, want 2: %+v", n, there, b.spec.Mounts)
	}
}

// A memory limit the Sentry cannot start under is refused at once, with
// the backend's minimum; the minimum itself is accepted.
func TestUnsupportedMemory(t *testing.T) {
	spec := &runtime.Spec{Seccomp: runtime.Program{{Code: 6}}, Insecure: runtime.Insecure{NoCgroups: true}}
	spec.Limits.Memory = 16 << 20
	if err := unsupported(spec); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "32MiB") {
		t.Errorf("16MiB: %v", err)
	}
	spec.Limits.Memory = MinMemory
	if err := unsupported(spec); err != nil {
		t.Errorf("control, %dMiB: %v", MinMemory>>20, err)
	}
}
