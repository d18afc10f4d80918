package manager

import (
	"context"
	"fmt"
	"strings"

	"github.com/airlock-dev/airlock/internal/errdefs"
	"github.com/airlock-dev/airlock/internal/runtime"
)

// maxPath is the longest path accepted (PATH_MAX).
const maxPath = 4096

// Files returns the file operations of a running sandbox. Paths given to
// them resolve inside the sandbox (its agent does the work there), so
// `../../etc/passwd` can only ever name the sandbox's own file.
func (m *Manager) Files(ctx context.Context, id string) (runtime.Files, error) {
	_, rt, err := m.live(ctx, id)
	if err != nil {
		return nil, err
	}
	fs, ok := rt.(runtime.Files)
	if !ok {
		return nil, fmt.Errorf("files: the %s runtime serves no files: %w", runtimeOf(rt), errdefs.ErrNotSupported)
	}
	return fs, nil
}

// CheckPath validates a path from the API before it reaches the agent.
func CheckPath(name, p string) error {
	switch {
	case p == "":
		return invalid("%s: empty (give an absolute path or one relative to /workspace)", name)
	case strings.ContainsRune(p, 0):
		return invalid("%s: contains a NUL byte", name)
	case len(p) > maxPath:
		return fmt.Errorf("%s: %d bytes, the limit is %d: %w", name, len(p), maxPath, errdefs.ErrInvalid)
	}
	return nil
}
