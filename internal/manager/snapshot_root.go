package manager

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/internal/egress"
	"github.com/airlock-dev/airlock/internal/errdefs"
	"github.com/airlock-dev/airlock/internal/record"
	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/sandbox"
	"github.com/airlock-dev/airlock/internal/store"
	"github.com/airlock-dev/airlock/internal/workspace"
)

// The root layer of snapshots.
//
// A native sandbox's copy-on-write root lives on a tmpfs that only its
// mount namespace reaches; its init keeps a descriptor of it, which the
// runtime hands the daemon (runtime.RootLayerer, pidfd_getfd; also after a
// restart, since the init keeps it). A snapshot copies, with the sandbox
// frozen, its rootfs/ (the root's own directories: /root, /home, /var, ...)
// and layers/upper/<name>/ (each overlay's upper layer, with whiteouts and
// opaque directories) into <snapshot>/root/{rootfs,upper}, owners shifted
// from the sandbox's host ids back to in-sandbox ids, as the workspace
// volume stores them. <snapshot>/root.json says what it holds; a snapshot
// without them holds no root (root: false).
//
// A sandbox made from such a snapshot (from_snapshot, fork) gets
// runtime.Spec.RootFrom: its init copies the layer into its own fresh tmpfs
// before mounting its overlays, so that every fork has its own writable
// copy. Restore in place re-creates the sandbox's runtime from the
// snapshot (restoreRoot): the overlays of a running sandbox cannot be
// swapped under it.

// rootMeta is what <snapshot>/root.json holds.
type rootMeta struct {
	Bytes   int64 `json:"bytes"`
	Entries int   `json:"entries"`
}

func (m *Manager) snapRoot(id string) string { return filepath.Join(m.snapDir(id), "root") }

// rootMetaOf returns what a snapshot's root layer holds, or nil for a
// snapshot without one.
func (m *Manager) rootMetaOf(id string) *rootMeta {
	b, err := os.ReadFile(filepath.Join(m.snapDir(id), "root.json"))
	if err != nil {
		return nil
	}
	var rm rootMeta
	if json.Unmarshal(b, &rm) != nil {
		return nil
	}
	if fi, err := os.Lstat(m.snapRoot(id)); err != nil || !fi.IsDir() {
		return nil
	}
	return &rm
}

// rootHeld says whether a snapshot holds its sandbox's root layer.
func (m *Manager) rootHeld(id string) bool { return m.rootMetaOf(id) != nil }

// workspacePart is sn with the bytes and entries of its root layer taken
// out: what must fit in a workspace volume.
func (m *Manager) workspacePart(sn *store.Snapshot) *store.Snapshot {
	rm := m.rootMetaOf(sn.ID)
	if rm == nil {
		return sn
	}
	cp := *sn
	cp.Size -= rm.Bytes
	cp.Files -= rm.Entries
	return &cp
}

// rootSource is a live sandbox's root layer, open for a snapshot.
type rootSource struct {
	f    *os.File
	info runtime.Info
	why  string // why there is none (f nil)
}

// openRoot opens a sandbox's root layer. A sandbox whose root layer
// cannot be read (rootless, made by an older version, another runtime)
// gets a source that copies nothing, and the snapshot says root: false.
func (m *Manager) openRoot(rt runtime.Sandbox) *rootSource {
	rl, ok := rt.(runtime.RootLayerer)
	if !ok {
		return &rootSource{why: "the runtime cannot read its root layer"}
	}
	f, err := rl.RootLayer()
	if err != nil {
		return &rootSource{why: err.Error()}
	}
	info := rt.Info()
	if info.HostIDs <= 0 {
		f.Close()
		return &rootSource{why: "its host ids are unknown"}
	}
	return &rootSource{f: f, info: info}
}

func (r *rootSource) close() {
	if r != nil && r.f != nil {
		r.f.Close()
	}
}

func (r *rootSource) path(rel string) string {
	return fmt.Sprintf("/proc/self/fd/%d/%s", r.f.Fd(), rel)
}

// size is what copying the root layer takes (see treeSize).
func (r *rootSource) size() (int64, error) {
	if r == nil || r.f == nil {
		return 0, nil
	}
	a, err := treeSize(r.path("rootfs"))
	if err != nil {
		return 0, err
	}
	b, err := treeSize(r.path("layers/upper"))
	if errors.Is(err, fs.ErrNotExist) {
		err = nil
	}
	return a + b, err
}

