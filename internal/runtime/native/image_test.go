//go:build linux

package native_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/runtime/native"
)

// TestImageRoot runs a sandbox whose root is an image directory holding a
// single static binary, and checks that the image is the root, that the
// host's /usr is not visible, and that writes land in the copy-on-write
// layer, never in the image.
func TestImageRoot(t *testing.T) {
	needRoot(t)
	img := t.TempDir()
	os.Chmod(img, 0o755)
	for _, d := range []string{"bin", "etc"} {
		os.Mkdir(filepath.Join(img, d), 0o755)
	}
	cmd := exec.Command("go", "build", "-o", filepath.Join(img, "bin", "probe"), "./testdata/probe")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build probe: %v\n%s", err, out)
	}
	marker := filepath.Join(img, "etc", "marker")
	os.WriteFile(marker, []byte("from-image"), 0o644)

	sb := newSandbox(t, &policy.Policy{Image: img})
	out, st := run(t, sb, "/bin/probe")
	if st.Code != 0 {
		t.Fatalf("probe failed: %+v\n%s", st, out)
	}
	for _, want := range []string{`marker="from-image"`, "hostusr=false", "hostname=sandbox", "write=<nil>", "after=changed"} {
		if !strings.Contains(out, want) {
			t.Errorf("probe output lacks %q:\n%s", want, out)
		}
	}
	if b, _ := os.ReadFile(marker); string(b) != "from-image" {
		t.Errorf("the image was modified: %q", b)
	}
}

// CheckImage refuses an image whose mount points are symlinks or not
// directories, naming the image and the path; directories or absent
// entries pass.
func TestCheckImage(t *testing.T) {
	parent := t.TempDir()
	mk := func(name string, entries map[string]string) string {
		img := filepath.Join(parent, name)
		os.Mkdir(img, 0o755)
		for p, kind := range entries {
			full := filepath.Join(img, p)
			var err error
			switch {
			case kind == "dir":
				err = os.Mkdir(full, 0o755)
			case kind == "file":
				err = os.WriteFile(full, nil, 0o644)
			case kind == "fifo":
				err = syscall.Mkfifo(full, 0o644)
			default:
				err = os.Symlink(strings.TrimPrefix(kind, "->"), full)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		return img
	}
	for i, c := range []struct {
		entries map[string]string
		want    string // "" for no error
	}{
		{nil, ""},
		{map[string]string{"dev": "dir", "proc": "dir", "tmp": "dir", "workspace": "dir", "etc": "dir", "usr": "->/opt"}, ""},
		{map[string]string{"dev": "->/etc"}, "/dev is a symlink (to /etc); the sandbox mounts its own /dev there: make it a directory"},
		{map[string]string{"proc": "file"}, "/proc is a regular file, not a directory"},
		{map[string]string{"tmp": "fifo"}, "/tmp is a named pipe, not a directory"},
		{map[string]string{"workspace": "->."}, "/workspace is a symlink (to .)"},
		{map[string]string{"etc": "->/"}, "/etc is a symlink (to /)"},
	} {
		img := mk(fmt.Sprintf("img%d", i), c.entries)
		err := native.CheckImage(img)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: %v, want no error", c.entries, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), "image "+img+": "+c.want)):
			t.Errorf("%v: %v, want an error naming %q", c.entries, err, "image "+img+": "+c.want)
		}
	}
	file := filepath.Join(parent, "plain")
	os.WriteFile(file, nil, 0o644)
	if err := native.CheckImage(file); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("a file as the image: %v", err)
	}
	if err := native.CheckImage(filepath.Join(parent, "missing")); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("a missing image: %v", err)
	}
}
