package manager

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/internal/errdefs"
	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/store"
)

// watch marks the sandbox failed if its agent goes away on its own.
func (m *Manager) watch(sb *Sandbox, rt runtime.Sandbox) {
	w, ok := rt.(runtime.Watcher)
	if !ok {
		return
	}
	go func() {
		<-w.Done()
		sb.mu.Lock()
		// Nor replaced: a restore made it anew (restoreRoot).
		ending := sb.ending || sb.rt != rt
		sb.mu.Unlock()
		if !ending {
			m.log.Warn("sandbox agent gone", "sandbox", sb.id)
			m.destroy(context.Background(), sb, api.StateFailed, "the sandbox's agent exited (its init was killed or ran out of memory)", false)
		}
	}()
}

// destroy ends a sandbox: the runtime destroys it, its record becomes
// final (state, reason), and with forget the record is deleted. Safe to
// call concurrently; a second caller waits for the first.
func (m *Manager) destroy(ctx context.Context, sb *Sandbox, state, reason string, forget bool) error {
	ctx = context.WithoutCancel(ctx)
	sb.mu.Lock()
	if sb.ending {
		sb.mu.Unlock()
		<-sb.ended
		if forget {
			return m.forget(ctx, sb)
		}
		return nil
	}
	sb.ending = true
	// Marked before anything closes: a follower whose stream breaks from
	// here on learns the sandbox was deleted, not that it failed.
	sb.deleting = reason == "deleted"
	live := !sb.isFinal()
	rt, gw := sb.rt, sb.egress
	sb.egress = nil
	sb.mu.Unlock()
	if gw != nil {
		gw.Close()
		// The records of the connections Close ended are stored before the
		// sandbox is final, so that a follower that sees it end has them.
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := m.audit.sync(actx); err != nil {
			m.log.Warn("egress audit: records of a sandbox that ended not stored yet", "sandbox", sb.id, "err", err)
		}
		cancel()
	}
	var err error
	if rt != nil {
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err = rt.Destroy(dctx)
		cancel()
		if err != nil {
			m.log.Error("destroy sandbox", "sandbox", sb.id, "err", err)
		}
	}
	m.removeEgressDir(sb.id)
	if live {
		// Every process of the sandbox is gone: the record settles and
		// ends, stored before the sandbox is final (a follower that sees
		// it end has every event).
		m.endRecord(ctx, sb, reason)
	}
	now := time.Now().UTC()
	sb.mu.Lock()
	sb.rt = nil
	var procs []*proc
	if live {
		sb.rec.State, sb.rec.Reason, sb.rec.EndedAt = state, reason, &now
		for _, p := range sb.procs {
			procs = append(procs, p)
		}
	}
	sb.mu.Unlock()
	for _, p := range procs {
		p.end(runtime.ExitStatus{Signal: 9}, false, now)
	}
	if live {
		m.adm.release()
	}
	close(sb.ended)
	if forget {
		return errors.Join(err, m.forget(ctx, sb))
	}
	if live {
		if serr := m.st.SetState(ctx, sb.id, state, reason, &now); serr != nil {
			m.log.Error("store sandbox state", "sandbox", sb.id, "err", serr)
		}
		for _, p := range procs {
			m.saveProc(ctx, p)
		}
	}
	m.log.Info("sandbox ended", "sandbox", sb.id, "state", state, "reason", reason)
	return err
}

// forget removes a final sandbox's record.
func (m *Manager) forget(ctx context.Context, sb *Sandbox) error {
	m.mu.Lock()
	delete(m.sandboxes, sb.id)
	m.mu.Unlock()
	m.audit.forget(sb.id)
	m.records.forget(sb.id)
	if err := m.st.DeleteSandbox(ctx, sb.id); err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	return nil
}

