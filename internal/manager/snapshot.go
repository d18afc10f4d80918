package manager

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/internal/errdefs"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/store"
	"github.com/airlock-dev/airlock/internal/workspace"
)

// Snapshots of a sandbox's workspace.
//
// A native sandbox of the daemon has its workspace on a volume of its own
// (internal/quota), mounted on the host at <VolumeDir>/<runtime id>. A
// snapshot is taken with the sandbox's cgroup frozen so that no process
// writes meanwhile. Where the volumes' images can be cloned, it is a
// clone of the volume's image (snapshot_cow.go: copy-on-write, the same
// time whatever the workspace holds); otherwise it is a copy of the
// volume's tree in <SnapshotDir>/<id>/workspace (owners, modes, times,
// extended attributes; data by copy_file_range over data regions).
// The copy-on-write layer over the root filesystem is copied beside it
// (snapshot_root.go); processes are not captured. A sandbox made from a
// snapshot gets a clone of its image, or a copy of its tree, as its own
// volume, and a copy of its root layer, so that forks never share a
// writable byte.
//
// The store keeps one row per snapshot (store.Snapshot); files without a
// row (a daemon killed during a copy or clone) or a row without files is
// removed at start (initSnapshots).

// maxDiffBytes bounds the diffs of one changes answer.
const maxDiffBytes = 16 << 20

// maxFork bounds one fork request.
const maxFork = 64

// snapName reports whether s is a valid snapshot name: 1-128 letters,
// digits, '.', '_' or '-', starting with a letter or digit. (A regular
// expression with a {0,127} repetition cost 1700 allocations, 0.28 ms, in
// every airlock process's start.)
func snapName(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return false
		}
	}
	return true
}

// forkLabel marks the snapshots forks make: garbage collection may remove
// them (oldest first) when the quota is reached and no live sandbox was
// made from them.
const forkLabel = "airlock.fork"

// snapshots is the manager's snapshot state.
type snapshots struct {
	// mu: one snapshot, restore or deletion at a time (Lock); copies out
	// of a snapshot into new sandboxes share it (RLock).
	mu sync.RWMutex
}

func newSnapID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "snap-" + hex.EncodeToString(b)
}

func (m *Manager) snapDir(id string) string { return filepath.Join(m.cfg.SnapshotDir, id) }
func (m *Manager) snapTree(id string) string {
	return filepath.Join(m.cfg.SnapshotDir, id, "workspace")
}

// initSnapshots removes unfinished copies, directories without a row and
// rows without a directory. Called by Recover.
func (m *Manager) initSnapshots(ctx context.Context) {
	if m.cfg.SnapshotDir == "" {
		return
	}
	if err := os.MkdirAll(m.cfg.SnapshotDir, 0o700); err != nil {
		m.log.Error("snapshot directory", "err", err)
		return
	}
	os.Mkdir(filepath.Join(m.cfg.SnapshotDir, ".empty"), 0o755)
	m.cleanSnapshotMounts()
	list, err := m.st.ListSnapshots(ctx)
	if err != nil {
		m.log.Error("load snapshots", "err", err)
		return
	}
	rows := map[string]bool{}
	for _, sn := range list {
		if !m.snapshotFilesExist(sn.ID) {
			if m.cfg.Volumes != nil && !m.cfg.Volumes.ImagesReachable() {
				m.log.Warn("snapshot files unreachable: the volumes' pool is not mounted (see the warning at start); kept", "snapshot", sn.ID)
				rows[sn.ID] = true
				continue
			}
			m.log.Warn("snapshot without files: forgotten", "snapshot", sn.ID)
			m.st.DeleteSnapshot(ctx, sn.ID)
			continue
		}
		rows[sn.ID] = true
	}
	ents, _ := os.ReadDir(m.cfg.SnapshotDir)
	for _, e := range ents {
		if e.Name() == ".empty" || rows[e.Name()] {
			continue
		}
		m.log.Info("removing unfinished snapshot files", "dir", e.Name())
		os.RemoveAll(filepath.Join(m.cfg.SnapshotDir, e.Name()))
	}
	m.orphanImages(rows)
}