// copyTo copies the root layer into the snapshot directory dir (root/
// and root.json), whole or not at all; the sandbox is frozen.
func (r *rootSource) copyTo(dir string) (*rootMeta, error) {
	if r == nil || r.f == nil {
		return nil, nil
	}
	tmp := filepath.Join(dir, "root.tmp")
	fail := func(err error) (*rootMeta, error) {
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("root layer: %w", err)
	}
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return fail(err)
	}
	var rm rootMeta
	st, err := workspace.CopyTree(r.path("rootfs"), filepath.Join(tmp, "rootfs"))
	if err != nil {
		return fail(err)
	}
	// The entries setup makes (mount points, links to the system
	// directories: empty here) come along; a sandbox made from it makes
	// its own and skips these.
	rm.Entries += st.Entries
	upper := filepath.Join(tmp, "upper")
	if _, err := os.Lstat(r.path("layers/upper")); errors.Is(err, fs.ErrNotExist) {
		err = os.Mkdir(upper, 0o755)
		if err != nil {
			return fail(err)
		}
	} else if st, err = workspace.CopyTree(r.path("layers/upper"), upper); err != nil {
		return fail(err)
	} else {
		rm.Entries += st.Entries
	}
	if err := shiftOwners(tmp, r.info); err != nil {
		return fail(err)
	}
	if rm.Bytes, err = treeSize(tmp); err != nil {
		return fail(err)
	}
	b, _ := json.Marshal(rm)
	if err := os.WriteFile(filepath.Join(dir, "root.json"), b, 0o600); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "root")); err != nil {
		os.Remove(filepath.Join(dir, "root.json"))
		return fail(err)
	}
	return &rm, nil
}

// shiftOwners gives every entry of the copy under dir the in-sandbox ids
// of its host owners (info's range); an id outside it becomes 65534
// (nobody). Chown clears set-id bits, so the mode is set again, without
// the set-id bits of regular files: in-sandbox root is host root on the
// data disk, and no file the sandbox could shape may be set-id there.
// (The sandbox cannot set them itself (seccomp); a copied-up set-id host
// file has them, and inside they do nothing: no_new_privs.)
func shiftOwners(dir string, info runtime.Info) error {
	shift := func(id uint32, base int) int {
		if int64(id) >= int64(base) && int64(id) < int64(base)+int64(info.HostIDs) {
			return int(id) - base
		}
		return 65534
	}
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		if err := unix.Lchown(p, shift(st.Uid, info.HostUID), shift(st.Gid, info.HostGID)); err != nil {
			return err
		}
		mode := st.Mode & 0o7777
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			return nil
		case unix.S_IFREG:
			mode &^= unix.S_ISUID | unix.S_ISGID
		}
		return unix.Chmod(p, mode)
	})
}

// rootFits refuses a root layer larger than a sandbox's root tmpfs.
func rootFits(spec *runtime.Spec, id string, rm *rootMeta) error {
	if d := spec.Limits.Disk; d > 0 && rm.Bytes > d {
		return invalid("snapshot %s holds %d bytes of root layer; the sandbox's root layer holds at most %d bytes (resources.disk)", id, rm.Bytes, d)
	}
	return nil
}

// rootFromSnapshot sets spec.RootFrom for a sandbox made from a snapshot
// with a root layer (rec.FromSnapshot). The snapshot cannot be deleted
// until release (after the runtime made the sandbox).
func (m *Manager) rootFromSnapshot(spec *runtime.Spec, rec specRecord) (release func(), err error) {
	if rec.FromSnapshot == "" {
		return func() {}, nil
	}
	m.snaps.mu.RLock()
	if _, err := m.st.GetSnapshot(context.Background(), "", rec.FromSnapshot); err != nil {
		m.snaps.mu.RUnlock()
		return nil, fmt.Errorf("from_snapshot %s: deleted meanwhile: %w", rec.FromSnapshot, errdefs.ErrNotFound)
	}
	rm := m.rootMetaOf(rec.FromSnapshot)
	if rm == nil {
		m.snaps.mu.RUnlock()
		return func() {}, nil
	}
	if err := rootFits(spec, rec.FromSnapshot, rm); err != nil {
		m.snaps.mu.RUnlock()
		return nil, err
	}
	spec.RootFrom = m.snapRoot(rec.FromSnapshot)
	return m.snaps.mu.RUnlock, nil
}