// Get returns a sandbox. Reading its state is watching it, not using it:
// it does not count against the idle timeout, or a dashboard (or a client
// waiting for the idle stop) that polls it would keep it running forever.
func (m *Manager) Get(ctx context.Context, id string) (api.Sandbox, error) {
	sb, err := m.lookup(ctx, id)
	if err != nil {
		return api.Sandbox{}, err
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.view(), nil
}

// ListOptions filter List.
type ListOptions struct {
	States []string
	Labels map[string]string
	Limit  int
	Cursor string
}

// List returns a page of the sandboxes callers can see.
func (m *Manager) List(ctx context.Context, o ListOptions) (api.SandboxList, error) {
	for _, s := range o.States {
		switch s {
		case api.StateCreating, api.StateRunning, api.StatePaused, api.StateStopped, api.StateFailed:
		default:
			return api.SandboxList{}, invalid("state %s: want creating, running, paused, stopped or failed", errdefs.Quote(s))
		}
	}
	if o.Limit == 0 {
		o.Limit = 100
	}
	if o.Limit < 0 || o.Limit > 1000 {
		return api.SandboxList{}, invalid("limit %d: want 1 to 1000", o.Limit)
	}
	notPooled := ""
	f := store.Filter{States: o.States, Labels: o.Labels, Pool: &notPooled, Limit: o.Limit, Cursor: o.Cursor}
	if t, limited := TenantOf(ctx); limited {
		f.Tenant = &t
	}
	recs, next, err := m.st.ListSandboxes(ctx, f)
	if err != nil {
		if errors.Is(err, store.ErrBadCursor) {
			return api.SandboxList{}, invalid("cursor %s: not a cursor this daemon gave out", errdefs.Quote(o.Cursor))
		}
		return api.SandboxList{}, err
	}
	out := api.SandboxList{Sandboxes: make([]api.Sandbox, 0, len(recs)), NextCursor: next}
	for _, r := range recs {
		m.mu.Lock()
		sb := m.sandboxes[r.ID]
		m.mu.Unlock()
		if sb == nil {
			continue // deleted meanwhile
		}
		sb.mu.Lock()
		out.Sandboxes = append(out.Sandboxes, sb.view())
		sb.mu.Unlock()
	}
	return out, nil
}

// Delete destroys a sandbox and forgets it.
func (m *Manager) Delete(ctx context.Context, id string) error {
	sb, err := m.lookup(ctx, id)
	if err != nil {
		return err
	}
	sb.mu.Lock()
	creating := sb.rec.State == api.StateCreating && !sb.ending
	sb.mu.Unlock()
	if creating {
		// Its creation owns it until it is running or gone.
		return conflict("sandbox %s is still being created; delete it once it is running", id)
	}
	return m.destroy(ctx, sb, api.StateStopped, "deleted", true)
}

// SetTimeout makes the sandbox expire d from now, within its maximum
// lifetime.
func (m *Manager) SetTimeout(ctx context.Context, id string, secs float64) (api.Sandbox, error) {
	d, err := seconds("timeout_seconds", secs, 0)
	if err != nil {
		return api.Sandbox{}, err
	}
	if d == 0 {
		return api.Sandbox{}, invalid("timeout_seconds: required")
	}
	sb, err := m.lookup(ctx, id)
	if err != nil {
		return api.Sandbox{}, err
	}
	now := time.Now().UTC()
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.isFinal() || sb.ending {
		return api.Sandbox{}, conflict("sandbox %s is %s", id, sb.rec.State)
	}
	exp := now.Add(d)
	if sb.rec.Deadline != nil && exp.After(*sb.rec.Deadline) {
		return api.Sandbox{}, invalid("timeout_seconds: the sandbox would outlive its maximum lifetime (it must end by %s)", sb.rec.Deadline.Format(time.RFC3339))
	}
	if err := m.st.SetExpiry(ctx, id, &exp); err != nil {
		return api.Sandbox{}, err
	}
	sb.rec.ExpiresAt = &exp
	sb.activity, sb.dirty = now, true
	return sb.view(), nil
}

// Pause freezes every process of a running sandbox.
func (m *Manager) Pause(ctx context.Context, id string) (api.Sandbox, error) {
	return m.setPaused(ctx, id, true)
}

// Resume thaws a paused sandbox.
func (m *Manager) Resume(ctx context.Context, id string) (api.Sandbox, error) {
	return m.setPaused(ctx, id, false)
}

func (m *Manager) setPaused(ctx context.Context, id string, pause bool) (api.Sandbox, error) {
	sb, err := m.lookup(ctx, id)
	if err != nil {
		return api.Sandbox{}, err
	}
	from, to := api.StateRunning, api.StatePaused
	if !pause {
		from, to = api.StatePaused, api.StateRunning
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.rec.State != from || sb.ending {
		return api.Sandbox{}, conflict("sandbox %s is %s, not %s", id, sb.rec.State, from)
	}
	pr, ok := sb.rt.(runtime.Pauser)
	if !ok {
		return api.Sandbox{}, fmt.Errorf("pause: the %s runtime cannot pause sandboxes: %w", runtimeOf(sb.rt), errdefs.ErrNotSupported)
	}
	if pause {
		err = pr.Pause(ctx)
	} else {
		err = pr.Resume(ctx)
	}
	if err != nil {
		return api.Sandbox{}, fmt.Errorf("sandbox %s: %w: %w", id, errdefs.ErrConflict, err)
	}
	if err := m.st.SetState(ctx, id, to, "", nil); err != nil {
		return api.Sandbox{}, err
	}
	sb.rec.State = to
	sb.activity, sb.dirty = time.Now().UTC(), true
	return sb.view(), nil
}

// run checks timeouts, refills pools and saves activity every tick until
// Close.
func (m *Manager) run() {
	defer m.wg.Done()
	t := time.NewTicker(m.cfg.Tick)
	defer t.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-t.C:
		}
		m.expire(time.Now().UTC())
		m.flushActivity(m.ctx)
		m.purge(time.Now().UTC())
	}
}