// snapshotView is a stored snapshot as the API shows it.
func snapshotView(sn *store.Snapshot) api.Snapshot {
	return api.Snapshot{ID: sn.ID, Name: sn.Name, SandboxID: sn.SandboxID, Image: sn.Image, Labels: sn.Labels,
		Size: sn.Size, Files: sn.Files, CreatedAt: sn.CreatedAt, Workspace: true}
}

// findSnapshot returns a snapshot the caller may see (by id or name); one
// of another tenant is not found.
func (m *Manager) findSnapshot(ctx context.Context, ref string) (*store.Snapshot, error) {
	if ref == "" {
		return nil, invalid("snapshot: empty")
	}
	tenant, _ := TenantOf(ctx)
	sn, err := m.st.GetSnapshot(ctx, tenant, ref)
	if err != nil {
		return nil, err
	}
	if !maySee(ctx, sn.Tenant) {
		return nil, fmt.Errorf("snapshot %s: %w", errdefs.Quote(ref), errdefs.ErrNotFound)
	}
	return sn, nil
}

// snapReady refuses snapshot operations on a daemon that cannot make them.
func (m *Manager) snapReady() error {
	if m.cfg.SnapshotDir == "" || m.cfg.VolumeDir == "" {
		return fmt.Errorf("snapshots need the daemon's workspaces on volumes (disk_quota: loop, as root): this daemon's are in memory: %w", errdefs.ErrNotSupported)
	}
	return nil
}

// workspaceOf returns the host directory of a live native sandbox's
// workspace volume.
func (m *Manager) workspaceOf(sb *Sandbox, rt runtime.Sandbox) (string, error) {
	if err := m.snapReady(); err != nil {
		return "", err
	}
	if r := rt.Info().Runtime; r != "" && r != "native" {
		return "", fmt.Errorf("sandbox %s: snapshots are for the native runtime, not %s: %w", sb.id, r, errdefs.ErrNotSupported)
	}
	dir := filepath.Join(m.cfg.VolumeDir, runtimeID(sb.id))
	var st, parent unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return "", fmt.Errorf("sandbox %s: its workspace is not on a volume: %w", sb.id, errdefs.ErrNotSupported)
	}
	if err := unix.Lstat(m.cfg.VolumeDir, &parent); err != nil || parent.Dev == st.Dev {
		return "", fmt.Errorf("sandbox %s: its workspace volume is not mounted: %w", sb.id, errdefs.ErrNotSupported)
	}
	return dir, nil
}

