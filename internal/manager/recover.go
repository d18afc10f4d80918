package manager

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/internal/egress"
	"github.com/airlock-dev/airlock/internal/egress/gateway"
	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/sandbox"
	"github.com/airlock-dev/airlock/internal/store"
)

// Recover loads the store and reconciles it with what runs on the host,
// then starts the background work (timeouts, pools). Running and paused
// sandboxes are re-adopted (their agents kept running); a sandbox that
// cannot be is marked failed with the reason and its host state removed.
// Sandboxes the store does not know (a daemon killed while it made one,
// whose record was not written yet, or a store restored from a backup)
// are removed. Pool members are destroyed: the
// pools are refilled fresh.
func (m *Manager) Recover(ctx context.Context) error {
	defer close(m.ready)
	begun := time.Now()
	m.initSnapshots(ctx)
	recs, _, err := m.st.ListSandboxes(ctx, store.Filter{})
	if err != nil {
		return fmt.Errorf("load sandboxes: %w", err)
	}
	known := map[string]bool{}
	for _, r := range recs {
		known[runtimeID(r.ID)] = true
		m.recoverOne(ctx, r)
	}
	if m.cfg.Adopter != nil {
		ids, err := m.cfg.Adopter.List()
		if err != nil {
			m.log.Error("list runtime sandboxes", "err", err)
		}
		for _, rid := range ids {
			if !known[rid] {
				m.log.Warn("removing a sandbox the store does not know", "sandbox", apiID(rid))
				if err := m.cfg.Adopter.Remove(ctx, rid); err != nil {
					m.log.Error("remove unknown sandbox", "sandbox", apiID(rid), "err", err)
				}
			}
		}
	}
	// Egress files (CA keys) of sandboxes that are not live any more; not
	// those of a creation begun since (the API serves during recovery).
	if m.cfg.EgressDir != "" {
		entries, _ := os.ReadDir(m.cfg.EgressDir)
		for _, e := range entries {
			fi, err := e.Info()
			if err != nil || !isSandboxID(e.Name()) || !fi.ModTime().Before(begun) {
				continue
			}
			m.mu.Lock()
			sb := m.sandboxes[e.Name()]
			m.mu.Unlock()
			live := false
			if sb != nil {
				sb.mu.Lock()
				live = !sb.isFinal()
				sb.mu.Unlock()
			}
			if !live {
				m.removeEgressDir(e.Name())
			}
		}
	}
	m.wg.Add(1)
	go m.run()
	for _, pl := range m.pools {
		m.wg.Add(1)
		go m.fill(pl)
	}
	return nil
}

// isSandboxID reports whether name is an API sandbox id ("sb-" and 16
// lowercase hex digits).
func isSandboxID(name string) bool {
	rid, ok := strings.CutPrefix(name, "sb-")
	return ok && len(rid) == 16 && strings.Trim(rid, "0123456789abcdef") == ""
}

// terminalLost is the end reason of a PTY process found by a restarted
// daemon.
const terminalLost = "its terminal was closed by a daemon restart"

