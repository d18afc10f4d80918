package manager

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/internal/quota"
	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/store"
	"github.com/airlock-dev/airlock/internal/workspace"
)

// Copy-on-write snapshots (see snapshot.go).
//
// When the workspace volumes' images can be cloned (quota.MethodClone:
// their directory has reflinks, or is the daemon's XFS pool), a snapshot
// is a clone of the volume's ext4 image taken with the sandbox's cgroup
// frozen and the volume's filesystem frozen (FIFREEZE), kept in the
// volume directory (quota.Volumes.SnapshotImage); a sandbox made from it
// gets a clone of that image as its volume. Both take the same time
// whatever the workspace holds. Restore and changes mount the image
// read-only on a private directory and copy or compare from there.
// Otherwise snapshots are copies of the tree (snapshot.go).

// snapCoW says whether new snapshots are clones.
func (m *Manager) snapCoW() bool {
	return m.cfg.Volumes != nil && m.cfg.Volumes.Method() == quota.MethodClone
}

// snapIsImage says whether snapshot id is a cloned image (else a copied
// tree).
func (m *Manager) snapIsImage(id string) bool {
	if m.cfg.Volumes == nil {
		return false
	}
	fi, err := os.Lstat(m.cfg.Volumes.SnapshotImage(id))
	return err == nil && fi.Mode().IsRegular()
}

// viewSnapshot is snapshotView with how the snapshot is kept and whether
// it holds the root layer.
func (m *Manager) viewSnapshot(sn *store.Snapshot) api.Snapshot {
	v := snapshotView(sn)
	v.CopyOnWrite = m.snapIsImage(sn.ID)
	v.Root = m.rootHeld(sn.ID)
	return v
}

// cloneSnapshot takes snapshot sid of the volume at ws as a clone of its
// image. Called with the sandbox's cgroup frozen. It returns the bytes
// and entries the workspace holds. extra is what the snapshot's root layer
// will add, counted against the quota with the workspace.
func (m *Manager) cloneSnapshot(ctx context.Context, ws, sid string, extra int64) (int64, int, error) {
	var s unix.Statfs_t
	if err := unix.Statfs(ws, &s); err != nil {
		return 0, 0, err
	}
	// The quota counts what the snapshot holds, though the clone shares
	// it until the sandbox rewrites it.
	if err := m.makeRoom(ctx, int64(s.Blocks-s.Bfree)*s.Bsize+extra); err != nil {
		return 0, 0, err
	}
	used, inodes, err := m.cfg.Volumes.Snapshot(filepath.Base(ws), sid)
	if err != nil {
		return 0, 0, err
	}
	// ext4 keeps its first ten inodes (the root's among them) in use.
	return used, int(max(inodes-10, 0)), nil
}

// copySnapshotInto copies snapshot sn's workspace into the volume at ws:
// from its copied tree, or through a read-only mount of its image (a
// daemon that no longer clones, a restore that keeps the runtime). With
// replace the volume is emptied first, once the snapshot is readable.
func (m *Manager) copySnapshotInto(sn *store.Snapshot, ws string, replace bool) error {
	src, done, err := m.mountSnapshot(sn)
	if err != nil {
		return err
	}
	defer done()
	if replace {
		if err := workspace.EmptyDir(ws); err != nil {
			return err
		}
	}
	_, err = workspace.CopyInto(src, ws)
	return err
}

// mountSnapshot mounts snapshot sn's files read-only on a private
// directory and returns it with what undoes the mount; a copied tree is
// returned as it is.
func (m *Manager) mountSnapshot(sn *store.Snapshot) (string, func(), error) {
	if !m.snapIsImage(sn.ID) {
		return m.snapTree(sn.ID), func() {}, nil
	}
	dir, err := os.MkdirTemp(m.cfg.SnapshotDir, ".mnt-")
	if err != nil {
		return "", nil, err
	}
	umount, err := m.cfg.Volumes.MountSnapshot(sn.ID, dir)
	if err != nil {
		os.Remove(dir)
		return "", nil, fmt.Errorf("mount snapshot %s: %w", sn.ID, err)
	}
	return dir, func() {
		if err := umount(); err != nil {
			m.log.Error("unmount a snapshot", "snapshot", sn.ID, "dir", dir, "err", err)
		}
		os.Remove(dir)
	}, nil
}

// cleanSnapshotMounts undoes the read-only mounts a killed daemon left.
func (m *Manager) cleanSnapshotMounts() {
	ents, _ := os.ReadDir(m.cfg.SnapshotDir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".mnt-") {
			p := filepath.Join(m.cfg.SnapshotDir, e.Name())
			unix.Unmount(p, unix.MNT_DETACH)
			os.Remove(p)
		}
	}
}

// workspaceFromSnapshot makes a new sandbox's workspace volume a clone of
// its snapshot's image, when the snapshot is one and the daemon clones;
// the snapshot must fit the sandbox's disk. It reports whether it did
// (if not, fillFromSnapshot copies).
func (m *Manager) workspaceFromSnapshot(ctx context.Context, spec *runtime.Spec, rec specRecord) (bool, error) {
	if rec.FromSnapshot == "" || !m.snapCoW() || !m.snapIsImage(rec.FromSnapshot) {
		return false, nil
	}
	sn, err := m.st.GetSnapshot(ctx, "", rec.FromSnapshot)
	if err != nil {
		return false, fmt.Errorf("from_snapshot %s: %w", rec.FromSnapshot, err)
	}
	sn = m.workspacePart(sn) // the root layer goes to the root's tmpfs
	if d := spec.Limits.Disk; d > 0 && (sn.Size > d || int64(sn.Files) > d/quota.InodeRatio) {
		return false, invalid("snapshot %s holds %d bytes in %d files; the sandbox's workspace holds at most %d bytes and %d files (resources.disk)", sn.ID, sn.Size, sn.Files, d, d/quota.InodeRatio)
	}
	spec.WorkspaceSnapshot = sn.ID
	return true, nil
}

// removeSnapshotFiles removes what holds a snapshot: its directory and
// its image.
func (m *Manager) removeSnapshotFiles(id string) error {
	err := os.RemoveAll(m.snapDir(id))
	if m.cfg.Volumes != nil {
		if ierr := m.cfg.Volumes.RemoveSnapshot(id); ierr != nil && err == nil {
			err = ierr
		}
	}
	return err
}

// snapshotFilesExist says whether a stored snapshot still has its files.
func (m *Manager) snapshotFilesExist(id string) bool {
	if m.snapIsImage(id) {
		return true
	}
	_, err := os.Lstat(m.snapTree(id))
	return err == nil
}

// orphanImages removes snapshot images without a row (a daemon killed
// between the clone and the store's write).
func (m *Manager) orphanImages(rows map[string]bool) {
	if m.cfg.Volumes == nil {
		return
	}
	for _, id := range m.cfg.Volumes.SnapshotIDs() {
		if !rows[id] {
			m.log.Info("removing an unfinished snapshot image", "snapshot", id)
			m.cfg.Volumes.RemoveSnapshot(id)
		}
	}
}