// liveForSnapshot returns a running or paused sandbox with its runtime.
func (m *Manager) liveForSnapshot(ctx context.Context, id string) (*Sandbox, runtime.Sandbox, bool, error) {
	sb, err := m.lookup(ctx, id)
	if err != nil {
		return nil, nil, false, err
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if (sb.rec.State != api.StateRunning && sb.rec.State != api.StatePaused) || sb.ending || sb.rt == nil {
		return nil, nil, false, conflict("sandbox %s is %s, not running", id, sb.stateWord())
	}
	sb.activity, sb.dirty = time.Now().UTC(), true
	return sb, sb.rt, sb.rec.State == api.StatePaused, nil
}

// frozen runs fn with the sandbox's processes frozen (the cgroup
// freezer); a sandbox paused by its caller stays paused.
func frozen(ctx context.Context, rt runtime.Sandbox, paused bool, fn func() error) error {
	if paused {
		return fn()
	}
	pr, ok := rt.(runtime.Pauser)
	if !ok || len(rt.Info().CgroupPaths) == 0 {
		return fmt.Errorf("the sandbox cannot be frozen (it has no cgroup: the daemon runs with cgroups off), so no consistent copy of its workspace can be made: %w", errdefs.ErrNotSupported)
	}
	// A cgroup that is gone is a sandbox that ended meanwhile (a delete
	// raced the copy): a conflict, said without the host's cgroup path.
	ended := func(err error) bool { return errors.Is(err, fs.ErrNotExist) }
	if err := pr.Pause(ctx); err != nil {
		if ended(err) {
			return conflict("the sandbox ended while it was being frozen for the copy")
		}
		return fmt.Errorf("freeze: %w", err)
	}
	err := fn()
	if rerr := pr.Resume(context.WithoutCancel(ctx)); rerr != nil {
		if ended(rerr) {
			return conflict("the sandbox ended during the copy")
		}
		err = errors.Join(err, fmt.Errorf("thaw: %w", rerr))
	}
	return err
}

// usedBytes is what every snapshot holds.
func (m *Manager) usedBytes(ctx context.Context) (int64, []*store.Snapshot, error) {
	list, err := m.st.ListSnapshots(ctx)
	if err != nil {
		return 0, nil, err
	}
	var n int64
	for _, sn := range list {
		n += sn.Size
	}
	return n, list, nil
}

// treeSize is the disk space a tree's entries take (allocated blocks;
// 4 KiB for each entry that is not a regular file), never following a
// link.
func treeSize(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFREG {
			n += st.Blocks * 512
		} else {
			n += 4096
		}
		return nil
	})
	return n, err
}

// snapshotReserve is kept free on the snapshots' filesystem.
const snapshotReserve = 1 << 30

// roomOnDisk refuses a copy of need bytes that would leave less than
// snapshotReserve free where snapshots live.
func roomOnDisk(dir string, need int64) error {
	var s unix.Statfs_t
	if err := unix.Statfs(dir, &s); err != nil {
		return err
	}
	if free := int64(s.Bavail) * s.Bsize; free-need < snapshotReserve {
		return fmt.Errorf("snapshot: %d bytes do not fit on the data disk (%d free, %d kept in reserve); delete snapshots or sandboxes: %w", need, free, int64(snapshotReserve), errdefs.ErrConflict)
	}
	return nil
}

// makeRoom checks that need more bytes fit in the snapshot quota,
// removing fork snapshots no live sandbox came from, oldest first, when
// they do not.
func (m *Manager) makeRoom(ctx context.Context, need int64) error {
	q := m.cfg.SnapshotQuota
	if q <= 0 {
		return nil
	}
	used, list, err := m.usedBytes(ctx)
	if err != nil {
		return err
	}
	if used+need <= q {
		return nil
	}
	inUse := map[string]bool{}
	m.mu.Lock()
	for _, sb := range m.sandboxes {
		sb.mu.Lock()
		if !sb.isFinal() && sb.spec.FromSnapshot != "" {
			inUse[sb.spec.FromSnapshot] = true
		}
		sb.mu.Unlock()
	}
	m.mu.Unlock()
	for _, sn := range list { // oldest first
		if used+need <= q {
			break
		}
		if sn.Labels[forkLabel] == "" || sn.Name != sn.ID || inUse[sn.ID] {
			continue // named snapshots (an unnamed one is named by its id) are never collected
		}
		if err := m.removeSnapshot(ctx, sn); err != nil {
			return err
		}
		m.log.Info("snapshot garbage-collected (quota)", "snapshot", sn.ID, "bytes", sn.Size)
		used -= sn.Size
	}
	if used+need > q {
		return fmt.Errorf("snapshot quota: %d bytes more would make %d of the daemon's snapshot_quota of %d bytes; delete snapshots (airlock snapshots rm) first: %w", need, used+need, q, errdefs.ErrConflict)
	}
	return nil
}

func (m *Manager) removeSnapshot(ctx context.Context, sn *store.Snapshot) error {
	if err := m.st.DeleteSnapshot(ctx, sn.ID); err != nil {
		return err
	}
	if err := m.removeSnapshotFiles(sn.ID); err != nil {
		m.log.Error("remove snapshot files", "snapshot", sn.ID, "err", err)
	}
	return nil
}