// recoverOne brings one stored sandbox back under management.
func (m *Manager) recoverOne(ctx context.Context, r *store.Sandbox) {
	sb := &Sandbox{id: r.ID, rec: *r, procs: map[uint64]*proc{}, activity: r.LastActivity, ended: make(chan struct{})}
	json.Unmarshal(r.Spec, &sb.spec)
	procs, err := m.st.ListProcesses(ctx, r.ID)
	if err != nil {
		m.log.Error("load processes", "sandbox", r.ID, "err", err)
	}
	// Those still running, and the newest finished ones (as many as a
	// sandbox keeps whole): the older ones are served from the store.
	var ended []*store.Process
	for _, pr := range procs {
		if pr.EndedAt != nil {
			ended = append(ended, pr)
			continue
		}
		sb.procs[pr.ID] = &proc{sb: sb, rec: *pr, done: make(chan struct{})}
	}
	sort.SliceStable(ended, func(i, j int) bool { return ended[i].EndedAt.Before(*ended[j].EndedAt) })
	if n := len(ended) - keepFinishedProcs; n > 0 {
		ended, sb.dropped = ended[n:], true
	}
	for _, pr := range ended {
		sb.procs[pr.ID] = &proc{sb: sb, rec: *pr, done: closedChan}
		sb.finished = append(sb.finished, pr.ID)
	}
	m.mu.Lock()
	m.sandboxes[sb.id] = sb
	m.mu.Unlock()
	switch {
	case sb.isFinal():
		// Already ended: destroy (a later delete) must not end it again.
		sb.ending = true
		close(sb.ended)
		return
	case r.State == api.StateCreating:
		m.lost(ctx, sb, "the daemon stopped while the sandbox was being created")
		return
	case r.Pool != "":
		m.lost(ctx, sb, "warm pool member from before a daemon restart")
		m.forget(ctx, sb)
		return
	case m.cfg.Adopter == nil:
		m.lost(ctx, sb, "the runtime cannot re-adopt sandboxes after a restart")
		return
	}
	rt, state, err := m.cfg.Adopter.Adopt(ctx, runtimeID(r.ID))
	if err != nil {
		m.lost(ctx, sb, fmt.Sprintf("could not re-adopt after a daemon restart: %v", err))
		return
	}
	// The host ids the runtime re-leased it (from its own state) must be
	// the ones recorded at creation: a sandbox never runs on a range the
	// store does not know it holds.
	if info := rt.Info(); r.HostGID != 0 && (info.HostUID != r.HostUID || info.HostGID != r.HostGID) {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		if derr := rt.Destroy(dctx); derr != nil {
			m.log.Error("destroy sandbox", "sandbox", r.ID, "err", derr)
		}
		cancel()
		m.lost(ctx, sb, fmt.Sprintf("its runtime state says host ids %d/%d, the store %d/%d", info.HostUID, info.HostGID, r.HostUID, r.HostGID))
		return
	}
	// The record goes on first: the sandbox's execs wait for it. A
	// sandbox whose record cannot go on does not run on without one.
	if sb.spec.Record {
		if err := m.resumeRecord(sb, rt); err != nil {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			if derr := rt.Destroy(dctx); derr != nil {
				m.log.Error("destroy sandbox", "sandbox", r.ID, "err", derr)
			}
			cancel()
			m.lost(ctx, sb, fmt.Sprintf("could not resume its activity record after a daemon restart: %v", err))
			return
		}
	}
	// Egress is a layer like the others: a sandbox whose gateway cannot be
	// served again does not keep running without it (fail closed).
	gw, env, err := m.restoreEgress(sb, rt)
	if err != nil {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		if derr := rt.Destroy(dctx); derr != nil {
			m.log.Error("destroy sandbox", "sandbox", r.ID, "err", derr)
		}
		cancel()
		m.lost(ctx, sb, fmt.Sprintf("could not restore egress after a daemon restart: %v", err))
		return
	}
	sb.egress, sb.egressEnv = gw, env
	// The agent counts ids from the processes it has seen; one made anew
	// by a restore and not used since has seen none, while the store
	// holds the ids of the runtime before it: go on past those.
	if s, ok := rt.(interface{ SkipProcessIDs(uint64) }); ok {
		if next, err := m.nextProcessID(ctx, sb); err == nil {
			s.SkipProcessIDs(next - 1)
		}
	}
	m.adm.adopt()
	now := time.Now().UTC()
	running := map[uint64]bool{}
	for _, s := range state.Running {
		running[s.ID] = true
	}
	exited := map[uint64]runtime.ExitStatus{}
	for _, e := range state.Exited {
		exited[e.ID] = runtime.ExitStatus{Code: e.Code, Signal: e.Signal}
	}
	type byID interface {
		Process(id uint64) (runtime.Process, bool)
	}
	for id, p := range sb.procs {
		if p.rec.EndedAt != nil {
			continue
		}
		if rp, ok := rt.(byID); ok && (running[id] || hasKey(exited, id)) {
			if x, ok := rp.Process(id); ok {
				p.rp = x
			}
		}
		if p.rec.TTY {
			// Its terminal's master was the previous daemon's and closed
			// with it: nothing can read or write that terminal again, and
			// nothing can attach to it. Say so; one still running (it
			// ignored the hangup) is killed below rather than listed as
			// running forever.
			p.rec.EndReason = terminalLost
		}
		switch {
		case running[id] && p.rp != nil:
			sb.running++
			if p.rec.TTY {
				if err := p.rp.Signal(syscall.SIGKILL); err != nil {
					m.log.Error("kill a PTY process after a restart", "sandbox", r.ID, "process", procID(id), "err", err)
				}
			}
			go m.reapProc(p)
		case hasKey(exited, id):
			p.end(exited[id], false, now)
			m.retire(p, m.saveProc(ctx, p))
		default:
			// Not known to the agent: it ended when the previous daemon
			// did, its exit not kept (a PTY process's hangup).
			p.end(runtime.ExitStatus{Signal: 1}, false, now)
			m.retire(p, m.saveProc(ctx, p))
		}
	}
	if r.State == api.StatePaused {
		if pr, ok := rt.(runtime.Pauser); ok {
			if err := pr.Pause(ctx); err != nil {
				m.log.Error("re-pause after adoption", "sandbox", r.ID, "err", err)
			}
		}
	}
	sb.rt = rt
	m.watch(sb, rt)
	m.log.Info("sandbox re-adopted", "sandbox", r.ID, "state", r.State, "running_processes", len(state.Running), "host_uid", r.HostUID)
}