// restoreRoot puts a sandbox back to a snapshot that holds a root layer,
// in place: the runtime sandbox is made anew under the same id from the
// snapshot (its root layer copied in by its init, its workspace volume
// filled from the snapshot), while the API sandbox keeps its id, labels,
// policy (with network changes made since), network audit, activity
// record and processes' history. Its processes end (the previous
// runtime sandbox is destroyed). The overlays of a running sandbox cannot
// be swapped under it: its init has no capabilities left to remount
// them, and changing an overlay's layers while it is mounted is undefined.
// The caller holds m.snaps.mu.
//
// What can fail before anything is destroyed (the policy, the egress
// files, the spec) leaves the sandbox as it was; a failure after (the
// new runtime sandbox, its workspace, record or gateway) leaves it
// failed, with the reason.
func (m *Manager) restoreRoot(ctx context.Context, sb *Sandbox, old runtime.Sandbox, sn *store.Snapshot) error {
	sb.mu.Lock()
	rec, state, tenant := sb.spec, sb.rec.State, sb.rec.Tenant
	sb.mu.Unlock()
	p, _, err := m.cfg.resolve(&api.CreateSandboxRequest{Image: rec.Image, PolicyName: rec.PolicyName, Policy: rec.Policy,
		Resources: rec.Resources, Caches: rec.Caches, Record: rec.Record})
	if err != nil {
		return fmt.Errorf("its policy: %w", err)
	}
	// The sandbox's tenant's caches, whoever asked (an operator key may).
	caches, err := m.cfg.prepareCaches(WithTenant(ctx, tenant), p)
	if err != nil {
		return err
	}
	spec, err := m.specs.get(p, rec, sandbox.Opts{Insecure: m.cfg.Insecure, CgroupParent: m.cfg.CgroupParent, Caches: caches})
	if err != nil {
		return err
	}
	spec.RecordExec = rec.Record
	spec.ID = runtimeID(sb.id)
	// The new runtime's processes go on from the old one's ids: an id
	// handed out again would overwrite that process's record and output,
	// and a client holding it would reach another process.
	if spec.FirstProcessID, err = m.nextProcessID(ctx, sb); err != nil {
		return err
	}
	spec.RootFrom = m.snapRoot(sn.ID)
	rm := m.rootMetaOf(sn.ID)
	if rm == nil {
		return fmt.Errorf("snapshot %s: its root layer is gone", sn.ID)
	}
	if err := rootFits(spec, sn.ID, rm); err != nil {
		return err
	}
	// The workspace: a clone of the snapshot's image as the new volume
	// where the snapshot is one (snapshot_cow.go), else copied below.
	wrec := rec
	wrec.FromSnapshot = sn.ID
	cloned, err := m.workspaceFromSnapshot(ctx, spec, wrec)
	if err != nil {
		return err
	}
	if sandbox.HasNetwork(p) {
		setup, err := egress.Load(m.egressDir(sb.id), applyNetwork(p.Network, rec.Network), m.cfg.secret)
		if err != nil {
			return err
		}
		spec.Binds = append(slices.Clip(spec.Binds), setup.Binds...)
	}
	backend, err := m.cfg.backend(rec.Runtime)
	if err != nil {
		return err
	}

	// From here on the sandbox is made anew or fails.
	sb.mu.Lock()
	if sb.ending || sb.rt != old {
		sb.mu.Unlock()
		return conflict("sandbox %s ended meanwhile", sb.id)
	}
	gw, rc := sb.egress, sb.recorder
	sb.rt, sb.egress, sb.recorder = nil, nil, nil // watch ignores the old one's end
	sb.mu.Unlock()
	if gw != nil {
		gw.Close()
	}
	if rc != nil {
		rc.Stop()
	}
	failed := func(err error) error {
		err = fmt.Errorf("the sandbox could not be made anew from the snapshot (it is failed now): %w", err)
		m.destroy(context.WithoutCancel(ctx), sb, api.StateFailed, "restore: "+err.Error(), false)
		return err
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	err = old.Destroy(dctx)
	cancel()
	if err != nil {
		return failed(fmt.Errorf("end the previous one: %w", err))
	}
	rt, err := backend.Create(ctx, spec)
	if err != nil {
		return failed(err)
	}
	sb.mu.Lock()
	ending := sb.ending // deleted meanwhile
	if !ending {
		sb.rt = rt
	}
	sb.mu.Unlock()
	if ending {
		rt.Destroy(context.WithoutCancel(ctx))
		return conflict("sandbox %s was deleted during the restore", sb.id)
	}
	m.watch(sb, rt)
	ws, err := m.workspaceOf(sb, rt)
	if err == nil && !cloned {
		err = m.copySnapshotInto(sn, ws, false)
	}
	if err != nil {
		return failed(fmt.Errorf("workspace: %w", err))
	}
	if rec.Record {
		nrc, err := record.Open(recordSink{m, sb.id})
		if err == nil {
			if err = m.startRecord(sb, rt, nrc, false); err != nil {
				nrc.Stop()
			}
		}
		if err != nil {
			return failed(err)
		}
	}
	ngw, env, err := m.restoreEgress(sb, rt)
	if err != nil {
		return failed(fmt.Errorf("egress: %w", err))
	}
	info := rt.Info()
	sb.mu.Lock()
	sb.egress, sb.egressEnv = ngw, env
	sb.rec.HostUID, sb.rec.HostGID = info.HostUID, info.HostGID
	sb.mu.Unlock()
	if state == api.StatePaused {
		if pr, ok := rt.(runtime.Pauser); ok {
			if err := pr.Pause(ctx); err != nil {
				return failed(fmt.Errorf("pause it again: %w", err))
			}
		}
	}
	if err := m.st.SetCreated(ctx, sb.id, state, info.HostUID, info.HostGID); err != nil {
		return failed(err)
	}
	return nil
}

// nextProcessID is the id past every process the sandbox has had: those
// the store keeps and those still in memory.
func (m *Manager) nextProcessID(ctx context.Context, sb *Sandbox) (uint64, error) {
	ps, err := m.st.ListProcesses(ctx, sb.id)
	if err != nil {
		return 0, fmt.Errorf("its processes: %w", err)
	}
	var top uint64
	for _, p := range ps {
		top = max(top, p.ID)
	}
	sb.mu.Lock()
	for id := range sb.procs {
		top = max(top, id)
	}
	sb.mu.Unlock()
	return top + 1, nil
}
