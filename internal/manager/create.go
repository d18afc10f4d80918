package manager

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/internal/egress"
	"github.com/airlock-dev/airlock/internal/errdefs"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/record"
	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/sandbox"
	"github.com/airlock-dev/airlock/internal/store"
)

// Create makes a sandbox for a caller: from a warm pool when one matches,
// otherwise cold. On error nothing is left behind.
func (m *Manager) Create(ctx context.Context, req *api.CreateSandboxRequest) (_ api.Sandbox, err error) {
	start := time.Now()
	source := "cold"
	defer func() {
		if err == nil {
			m.met.createSeconds.With(source).Observe(time.Since(start).Seconds())
		}
	}()
	ttl, idle, err := m.checkCreate(req)
	if err != nil {
		return api.Sandbox{}, err
	}
	var snap *store.Snapshot
	if req.FromSnapshot != "" {
		r := *req
		if snap, err = m.resolveSnapshot(ctx, &r); err != nil {
			return api.Sandbox{}, err
		}
		req = &r
	}
	p, rec, err := m.cfg.resolve(req)
	if err != nil {
		return api.Sandbox{}, err
	}
	rec.FromSnapshot = req.FromSnapshot
	if snap != nil && rec.Runtime != "" && rec.Runtime != "native" {
		return api.Sandbox{}, fmt.Errorf("from_snapshot: snapshots are for the native runtime, not %s: %w", rec.Runtime, errdefs.ErrNotSupported)
	}
	var sb *Sandbox
	_, tenant := TenantOf(ctx)
	// A pool member's caches are the operator's: a tenant whose policy has
	// caches gets a sandbox made with its own.
	// Pool members have no record: a sandbox with one is always made for
	// its caller.
	if rec.Policy == "" && rec.Resources == (api.Resources{}) && len(rec.Caches) == 0 && !rec.Record && !(tenant && len(p.Caches) > 0) && snap == nil {
		sb = m.takePooled(poolKey(rec.Runtime, req.Image, req.PolicyName))
	}
	if sb != nil {
		source = "pool"
	} else {
		if err := m.adm.acquire(ctx, true); err != nil {
			return api.Sandbox{}, err
		}
		if sb, err = m.createSandbox(ctx, p, rec, ""); err != nil {
			return api.Sandbox{}, err
		}
	}
	if snap != nil {
		err = m.fillFromSnapshot(sb, snap)
		if err == nil {
			err = m.applyForkNetwork(ctx, sb, &rec)
		}
	}
	var view api.Sandbox
	if err == nil {
		view, err = m.assign(ctx, sb, req, rec, ttl, idle)
	}
	if err != nil {
		m.destroy(context.WithoutCancel(ctx), sb, api.StateFailed, "creation failed", true)
		return api.Sandbox{}, err
	}
	return view, nil
}

// checkCreate validates what resolve does not: timeouts, labels, files.
func (m *Manager) checkCreate(req *api.CreateSandboxRequest) (ttl, idle time.Duration, err error) {
	if err := checkLabels(req.Labels); err != nil {
		return 0, 0, err
	}
	if len(req.Files) > maxFiles {
		return 0, 0, invalid("files: %d files, the limit is %d", len(req.Files), maxFiles)
	}
	for i, f := range req.Files {
		if f.Path == "" || strings.ContainsRune(f.Path, 0) {
			return 0, 0, invalid("files[%d].path: empty or contains a NUL byte", i)
		}
		if f.Mode > 0o7777 {
			return 0, 0, invalid("files[%d].mode: %#o is not a permission mode", i, f.Mode)
		}
	}
	ttl, err = seconds("timeout_seconds", req.TimeoutSeconds, m.cfg.DefaultTTL)
	if err != nil {
		return 0, 0, err
	}
	if ttl > m.cfg.MaxLifetime {
		return 0, 0, invalid("timeout_seconds: %v is past the maximum lifetime of a sandbox (%v)", ttl, m.cfg.MaxLifetime)
	}
	if ttl < time.Second {
		// A sandbox that ends before it can be used is a mistake (a
		// unit: the field is in seconds).
		return 0, 0, invalid("timeout_seconds: %v is under a second (the field is in seconds)", req.TimeoutSeconds)
	}
	switch {
	case req.IdleTimeoutSeconds < 0:
		idle = 0
	case req.IdleTimeoutSeconds == 0:
		idle = max(m.cfg.DefaultIdle, 0)
	default:
		if idle, err = seconds("idle_timeout_seconds", req.IdleTimeoutSeconds, 0); err != nil {
			return 0, 0, err
		}
		if idle < time.Second {
			return 0, 0, invalid("idle_timeout_seconds: %v is under a second (the field is in seconds; negative: no idle timeout)", req.IdleTimeoutSeconds)
		}
	}
	return ttl, idle, nil
}