// CreateSnapshot snapshots a sandbox's workspace and root layer.
func (m *Manager) CreateSnapshot(ctx context.Context, id string, req *api.CreateSnapshotRequest) (api.Snapshot, error) {
	if req.Name != "" && (!snapName(req.Name) || strings.HasPrefix(req.Name, "snap-")) {
		return api.Snapshot{}, invalid("name %s: want 1-128 ASCII letters, digits, '.', '_' or '-', starting with a letter or digit, not with snap-", errdefs.Quote(req.Name))
	}
	if err := checkLabels(req.Labels); err != nil {
		return api.Snapshot{}, err
	}
	for k := range req.Labels {
		if strings.HasPrefix(k, "airlock.") {
			// The daemon's own: airlock.fork marks snapshots it may
			// collect.
			return api.Snapshot{}, invalid("labels: %s: keys starting with airlock. are the daemon's", errdefs.Quote(k))
		}
	}
	return m.takeSnapshot(ctx, id, req.Name, req.Labels)
}

func (m *Manager) takeSnapshot(ctx context.Context, id, name string, labels map[string]string) (api.Snapshot, error) {
	start := time.Now()
	sb, rt, paused, err := m.liveForSnapshot(ctx, id)
	if err != nil {
		return api.Snapshot{}, err
	}
	ws, err := m.workspaceOf(sb, rt)
	if err != nil {
		return api.Snapshot{}, err
	}
	// A snapshot is its sandbox's tenant's, also when an operator key
	// takes it.
	sb.mu.Lock()
	tenant := sb.rec.Tenant
	sb.mu.Unlock()
	if name != "" {
		if _, err := m.st.GetSnapshot(ctx, tenant, name); err == nil {
			return api.Snapshot{}, fmt.Errorf("snapshot %s: the name is in use: %w", errdefs.Quote(name), errdefs.ErrExists)
		}
	}
	m.snaps.mu.Lock()
	defer m.snaps.mu.Unlock()
	sid := newSnapID()
	if name == "" {
		name = sid
	}
	dir := m.snapDir(sid)
	var stats workspace.CopyStats
	var copySecs float64
	root := m.openRoot(rt)
	defer root.close()
	var rootStats *rootMeta
	cow := m.snapCoW()
	// The directory holds the copied workspace, or with a clone the root
	// layer only (snapshot_root.go); removeSnapshotFiles removes both.
	if err := os.Mkdir(dir, 0o700); err != nil {
		return api.Snapshot{}, fmt.Errorf("snapshot: %w", err)
	}
	err = frozen(ctx, rt, paused, func() error {
		rootNeed, err := root.size()
		if err != nil {
			return err
		}
		t0 := time.Now()
		defer func() { copySecs = time.Since(t0).Seconds() }()
		if cow {
			if err := roomOnDisk(m.cfg.SnapshotDir, rootNeed); err != nil {
				return err
			}
			if stats.Bytes, stats.Entries, err = m.cloneSnapshot(ctx, ws, sid, rootNeed); err != nil {
				return err
			}
		} else {
			// What the copy will take, before it is made: hard links are
			// copied once per name, so this can exceed the volume's size.
			need, err := treeSize(ws)
			if err != nil {
				return err
			}
			need += rootNeed
			if err := m.makeRoom(ctx, need); err != nil {
				return err
			}
			if err := roomOnDisk(m.cfg.SnapshotDir, need); err != nil {
				return err
			}
			if stats, err = workspace.CopyTree(ws, filepath.Join(dir, "workspace")); err != nil {
				return err
			}
		}
		rootStats, err = root.copyTo(dir)
		return err
	})
	if err != nil {
		m.removeSnapshotFiles(sid)
		return api.Snapshot{}, fmt.Errorf("snapshot of %s: %w", id, err)
	}
	if !cow {
		// The size is what the copy holds on the data disk.
		if n, err := treeSize(filepath.Join(dir, "workspace")); err == nil {
			stats.Bytes = n
		}
	}
	if rootStats != nil {
		stats.Bytes, stats.Entries = stats.Bytes+rootStats.Bytes, stats.Entries+rootStats.Entries
	} else {
		m.log.Info("snapshot without the root layer", "sandbox", id, "why", root.why)
	}
	sb.mu.Lock()
	rec := store.Snapshot{ID: sid, Name: name, Tenant: tenant, SandboxID: sb.id, Image: sb.rec.Image, Spec: sb.spec.marshal(),
		Labels: labels, Size: stats.Bytes, Files: stats.Entries, CreatedAt: time.Now().UTC()}
	sb.mu.Unlock()
	if err := m.st.PutSnapshot(ctx, &rec); err != nil {
		m.removeSnapshotFiles(sid)
		return api.Snapshot{}, err
	}
	v := m.viewSnapshot(&rec)
	v.Seconds = time.Since(start).Seconds()
	m.log.Debug("snapshot", "sandbox", id, "snapshot", sid, "bytes", stats.Bytes, "entries", stats.Entries, "copy_on_write", cow, "copy_s", copySecs, "total_s", v.Seconds)
	return v, nil
}

