package main

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/policy"
)

// The workspace rows of part 1 (issue 15, row 2): `airlock run --workspace
// W -- /bin/true` with W a 1 GiB tree in which every default protected
// path exists, in the default mode (an overlay applied when the command
// ends) and in live mode. Protection and the overlay must not cost more
// for a large workspace: the ratio to bwrap should be airlock run's own.
const (
	benchWorkspaceFiles = 8192
	benchWorkspaceFile  = 128 << 10 // bytes: 8192 files make 1 GiB
)

// protectedDirs are the default protected paths made as directories (with a
// file in each); the others are files.
var protectedDirs = map[string]bool{
	".config/fish": true, ".git/hooks": true, ".git/worktrees": true, ".git/modules": true,
	".config/git": true, ".ssh": true, ".github/workflows": true, ".vscode": true, ".idea": true,
	".devcontainer": true, ".claude": true, ".cursor": true, ".continue": true, ".windsurf": true,
	".codex": true, ".gemini": true,
}

// benchWorkspace makes the rows' workspace under a new directory (on disk:
// /var/tmp when it can), and a changes root of its own for the runs, so
// that what the caller's root holds does not weigh on the rows. The caller
// removes dir.
func benchWorkspace() (dir, ws, changes string, err error) {
	dir, err = os.MkdirTemp("/var/tmp", "airlock-bench-ws-")
	if err != nil {
		if dir, err = os.MkdirTemp("", "airlock-bench-ws-"); err != nil {
			return "", "", "", err
		}
	}
	ws, changes = filepath.Join(dir, "ws"), filepath.Join(dir, "changes")
	for i := 0; i < benchWorkspaceFiles; i++ {
		sub := filepath.Join(ws, "src", fmt.Sprintf("d%02d", i%64))
		if i < 64 {
			if err = os.MkdirAll(sub, 0o755); err != nil {
				return dir, "", "", err
			}
		}
		fd, err := unix.Open(filepath.Join(sub, fmt.Sprintf("f%04d", i)), unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return dir, "", "", err
		}
		err = unix.Fallocate(fd, 0, 0, benchWorkspaceFile)
		unix.Close(fd)
		if err != nil {
			return dir, "", "", fmt.Errorf("fallocate: %w", err)
		}
	}
	for _, p := range policy.DefaultProtected() {
		path := filepath.Join(ws, p)
		if protectedDirs[p] {
			path = filepath.Join(path, "f")
		}
		if err = os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return dir, "", "", err
		}
		if err = os.WriteFile(path, []byte("x\n"), 0o644); err != nil {
			return dir, "", "", err
		}
	}
	if err = os.Mkdir(changes, 0o700); err != nil {
		return dir, "", "", err
	}
	return dir, ws, changes, nil
}

// workspaceRowsNote names what the workspace rows ran on.
func workspaceRowsNote(ws string) string {
	return fmt.Sprintf("the workspace rows' workspace: %s, %d files of %d KiB (1 GiB) and all %d default protected paths",
		ws, benchWorkspaceFiles, benchWorkspaceFile>>10, len(policy.DefaultProtected()))
}
