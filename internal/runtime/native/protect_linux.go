package native

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"

	"github.com/airlock-dev/airlock/internal/workspace"
	"golang.org/x/sys/unix"
)

// protect makes each workspace-relative path in paths read-only inside the
// sandbox. A path that exists is bind-mounted read-only onto itself. For a
// path that does not exist, the first missing component gets an empty
// placeholder directory (created in the host workspace) mounted read-only,
// so the sandbox cannot create it. Placeholders are directories even where
// the protected name is a file (.mcp.json): git does not track empty
// directories, so `git add -A` inside or outside cannot commit them; the
// exceptions are files git reads in .git (workspace.PlaceholderFile). Every directory between the workspace and a
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
				if err := MakePlaceholder(next); err != nil {
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

// MakePlaceholder creates the placeholder of the missing workspace path
// full: an empty directory, or the file workspace.PlaceholderFile gives.
func MakePlaceholder(full string) error {
	content, ok := workspace.PlaceholderFile(full)
	if !ok {
		return os.Mkdir(full, 0o755)
	}
	f, err := os.OpenFile(full, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(full)
	}
	return err
}

// RemovePlaceholder removes the placeholder full if it is still one: an
// empty directory or file, or a file placeholder as it was made.
func RemovePlaceholder(full string) {
	fi, err := os.Lstat(full)
	if err != nil {
		return
	}
	switch {
	case fi.IsDir():
		os.Remove(full) // fails, as it should, on a non-empty directory
	case !fi.Mode().IsRegular():
	case fi.Size() == 0:
		os.Remove(full)
	default:
		if content, ok := workspace.PlaceholderFile(full); ok && fi.Size() == int64(len(content)) {
			if b, err := os.ReadFile(full); err == nil && string(b) == content {
				os.Remove(full)
			}
		}
	}
}