// ListSnapshots lists the caller's tenant's snapshots (every one for an
// operator key).
func (m *Manager) ListSnapshots(ctx context.Context) (api.SnapshotList, error) {
	used, list, err := m.usedBytes(ctx)
	if err != nil {
		return api.SnapshotList{}, err
	}
	out := api.SnapshotList{Snapshots: []api.Snapshot{}, Used: used, Quota: m.cfg.SnapshotQuota}
	for _, sn := range list {
		if maySee(ctx, sn.Tenant) {
			out.Snapshots = append(out.Snapshots, m.viewSnapshot(sn))
		}
	}
	return out, nil
}

// GetSnapshot returns one snapshot.
func (m *Manager) GetSnapshot(ctx context.Context, ref string) (api.Snapshot, error) {
	sn, err := m.findSnapshot(ctx, ref)
	if err != nil {
		return api.Snapshot{}, err
	}
	return m.viewSnapshot(sn), nil
}

// DeleteSnapshot removes a snapshot and its files. Sandboxes made from it
// keep their own copies.
func (m *Manager) DeleteSnapshot(ctx context.Context, ref string) error {
	sn, err := m.findSnapshot(ctx, ref)
	if err != nil {
		return err
	}
	m.snaps.mu.Lock()
	defer m.snaps.mu.Unlock()
	return m.removeSnapshot(ctx, sn)
}

// resolveSnapshot checks a create request's from_snapshot: the snapshot
// must be the caller's and of the request's image (an empty image takes
// the snapshot's).
func (m *Manager) resolveSnapshot(ctx context.Context, req *api.CreateSandboxRequest) (*store.Snapshot, error) {
	if err := m.snapReady(); err != nil {
		return nil, err
	}
	sn, err := m.findSnapshot(ctx, req.FromSnapshot)
	if err != nil {
		return nil, err
	}
	if req.Image == "" {
		req.Image = sn.Image
	}
	if req.Image != sn.Image {
		return nil, invalid("from_snapshot %s: a snapshot of image %s, not %s", errdefs.Quote(req.FromSnapshot), errdefs.Quote(sn.Image), errdefs.Quote(req.Image))
	}
	req.FromSnapshot = sn.ID
	return sn, nil
}

