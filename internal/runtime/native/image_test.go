//go:build linux

package native_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/internal/policy"
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