// restoreEgress serves an adopted sandbox's egress listeners again (the
// runtime made them anew inside the sandbox) with its policy's network
// rules: the stored inline policy, or the named policy as the
// configuration defines it now, with any change made through the API
// since; its CA and placeholders are read back and its secrets resolved
// again. It returns the environment its processes need for the gateway.
// A sandbox without network access gets nil.
// Any mismatch (listeners but no network access in the policy, or the
// reverse) is an error: the sandbox must not run with egress other than
// its policy's.
func (m *Manager) restoreEgress(sb *Sandbox, rt runtime.Sandbox) (*egress.Gateway, map[string]string, error) {
	var n int
	if l, ok := rt.(runtime.Listeners); ok {
		n = len(l.Listeners())
	}
	p, _, err := m.cfg.resolve(&api.CreateSandboxRequest{
		Image: sb.spec.Image, PolicyName: sb.spec.PolicyName, Policy: sb.spec.Policy, Resources: sb.spec.Resources,
	})
	switch {
	case err != nil && n == 0:
		return nil, nil, nil // no network: the policy is not needed here
	case err != nil:
		return nil, nil, fmt.Errorf("its policy: %w", err)
	case !sandbox.HasNetwork(p) && n == 0:
		return nil, nil, nil
	case !sandbox.HasNetwork(p):
		return nil, nil, fmt.Errorf("the sandbox has egress listeners but its policy %s has no network access now", policyLabel(sb.spec))
	case n == 0:
		return nil, nil, fmt.Errorf("its policy %s has network access but the runtime holds no egress listeners for the sandbox", policyLabel(sb.spec))
	}
	nw := applyNetwork(p.Network, sb.spec.Network)
	if err := m.cfg.checkCredentials(nw); err != nil {
		return nil, nil, err
	}
	setup, err := egress.Load(m.egressDir(sb.id), nw, m.cfg.secret)
	if err != nil {
		return nil, nil, err
	}
	gw, err := egress.Start(rt, nw, m.egressOptions(sb.id, setup))
	if err != nil {
		return nil, nil, err
	}
	return gw, setup.Env, nil
}

// egressOptions are the gateway options of a sandbox: the daemon's host
// map, its CA and credentials, and every record in the daemon's log and
// the stored audit.
func (m *Manager) egressOptions(id string, setup *egress.Setup) egress.Options {
	return egress.Options{Sandbox: id, Hosts: m.cfg.EgressHosts, Setup: setup, Host: m.cfg.HostAccess, Audit: func(r gateway.Record) {
		m.log.Info("egress", "sandbox", r.Sandbox, "proto", r.Proto, "method", r.Method, "host", r.Host, "port", r.Port,
			"path", r.Path, "addr", r.Addr, "allowed", r.Allowed, "rule", r.Rule, "credential", r.Credential,
			"bytes_up", r.BytesUp, "bytes_down", r.BytesDown, "ms", float64(r.Duration.Microseconds())/1000)
		m.audit.add(r)
		m.recordNet(r)
	}}
}

// policyLabel names a sandbox's policy in messages.
func policyLabel(rec specRecord) string {
	switch {
	case rec.Policy != "":
		return "(inline)"
	case rec.PolicyName == "":
		return `"default"`
	}
	return fmt.Sprintf("%q", rec.PolicyName)
}

func hasKey[K comparable, V any](m map[K]V, k K) bool {
	_, ok := m[k]
	return ok
}

// lost marks a sandbox that cannot be brought back failed and removes
// whatever it left on the host.
func (m *Manager) lost(ctx context.Context, sb *Sandbox, reason string) {
	if m.cfg.Adopter != nil {
		if err := m.cfg.Adopter.Remove(ctx, runtimeID(sb.id)); err != nil {
			m.log.Error("remove sandbox", "sandbox", sb.id, "err", err)
		}
	}
	now := time.Now().UTC()
	sb.rec.State, sb.rec.Reason, sb.rec.EndedAt = api.StateFailed, reason, &now
	sb.ending = true
	for _, p := range sb.procs {
		if p.end(runtime.ExitStatus{Signal: 9}, false, now) {
			m.saveProc(ctx, p)
		}
	}
	if sb.spec.Record {
		m.endRecord(ctx, sb, reason)
	}
	close(sb.ended)
	m.removeEgressDir(sb.id)
	if err := m.st.SetState(ctx, sb.id, api.StateFailed, reason, &now); err != nil {
		m.log.Error("store sandbox state", "sandbox", sb.id, "err", err)
	}
	m.log.Warn("sandbox failed", "sandbox", sb.id, "reason", reason)
}