// fillFromSnapshot copies a snapshot into a new sandbox's workspace.
func (m *Manager) fillFromSnapshot(sb *Sandbox, sn *store.Snapshot) error {
	sb.mu.Lock()
	rt, cloned := sb.rt, sb.cloned
	sb.mu.Unlock()
	if rt == nil {
		return fmt.Errorf("sandbox %s ended while it was being created: %w", sb.id, errdefs.ErrUnavailable)
	}
	if cloned {
		return nil // its volume is a clone of the snapshot's image
	}
	ws, err := m.workspaceOf(sb, rt)
	if err != nil {
		return err
	}
	if err := fitsVolume(ws, m.workspacePart(sn)); err != nil {
		return err
	}
	m.snaps.mu.RLock()
	defer m.snaps.mu.RUnlock()
	if _, err := m.st.GetSnapshot(context.Background(), "", sn.ID); err != nil {
		return fmt.Errorf("from_snapshot %s: deleted meanwhile: %w", sn.ID, errdefs.ErrNotFound)
	}
	if err := m.copySnapshotInto(sn, ws, false); err != nil {
		return fmt.Errorf("from_snapshot %s: %w", sn.ID, err)
	}
	return nil
}

// fitsVolume refuses a snapshot larger than a volume can hold.
func fitsVolume(ws string, sn *store.Snapshot) error {
	var s unix.Statfs_t
	if err := unix.Statfs(ws, &s); err != nil {
		return err
	}
	if total := int64(s.Blocks) * s.Bsize; sn.Size > total || uint64(sn.Files) > s.Files {
		return invalid("snapshot %s holds %d bytes in %d files; the sandbox's workspace holds at most %d bytes and %d files (resources.disk)", sn.ID, sn.Size, sn.Files, total, s.Files)
	}
	return nil
}

// Fork makes count sandboxes from a snapshot of a sandbox's current
// state. All or nothing: past admission nothing is made (429), and a
// creation that fails removes the sandboxes made so far and the snapshot.
func (m *Manager) Fork(ctx context.Context, id string, req *api.ForkRequest) (api.ForkResult, error) {
	start := time.Now()
	n := req.Count
	if n == 0 {
		n = 1
	}
	if n < 0 || n > maxFork {
		return api.ForkResult{}, invalid("count: %d, want 1 to %d", req.Count, maxFork)
	}
	if err := checkLabels(req.Labels); err != nil {
		return api.ForkResult{}, err
	}
	m.adm.mu.Lock()
	free := m.adm.maxLive - m.adm.live
	m.adm.mu.Unlock()
	if n > free {
		return api.ForkResult{}, &errdefs.RetryError{After: time.Second, Err: fmt.Errorf("fork of %d: only %d more sandboxes fit under max_sandboxes (%d); nothing was made: %w", n, max(free, 0), m.adm.maxLive, errdefs.ErrExhausted)}
	}
	sb, err := m.lookup(ctx, id)
	if err != nil {
		return api.ForkResult{}, err
	}
	sb.mu.Lock()
	spec, tenant := sb.spec, sb.rec.Tenant
	sb.mu.Unlock()
	// The snapshot and the children are the parent's tenant's, with its
	// caches, whoever asked (an operator key may fork any sandbox).
	ctx = WithTenant(ctx, tenant)
	snap, err := m.takeSnapshot(ctx, id, "", map[string]string{forkLabel: id})
	if err != nil {
		return api.ForkResult{}, err
	}
	labels := map[string]string{}
	for k, v := range req.Labels {
		labels[k] = v
	}
	labels["airlock.fork.parent"] = id
	base := api.CreateSandboxRequest{Image: spec.Image, PolicyName: spec.PolicyName, Policy: spec.Policy, Resources: spec.Resources,
		Env: spec.Env, Caches: spec.Caches, Record: spec.Record, Labels: labels, FromSnapshot: snap.ID}
	if spec.Network != nil {
		// The parent's network policy as changed since its creation.
		ctx = context.WithValue(ctx, forkNetworkKey{}, spec.Network)
	}
	out := make([]api.Sandbox, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := base
			out[i], errs[i] = m.Create(ctx, &r)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for i := range out {
			if errs[i] == nil {
				if derr := m.Delete(context.WithoutCancel(ctx), out[i].ID); derr != nil {
					m.log.Error("fork: remove a sibling", "sandbox", out[i].ID, "err", derr)
				}
			}
		}
		if sn, ferr := m.st.GetSnapshot(context.WithoutCancel(ctx), "", snap.ID); ferr == nil {
			m.snaps.mu.Lock()
			m.removeSnapshot(context.WithoutCancel(ctx), sn)
			m.snaps.mu.Unlock()
		}
		// The first error says why (admission: 429).
		for _, e := range errs {
			if e != nil {
				return api.ForkResult{}, fmt.Errorf("fork of %s (nothing was kept): %w", id, e)
			}
		}
	}
	return api.ForkResult{Snapshot: snap, Sandboxes: out, Seconds: time.Since(start).Seconds()}, nil
}

