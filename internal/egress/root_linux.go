package egress

import (
	"os"

	"golang.org/x/sys/unix"
)

// openInRoot opens path for reading as it resolves inside root (symlinks,
// "..", and absolute links included, never leaving root).
func openInRoot(root, path string) (*os.File, error) {
	dir, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(dir)
	fd, err := unix.Openat2(dir, path, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path + " in " + root, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}
