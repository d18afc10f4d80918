package native

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"
	"golang.org/x/sys/unix"
)

// protect makes each workspace-relative path in paths read-only inside the
// sandbox. A path that exists is bind-mounted read-only onto itself. For a
// path that does not exist, the first missing component gets an empty
// placeholder directory (created in the host workspace) mounted read-only,
// so the sandbox cannot create it. Placeholders are directories even where
// the protected name is a file (.mcp.json): git does not track empty
// directories, so `git add -A` inside or outside cannot commit them. Every directory between the workspace and a
// protected path is pinned (bind-mounted onto itself): a mount point cannot
// be renamed or removed, so the sandbox cannot move `.git` aside and plant a
// fresh `.git/hooks`. It returns the placeholders it created, relative to ws.
//
// Without placeholders (an overlay workspace, whose upper layer apply
// checks instead), a path that does not exist is left absent.
func protect(ws string, paths []string, placeholders bool) ([]string, error) {
	var created []string
	pinned := map[string]bool{}
	readOnly := map[string]bool{}
	for _, rel := range paths {
		rel = filepath.Clean(rel)
		if rel == "." || filepath.IsAbs(rel) || rel == ".." || strings.HasPrefix(rel, "../") {
			return created, fmt.Errorf("protected path %q must be relative to the workspace", rel)
		}
		parts := strings.Split(rel, "/")
		cur := ws
		for i, part := range parts {
			next := filepath.Join(cur, part)
			last := i == len(parts)-1
			if readOnly[next] {
				break // an ancestor is read-only already
			}
			fi, err := os.Lstat(next)
			if errors.Is(err, fs.ErrNotExist) {
				if !placeholders {
					break
				}
				if err := os.Mkdir(next, 0o755); err != nil {
					return created, fmt.Errorf("protect %s: %w", rel, err)
				}
				created = append(created, strings.TrimPrefix(next, ws+"/"))
				if err := bindRO(next, next); err != nil {
					return created, fmt.Errorf("protect %s: %w", rel, err)
				}
				readOnly[next] = true
				break
			}
			if err != nil {
				return created, fmt.Errorf("protect %s: %w", rel, err)
			}
			if fi.Mode()&fs.ModeSymlink != 0 {
				// Protect what the link points to when that is inside
				// the workspace; a target outside is on a read-only
				// root already or not visible at all.
				target, err := securejoin.SecureJoin(ws, strings.TrimPrefix(next, ws))
				if err != nil {
					return created, fmt.Errorf("protect %s: %w", rel, err)
				}
				if _, err := os.Stat(target); err == nil {
					if err := bindRO(target, target); err != nil {
						return created, fmt.Errorf("protect %s: %w", rel, err)
					}
				}
				break
			}
			if last || !fi.IsDir() {
				if err := bindRO(next, next); err != nil {
					return created, fmt.Errorf("protect %s: %w", rel, err)
				}
				readOnly[next] = true
				break
			}
			if !pinned[next] {
				if err := mount(next, next, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
					return created, fmt.Errorf("protect %s: pin %s: %w", rel, part, err)
				}
				pinned[next] = true
			}
			cur = next
		}
	}
	return created, nil
}