// forkNetworkKey carries a fork parent's network policy (as changed since
// its creation) to the creation of its children.
type forkNetworkKey struct{}

// applyForkNetwork gives a fork child its parent's current network
// policy, in its gateway and in rec (what assign keeps), before it is
// handed out.
func (m *Manager) applyForkNetwork(ctx context.Context, sb *Sandbox, rec *specRecord) error {
	np, _ := ctx.Value(forkNetworkKey{}).(*api.NetworkPolicy)
	if np == nil {
		return nil
	}
	base, hasGateway, err := m.cfg.network(*rec)
	if err != nil {
		return err
	}
	if !hasGateway && np.Mode != policy.NetworkNone {
		return conflict("fork: the parent's network policy (mode %s) needs an egress gateway its policy did not give", np.Mode)
	}
	n := applyNetwork(base, np)
	view := networkView(n)
	rec.Network = &view
	sb.mu.Lock()
	defer sb.mu.Unlock()
	sb.spec.Network = &view
	if sb.egress != nil {
		if err := sb.egress.SetNetwork(n); err != nil {
			return fmt.Errorf("fork: the parent's network policy: %w", err)
		}
	}
	return nil
}

// Restore puts a sandbox's workspace back to a snapshot, in place: it
// keeps its id, policy, network audit and record. Its processes are
// killed (the init stays): they would see their files change under them.
func (m *Manager) Restore(ctx context.Context, id string, req *api.RestoreRequest) (api.Sandbox, error) {
	// Held from the start: a restore that waited for another one of the
	// same sandbox works on the runtime that one made (looked up before,
	// it found the old one gone: "ended meanwhile").
	m.snaps.mu.Lock()
	defer m.snaps.mu.Unlock()
	sb, rt, paused, err := m.liveForSnapshot(ctx, id)
	if err != nil {
		return api.Sandbox{}, err
	}
	ws, err := m.workspaceOf(sb, rt)
	if err != nil {
		return api.Sandbox{}, err
	}
	sn, err := m.findSnapshot(ctx, req.Snapshot)
	if err != nil {
		return api.Sandbox{}, err
	}
	sb.mu.Lock()
	image := sb.rec.Image
	sb.mu.Unlock()
	if sn.Image != image {
		return api.Sandbox{}, invalid("snapshot %s is of image %s; sandbox %s runs image %s", errdefs.Quote(req.Snapshot), errdefs.Quote(sn.Image), id, errdefs.Quote(image))
	}
	if err := fitsVolume(ws, m.workspacePart(sn)); err != nil {
		return api.Sandbox{}, err
	}
	if m.rootHeld(sn.ID) {
		err = m.restoreRoot(ctx, sb, rt, sn) // snapshot_root.go: made anew
	} else {
		err = frozen(ctx, rt, paused, func() error {
			if err := killAllButInit(rt.Info().CgroupPaths); err != nil {
				return err
			}
			return m.copySnapshotInto(sn, ws, true)
		})
	}
	if err != nil {
		return api.Sandbox{}, fmt.Errorf("restore of %s to %s: %w", id, sn.ID, err)
	}
	sb.mu.Lock()
	sb.spec.FromSnapshot = sn.ID
	r := sb.rec
	r.Spec = sb.spec.marshal()
	sb.mu.Unlock()
	if err := m.st.PutSandbox(ctx, &r); err != nil {
		return api.Sandbox{}, err
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	sb.rec.Spec = r.Spec
	return sb.view(), nil
}

// killAllButInit sends SIGKILL to every process of the sandbox's cgroups
// but its init (PID 1 of its PID namespace), through pidfds. The sandbox
// is frozen: the set cannot change, and they die when it thaws.
func killAllButInit(cgroups []string) error {
	if len(cgroups) == 0 {
		return fmt.Errorf("restore: the sandbox has no cgroup to find its processes in: %w", errdefs.ErrNotSupported)
	}
	pids := map[int]bool{}
	for _, cg := range cgroups {
		filepath.WalkDir(cg, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return nil
			}
			for _, f := range strings.Fields(string(b)) {
				if n, err := strconv.Atoi(f); err == nil {
					pids[n] = true
				}
			}
			return nil
		})
	}
	var errs []error
	for pid := range pids {
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue // gone
		}
		if nsPid(pid) != 1 {
			if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
				errs = append(errs, fmt.Errorf("kill %d: %w", pid, err))
			}
		}
		unix.Close(fd)
	}
	return errors.Join(errs...)
}

