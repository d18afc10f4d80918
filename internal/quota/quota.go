// Package quota caps how much of the host's storage one sandbox can fill.
// A Volume is a directory on host storage with a size limit: writes past it
// fail with ENOSPC inside the volume and nowhere else. Volumes are made in
// one host directory (Volumes) by the mechanism the host offers, detected
// when it is opened:
//
//   - "loop": a sparse ext4 image per volume (made with the host's
//     mkfs.ext4, from e2fsprogs), attached to a loop device and mounted on
//     the host. Needs root, /dev/loop-control and mkfs.ext4. The volume's
//     own size is what statfs (df) reports inside it.
//
// Volumes also keeps a reserve: a volume is refused (errdefs.ErrExhausted)
// when the directory's free space, less what the live volumes may still
// grow into, less the new volume's size, would drop below the reserve, so
// that whatever else lives on that filesystem (the daemon's store) can
// always write.
//
// It must never hand out a directory without the cap it was asked for, nor
// fall back to another mechanism than the one it was opened with.
package quota

import "fmt"

// Kinds of volumes.
const (
	// KindLoop is a sparse ext4 image on a loop device.
	KindLoop = "loop"
	// KindAuto, given to Open, picks the best kind the host offers.
	KindAuto = "auto"
)

// Methods of taking a snapshot (Volumes.Method).
const (
	// MethodClone: images are cloned (reflinks).
	MethodClone = "clone"
	// MethodCopy: the caller copies files.
	MethodCopy = "copy"
)

// Options are Open's settings.
type Options struct {
	// Kind is KindAuto ("") or KindLoop.
	Kind string
	// Reserve is the free space kept on the directory's filesystem (the
	// data disk under a pool).
	Reserve int64
	// CopyOnWrite: "auto" ("") clones images where the directory's
	// filesystem has reflinks, or in a pool (Pool) when it has none;
	// "off" never clones (MethodCopy).
	CopyOnWrite string
	// Pool is the file of the XFS pool made when the directory's
	// filesystem has no reflinks ("": none is made). It must be on the
	// filesystem the directory is on.
	Pool string
	// Spares is how many volumes of each recently asked-for size are kept
	// made ahead, so that Create hands one over instead of making it
	// (spare_linux.go); only where images are cloned. 0: none.
	Spares int
}

// InodeRatio is the bytes of a volume's size per inode it may hold: a
// volume of S bytes holds at most S/InodeRatio files, directories and
// links.
const InodeRatio = 8 << 10

// Volume is one capped directory. It is recorded (JSON) in the owner's
// state so that another process can remove it (Remove) after the owner
// died.
type Volume struct {
	Kind string `json:"kind"`
	// Path is the capped directory (loop: the image's mount point).
	Path string `json:"path"`
	// Image is the ext4 image (loop).
	Image string `json:"image,omitempty"`
	Size  int64  `json:"size"`
}

func (v *Volume) String() string {
	return fmt.Sprintf("%s volume %s (%d bytes)", v.Kind, v.Path, v.Size)
}

// Human formats a size in bytes with a binary suffix.
func Human(n int64) string {
	switch {
	case n >= 1<<50:
		return fmt.Sprintf("%.4gPiB", float64(n)/(1<<50))
	case n >= 1<<40:
		return fmt.Sprintf("%.4gTiB", float64(n)/(1<<40))
	case n >= 1<<30:
		return fmt.Sprintf("%.4gGiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.4gMiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.4gKiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%dB", n)
}
