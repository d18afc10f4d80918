package agent

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The file errors a caller can cause are told apart from the agent's own
// failures: a rename across mounts or of a mount point is invalid, a full
// disk too large (they were "other", the API's 500); an error of the
// agent's own stays other (the control).
func TestErrKindOfCallersErrors(t *testing.T) {
	wrap := func(e error) error { return &fs.PathError{Op: "op", Path: "/x", Err: e} }
	for err, want := range map[error]string{
		wrap(unix.EXDEV):                      KindInvalid,
		wrap(unix.EBUSY):                      KindInvalid,
		wrap(unix.ENOSPC):                     KindTooLarge,
		fmt.Errorf("write: %w", unix.EDQUOT):  KindTooLarge,
		wrap(unix.ENOENT):                     KindNotFound,
		wrap(unix.EIO):                        KindOther,
		fmt.Errorf("the agent's own failure"): KindOther,
	} {
		if got := errKind(err); got != want {
			t.Errorf("%v: %s, want %s", err, got, want)
		}
	}
}

// Writing over a directory is an invalid request that leaves the
// directory as it was (it was a 403 from a temporary file made in / for
// /workspace, or a 409); writing a file in it works (the control).
func TestWriteOverDirectory(t *testing.T) {
	dir := t.TempDir()
	err := writeAtomic(dir, 0o644, strings.NewReader("x"))
	if errKind(err) != KindInvalid || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("write over a directory: %v (kind %s)", err, errKind(err))
	}
	if fi, serr := os.Stat(dir); serr != nil || !fi.IsDir() {
		t.Errorf("the directory after the refusal: %v %v", fi, serr)
	}
	if ents, _ := os.ReadDir(filepath.Dir(dir)); len(ents) != 1 {
		t.Errorf("something was left beside it: %v", ents)
	}
	if err := writeAtomic(filepath.Join(dir, "f"), 0o644, strings.NewReader("x")); err != nil {
		t.Errorf("control: %v", err)
	}
}
