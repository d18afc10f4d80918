package runtime

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// kernelFS are the filesystems through which the host kernel is read and
// tuned (/proc, /sys, cgroups, debug and security interfaces). None of
// them is ever a sandbox's to write.
var kernelFS = map[int64]string{
	unix.PROC_SUPER_MAGIC:    "proc",
	unix.SYSFS_MAGIC:         "sysfs",
	unix.CGROUP_SUPER_MAGIC:  "cgroup",
	unix.CGROUP2_SUPER_MAGIC: "cgroup2",
	unix.DEBUGFS_MAGIC:       "debugfs",
	unix.TRACEFS_MAGIC:       "tracefs",
	unix.SECURITYFS_MAGIC:    "securityfs",
	unix.BPF_FS_MAGIC:        "bpf",
	unix.PSTOREFS_MAGIC:      "pstore",
	unix.EFIVARFS_MAGIC:      "efivarfs",
	unix.DEVPTS_SUPER_MAGIC:  "devpts",
	unix.BINFMTFS_MAGIC:      "binfmt_misc",
	unix.SELINUX_MAGIC:       "selinuxfs",
	unix.SMACK_MAGIC:         "smackfs",
	unix.NSFS_MAGIC:          "nsfs",
}

// CheckWritableSource refuses a host path that a sandbox would write
// through (a workspace, a writable path or bind) when it lies on one of
// the host kernel's own filesystems: on gVisor, whose gofer writes for the
// sandbox, `--bind /sys/...:rw` let it retune the host's kernel; on native
// the idmapped mount fails with an unhelpful error. what names the entry.
// A path that cannot be looked at is left to the runtime's own error.
func CheckWritableSource(what, path string) error {
	var st unix.Statfs_t
	if unix.Statfs(path, &st) != nil {
		return nil
	}
	if fs, ok := kernelFS[int64(st.Type)]; ok {
		return fmt.Errorf("%s %s is on the host kernel's %s filesystem: a sandbox may not write there (mount it read-only, or choose another directory)", what, path, fs)
	}
	return nil
}