// seconds converts a positive number of seconds; 0 gives def.
func seconds(name string, s float64, def time.Duration) (time.Duration, error) {
	switch {
	case s == 0:
		return def, nil
	case s < 0 || s != s:
		return 0, invalid("%s: %v must be positive", name, s)
	case s > 10*365*24*3600:
		return 0, invalid("%s: %v is too large", name, s)
	}
	return time.Duration(s * float64(time.Second)), nil
}

// newID returns a fresh runtime sandbox id.
func newID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// createSandbox makes a sandbox with the runtime. The caller holds a live
// slot and a creation permit from admission; the permit is released here,
// and the slot too if creation fails.
func (m *Manager) createSandbox(ctx context.Context, p *policy.Policy, rec specRecord, pool string) (_ *Sandbox, err error) {
	defer m.adm.created()
	defer func() {
		if err != nil {
			m.adm.release()
			m.met.errors.With("create").Inc()
		}
	}()
	caches, err := m.cfg.prepareCaches(ctx, p)
	if err != nil {
		return nil, err
	}
	if rec.Record {
		if err := m.checkRecord(rec.Runtime); err != nil {
			return nil, err
		}
	}
	spec, err := m.specs.get(p, rec, sandbox.Opts{Insecure: m.cfg.Insecure, CgroupParent: m.cfg.CgroupParent, Caches: caches})
	if err != nil {
		return nil, err
	}
	spec.RecordExec = rec.Record
	cloned, err := m.workspaceFromSnapshot(ctx, spec, rec)
	if err != nil {
		return nil, err
	}
	rid := newID()
	spec.ID = rid
	release, err := m.rootFromSnapshot(spec, rec) // snapshot_root.go
	if err != nil {
		return nil, err
	}
	defer release()
	var setup *egress.Setup
	if sandbox.HasNetwork(p) {
		// The sandbox's CA and credentials, before the sandbox exists: its
		// trust files are bound into it, and a credential that cannot be
		// resolved stops the creation.
		defer func() {
			if err != nil {
				m.removeEgressDir(apiID(rid))
			}
		}()
		if err = m.cfg.checkCredentials(p.Network); err != nil {
			return nil, err
		}
		if err = m.cfg.HostAccess.Check(p.Network); err != nil {
			return nil, err
		}
		if setup, err = egress.Prepare(m.egressDir(apiID(rid)), apiID(rid), p.Network, spec.Image, m.cfg.secret); err != nil {
			return nil, err
		}
		spec.Binds = append(slices.Clip(spec.Binds), setup.Binds...)
	}
	now := time.Now().UTC()
	sb := &Sandbox{
		id: apiID(rid), spec: rec, procs: map[uint64]*proc{}, activity: now, ended: make(chan struct{}), cloned: cloned,
		rec: store.Sandbox{ID: apiID(rid), State: api.StateCreating, Image: rec.Image, Policy: rec.PolicyName,
			Spec: rec.marshal(), Pool: pool, CreatedAt: now, LastActivity: now, Tenant: poolTenant(ctx, pool)},
	}
	// The store knows of the sandbox by the time the runtime has made it:
	// a daemon killed before finds it "creating" at restart and removes
	// it, or finds the runtime's sandbox without a record and removes
	// that (Recover). The write goes on while the runtime makes the
	// sandbox (it took 0.3 ms of a cold creation's path), except for a
	// recorded sandbox, whose record stores events from the start.
	// A new record, without labels: one statement (PutAssigned).
	stored := make(chan error, 1)
	if rec.Record {
		if err := m.st.PutAssigned(ctx, &sb.rec); err != nil {
			return nil, fmt.Errorf("store: %w", err)
		}
		close(stored)
	} else {
		r := sb.rec
		go func() { stored <- m.st.PutAssigned(ctx, &r); close(stored) }()
	}
	// Waited for on every way out below, before forget's delete.
	storeErr := func() error {
		if err, ok := <-stored; ok && err != nil {
			return fmt.Errorf("store: %w", err)
		}
		return nil
	}
	m.mu.Lock()
	m.sandboxes[sb.id] = sb
	m.mu.Unlock()
	forget := func() {
		storeErr()
		m.mu.Lock()
		delete(m.sandboxes, sb.id)
		m.mu.Unlock()
		m.st.DeleteSandbox(context.WithoutCancel(ctx), sb.id)
	}
	// The record subscribes to the proc connector before the sandbox
	// exists; if it cannot be kept, nothing is made (fail closed).
	var rc *record.Recorder
	if rec.Record {
		if rc, err = record.Open(recordSink{m, sb.id}); err != nil {
			forget()
			return nil, fmt.Errorf("record: %w", err)
		}
	}
	stopRecord := func() {
		if rc != nil {
			rc.Stop()
			sb.mu.Lock()
			sb.recorder = nil
			sb.mu.Unlock()
		}
	}
	backend, err := m.cfg.backend(rec.Runtime)
	if err != nil {
		stopRecord()
		forget()
		return nil, err
	}
	rt, err := backend.Create(ctx, spec)
	if err != nil {
		stopRecord()
		forget()
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	if err := storeErr(); err != nil {
		rt.Destroy(context.WithoutCancel(ctx))
		stopRecord()
		forget()
		return nil, err
	}
	if rc != nil {
		if err := m.startRecord(sb, rt, rc, false); err != nil {
			rt.Destroy(context.WithoutCancel(ctx))
			stopRecord()
			forget()
			return nil, err
		}
	}
	info := rt.Info()
	// A pool member is stored running now. A sandbox made for its caller
	// is stored once, whole, by assign right after (one SQLite write
	// less on a cold creation's path); should the daemon stop before,
	// the record still says creating and the restart removes the
	// sandbox, as for any creation under way.
	if pool != "" {
		if err := m.st.SetCreated(ctx, sb.id, api.StateRunning, info.HostUID, info.HostGID); err != nil {
			rt.Destroy(context.WithoutCancel(ctx))
			stopRecord()
			forget()
			return nil, fmt.Errorf("store: %w", err)
		}
	}
	if sandbox.HasNetwork(p) {
		gw, err := egress.Start(rt, p.Network, m.egressOptions(sb.id, setup))
		if err != nil {
			rt.Destroy(context.WithoutCancel(ctx))
			stopRecord()
			forget()
			return nil, fmt.Errorf("egress gateway: %w", err)
		}
		sb.egress, sb.egressEnv = gw, setup.Env
	}
	sb.mu.Lock()
	sb.rt = rt
	sb.rec.State = api.StateRunning
	sb.rec.HostUID, sb.rec.HostGID = info.HostUID, info.HostGID
	sb.mu.Unlock()
	m.watch(sb, rt)
	return sb, nil
}

// assign hands a fresh (or pooled) sandbox to its caller: labels, TTL,
// environment and files.
func (m *Manager) assign(ctx context.Context, sb *Sandbox, req *api.CreateSandboxRequest, rec specRecord, ttl, idle time.Duration) (api.Sandbox, error) {
	now := time.Now().UTC()
	exp, deadline := now.Add(ttl), now.Add(m.cfg.MaxLifetime)
	sb.mu.Lock()
	sb.spec = rec
	r := sb.rec
	r.Labels, r.Image, r.Policy, r.Spec, r.Pool = req.Labels, rec.Image, rec.PolicyName, rec.marshal(), ""
	r.Tenant, _ = TenantOf(ctx)
	r.CreatedAt, r.LastActivity, r.ExpiresAt, r.Deadline, r.IdleTimeout = now, now, &exp, &deadline, idle
	rt := sb.rt
	sb.mu.Unlock()
	if rt == nil {
		return api.Sandbox{}, fmt.Errorf("sandbox %s ended while it was being created: %w", sb.id, errdefs.ErrUnavailable)
	}
	if err := m.writeFiles(ctx, rt, req.Files); err != nil {
		return api.Sandbox{}, err
	}
	// The record gets its labels now, and never had any before.
	if err := m.st.PutAssigned(ctx, &r); err != nil {
		return api.Sandbox{}, fmt.Errorf("store: %w", err)
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	sb.rec = r
	sb.activity = now
	return sb.view(), nil
}

// writeFiles writes the initial files of a sandbox.
func (m *Manager) writeFiles(ctx context.Context, rt runtime.Sandbox, files []api.File) error {
	if len(files) == 0 {
		return nil
	}
	fs, ok := rt.(runtime.Files)
	if !ok {
		return fmt.Errorf("files: the %s runtime serves no files: %w", runtimeOf(rt), errdefs.ErrNotSupported)
	}
	for i, f := range files {
		p := f.Path
		if !path.IsAbs(p) {
			p = path.Join("/workspace", p)
		}
		mode := os.FileMode(f.Mode)
		if mode == 0 {
			mode = 0o644
		}
		if dir := path.Dir(p); dir != "/" {
			if err := fs.MkdirAll(ctx, dir, 0o755); err != nil {
				return fmt.Errorf("files[%d] %s: %w", i, errdefs.Quote(f.Path), err)
			}
		}
		if err := fs.WriteFile(ctx, p, mode, bytes.NewReader(f.Content)); err != nil {
			return fmt.Errorf("files[%d] %s: %w", i, errdefs.Quote(f.Path), err)
		}
	}
	return nil
}

// egressDir is where a sandbox's CA and trust files live.
func (m *Manager) egressDir(id string) string { return filepath.Join(m.cfg.EgressDir, id) }

// removeEgressDir removes a sandbox's egress files (its CA key among them).
func (m *Manager) removeEgressDir(id string) {
	if m.cfg.EgressDir == "" {
		return
	}
	if err := os.RemoveAll(m.egressDir(id)); err != nil {
		m.log.Error("remove egress files", "sandbox", id, "err", err)
	}
}
