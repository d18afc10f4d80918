//go:build linux

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// imageProbeSrc is the only program of the test images: static (no
// libraries needed), it says it ran and, with "sleep", waits.
const imageProbeSrc = `package main

import (
	"fmt"
	"os"
	"time"
)

func main() {
	fmt.Println("probe ran")
	if len(os.Args) > 1 && os.Args[1] == "sleep" {
		time.Sleep(60 * time.Second)
	}
}
`

// buildImageProbe builds imageProbeSrc into dir/probe.
func buildImageProbe(t *testing.T, dir string) string {
	t.Helper()
	src := filepath.Join(dir, "probe.go")
	if err := os.WriteFile(src, []byte(imageProbeSrc), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "probe")
	cmd := exec.Command("go", "build", "-o", out, src)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the image probe: %v\n%s", err, b)
	}
	return out
}

// newImage makes a minimal image directory under parent holding
// /bin/probe. layout adds entries: a name ending in "/" is a directory,
// "name -> target" a symlink, anything else an empty file.
func newImage(t *testing.T, parent, name, probe string, layout ...string) string {
	t.Helper()
	img := filepath.Join(parent, name)
	if err := os.MkdirAll(filepath.Join(img, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(probe, filepath.Join(img, "bin", "probe")); err != nil {
		t.Fatal(err)
	}
	for _, e := range layout {
		var err error
		switch link, target, ok := strings.Cut(e, " -> "); {
		case ok:
			err = os.Symlink(target, filepath.Join(img, link))
		case strings.HasSuffix(e, "/"):
			err = os.Mkdir(filepath.Join(img, e), 0o755)
		default:
			err = os.WriteFile(filepath.Join(img, e), nil, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return img
}

// A hostile image layout (a mount point that is a symlink or not a
// directory) is refused before anything is created, with exit 125 and one
// line naming the image and the path; the same image with directories
// there, or without those entries, starts (control).
func TestImageLayout(t *testing.T) {
	needRoot(t)
	parent := t.TempDir()
	os.Chmod(parent, 0o755)
	probe := buildImageProbe(t, parent)
	for _, c := range []struct {
		name   string
		layout []string
		want   string
	}{
		{"dev-to-etc", []string{"etc/", "dev -> /etc"}, "/dev is a symlink (to /etc); the sandbox mounts its own /dev there: make it a directory"},
		{"dev-relative", []string{"etc/", "dev -> etc"}, "/dev is a symlink (to etc)"},
		{"proc-file", []string{"proc"}, "/proc is a regular file, not a directory; the sandbox mounts its own /proc there"},
		{"tmp-to-root", []string{"tmp -> /"}, "/tmp is a symlink (to /)"},
		{"workspace-to-etc", []string{"etc/", "workspace -> /etc"}, "/workspace is a symlink (to /etc); the sandbox mounts the workspace there"},
		{"etc-to-usr", []string{"usr/", "etc -> usr"}, "/etc is a symlink (to usr)"},
	} {
		img := newImage(t, parent, c.name, probe, c.layout...)
		r := run(t, opts{}, []string{"--image", img}, "/bin/probe")
		line := strings.TrimSuffix(r.stderr, "\n")
		if r.code != 125 || strings.Contains(line, "\n") || !strings.Contains(line, "image "+img+": "+c.want) {
			t.Errorf("%s: want exit 125 and one line naming %q\n%s", c.name, "image "+img+": "+c.want, r)
		}
		if strings.Contains(r.stdout, "probe ran") {
			t.Errorf("%s: the command ran", c.name)
		}
	}

	// Controls: the mount points as directories, or absent, start.
	for name, layout := range map[string][]string{
		"dirs":   {"dev/", "proc/", "tmp/", "workspace/", "etc/"},
		"absent": nil,
	} {
		img := newImage(t, parent, "good-"+name, probe, layout...)
		r := run(t, opts{}, []string{"--image", img}, "/bin/probe")
		if r.code != 0 || r.stdout != "probe ran\n" {
			t.Errorf("control (%s): a correct image must start\n%s", name, r)
		}
	}
}

// A refused image leaves nothing behind: run rootless with a state root of
// the test's own, that root holds no sandbox afterwards. Control: while a
// sandbox of a correct image runs, the same oracle sees it.
func TestImageLayoutLeavesNothing(t *testing.T) {
	needRoot(t)
	parent := nobodyDir(t)
	probe := buildImageProbe(t, parent)
	stateParent := nobodyDir(t)
	o := opts{nobody: true, env: []string{"XDG_RUNTIME_DIR=" + stateParent}}
	stateRoot := filepath.Join(stateParent, "airlock")
	sandboxes := func() []string {
		var ids []string
		entries, _ := os.ReadDir(stateRoot)
		for _, e := range entries {
			if e.Name() != "cache" {
				ids = append(ids, e.Name())
			}
		}
		return ids
	}

	bad := newImage(t, parent, "bad", probe, "dev -> /etc")
	r := run(t, o, []string{"--image", bad}, "/bin/probe")
	if r.code != 125 || !strings.Contains(r.stderr, "image "+bad+": /dev is a symlink (to /etc)") {
		t.Fatalf("hostile image, rootless: want exit 125 naming /dev\n%s", r)
	}
	if ids := sandboxes(); len(ids) != 0 {
		t.Errorf("a refused image left state behind in %s: %v", stateRoot, ids)
	}

	good := newImage(t, parent, "good", probe, "dev/")
	b := start(t, o, "run", "--image", good, "--", "/bin/probe", "sleep")
	b.stdout.waitFor(t, regexp.MustCompile(`^probe ran`), 30*time.Second)
	if ids := sandboxes(); len(ids) != 1 {
		t.Errorf("control: a running sandbox's state in %s: got %v, want one", stateRoot, ids)
	}
}
