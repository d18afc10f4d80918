package native

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// imageMountPoints are the directories of an image that the sandbox puts
// its own file systems on or below. Each must be a directory of the image
// itself, or absent (the runtime makes it in the copy-on-write layer). A
// symlink there would carry the mount elsewhere (a /dev that points to
// /etc gets the sandbox's /dev mounted over /etc), and a file cannot be
// mounted over, so such an image is refused before anything is created.
var imageMountPoints = []struct{ path, use string }{
	{"/dev", "the sandbox mounts its own /dev there"},
	{"/proc", "the sandbox mounts its own /proc there"},
	{"/tmp", "the sandbox mounts its own /tmp there"},
	{"/workspace", "the sandbox mounts the workspace there"},
	{"/etc", "the sandbox mounts files below it (the egress CA and trust bundle)"},
}

// CheckImage checks that dir can be a sandbox's root file system: a
// directory whose mount points (/dev, /proc, /tmp, /workspace, /etc) are
// directories or absent. The error names the image and the path at fault,
// and says what to do.
func CheckImage(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("image %s: %w (an image is a root file system directory)", dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("image %s: not a directory; an image is a root file system directory", dir)
	}
	for _, m := range imageMountPoints {
		p := filepath.Join(dir, m.path)
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("image %s: %s: %w", dir, m.path, err)
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			return fmt.Errorf("image %s: %s is a symlink (to %s); %s: make it a directory", dir, m.path, target, m.use)
		case !fi.IsDir():
			return fmt.Errorf("image %s: %s is a %s, not a directory; %s: make it a directory", dir, m.path, kindOf(fi.Mode()), m.use)
		}
	}
	return nil
}

// kindOf names a file type for a message.
func kindOf(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "regular file"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "special file"
}
