package native

import (
	"fmt"

	"github.com/airlock-dev/airlock/internal/quota"
)

// minTmpfsInodes is the fewest inodes a sandbox tmpfs gets, however small.
const minTmpfsInodes = 1024

// tmpfsOptions are the mount options of a tmpfs the sandbox gets: size
// bytes, mode (octal, e.g. 0o1777) and an inode cap proportional to the
// size (one per quota.InodeRatio bytes, at least minTmpfsInodes), so that
// empty files, directories and links, which take no pages, cannot pin
// unbounded kernel memory. The inodes and pages of a tmpfs are charged to
// the memory cgroup of the process that creates them: the sandbox's.
func tmpfsOptions(size int64, mode uint32) string {
	return fmt.Sprintf("size=%d,nr_inodes=%d,mode=%o", size, tmpfsInodes(size), mode)
}

// tmpfsInodes is the inode cap of a sandbox tmpfs of size bytes.
func tmpfsInodes(size int64) int64 {
	return max(size/quota.InodeRatio, minTmpfsInodes)
}
