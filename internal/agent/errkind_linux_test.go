package agent

import (
	"fmt"
	"io/fs"
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