// nsPid is a process's pid in its own PID namespace (-1: unknown).
func nsPid(pid int) int {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "NSpid:"); ok {
			fs := strings.Fields(v)
			if n, err := strconv.Atoi(fs[len(fs)-1]); err == nil {
				return n
			}
		}
	}
	return -1
}

// Changes lists a sandbox's workspace changes since a snapshot (since) or
// since its creation: from the snapshot it was made from or last
// restored to, or from an empty workspace.
func (m *Manager) Changes(ctx context.Context, id, since string, diff bool) (api.Changes, error) {
	sb, rt, paused, err := m.liveForSnapshot(ctx, id)
	if err != nil {
		return api.Changes{}, err
	}
	ws, err := m.workspaceOf(sb, rt)
	if err != nil {
		return api.Changes{}, err
	}
	old := filepath.Join(m.cfg.SnapshotDir, ".empty")
	if since == "" {
		sb.mu.Lock()
		since = sb.spec.FromSnapshot
		sb.mu.Unlock()
		if since != "" {
			if _, err := m.st.GetSnapshot(ctx, "", since); err != nil {
				return api.Changes{}, conflict("sandbox %s was made from snapshot %s, which was deleted; name another with since", id, since)
			}
		}
	}
	if since != "" {
		sn, err := m.findSnapshot(ctx, since)
		if err != nil {
			return api.Changes{}, err
		}
		// Held from the mount to the comparison's end: no deletion
		// meanwhile.
		m.snaps.mu.RLock()
		defer m.snaps.mu.RUnlock()
		dir, done, err := m.mountSnapshot(sn)
		if err != nil {
			return api.Changes{}, fmt.Errorf("changes of %s: %w", id, err)
		}
		defer done()
		since, old = sn.ID, dir
	}
	var list []workspace.Change
	err = frozen(ctx, rt, paused, func() error {
		var err error
		list, err = workspace.CompareTrees(old, ws, diff)
		return err
	})
	if err != nil {
		return api.Changes{}, fmt.Errorf("changes of %s: %w", id, err)
	}
	out := api.Changes{Since: since, Changes: make([]api.Change, 0, len(list))}
	sort.Slice(list, func(i, j int) bool { return list[i].Path < list[j].Path })
	var diffBytes int
	for _, c := range list {
		if diffBytes += len(c.Diff); diffBytes > maxDiffBytes {
			c.Diff, out.DiffsTruncated = "", true
		}
		out.Changes = append(out.Changes, api.Change{Path: c.Path, Kind: c.Kind, Type: c.Type, OldMode: c.OldMode, NewMode: c.NewMode,
			OldTarget: c.OldTarget, NewTarget: c.NewTarget, OldSize: c.OldSize, Size: c.Size, Binary: c.Binary, Diff: c.Diff})
	}
	return out, nil
}