// expire stops sandboxes past their TTL, maximum lifetime or idle timeout.
func (m *Manager) expire(now time.Time) {
	for _, sb := range m.snapshot() {
		sb.mu.Lock()
		r := sb.rec
		skip := sb.ending || sb.isFinal() || r.Pool != "" || r.State == api.StateCreating
		idle := r.IdleTimeout > 0 && r.State == api.StateRunning && sb.running == 0 && now.Sub(sb.activity) > r.IdleTimeout
		// Asked once per quiet spell (sleepFor: the activity it was
		// asked after).
		sleep := !skip && !idle && m.cfg.SleepAfter > 0 && r.State == api.StateRunning && sb.running == 0 && sb.rt != nil &&
			now.Sub(sb.activity) > m.cfg.SleepAfter && !sb.sleepFor.Equal(sb.activity) && !now.Before(sb.sleepRetry)
		if sleep {
			sb.sleepFor = sb.activity
		}
		rt, activity := sb.rt, sb.activity
		sb.mu.Unlock()
		if skip {
			continue
		}
		if sleep {
			if s, ok := rt.(runtime.Sleeper); ok {
				go m.sleep(sb, s, activity)
			}
		}
		reason := ""
		switch {
		case r.Deadline != nil && now.After(*r.Deadline):
			reason = "maximum lifetime reached"
		case r.ExpiresAt != nil && now.After(*r.ExpiresAt):
			reason = "timeout expired"
		case idle:
			reason = fmt.Sprintf("idle for %v", r.IdleTimeout)
		}
		if reason != "" {
			go m.destroy(m.ctx, sb, api.StateStopped, reason, false)
		}
	}
}

// flushActivity writes changed last-activity times to the store (one
// write per tick rather than one per request).
func (m *Manager) flushActivity(ctx context.Context) {
	batch := map[string]time.Time{}
	for _, sb := range m.snapshot() {
		sb.mu.Lock()
		if sb.dirty && !sb.isFinal() {
			batch[sb.id] = sb.activity
			sb.dirty = false
		}
		sb.mu.Unlock()
	}
	if len(batch) > 0 {
		if err := m.st.TouchMany(context.WithoutCancel(ctx), batch); err != nil {
			m.log.Error("store activity", "err", err)
		}
	}
}

// purge forgets final sandboxes older than the retention period.
func (m *Manager) purge(now time.Time) {
	for _, sb := range m.snapshot() {
		sb.mu.Lock()
		old := sb.isFinal() && sb.rec.EndedAt != nil && now.Sub(*sb.rec.EndedAt) > m.cfg.Retention
		sb.mu.Unlock()
		if old {
			m.forget(m.ctx, sb)
		}
	}
}

// sleep asks a quiet sandbox to sleep (runtime.Sleeper); it stays awake,
// as it was, when something runs in it.
func (m *Manager) sleep(sb *Sandbox, s runtime.Sleeper, activity time.Time) {
	ctx, cancel := context.WithTimeout(m.ctx, 10*time.Second)
	defer cancel()
	err := s.Sleep(ctx)
	sb.mu.Lock()
	switch {
	case err == nil && sb.activity.Equal(activity):
		sb.asleep = true
	case err != nil && !errors.Is(err, errdefs.ErrNotSupported):
		// Something runs: ask again a while later.
		sb.sleepFor, sb.sleepRetry = time.Time{}, time.Now().Add(m.cfg.SleepAfter)
	}
	sb.mu.Unlock()
	if err != nil {
		m.log.Debug("sleep", "sandbox", sb.id, "err", err)
	}
}
