package manager

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/runtime"
)

// pool keeps ready sandboxes of one image and named policy. A member is a
// sandbox made exactly as a cold create would make it and never handed to
// anyone: acquisition takes it out of the pool under the pool's lock, so no
// two callers can get the same one, and it is then assigned like a fresh
// sandbox (labels, TTL, environment, files).
type pool struct {
	key, runtime, image, policy string
	size                        int

	mu      sync.Mutex
	ready   []*Sandbox
	filling int           // members being created
	refill  chan struct{} // a nudge for the filler
}

// refillDelay is how long a pool waits after handing out a member before
// it starts making the replacement.
const refillDelay = 50 * time.Millisecond

func poolKey(runtime, image, policy string) string {
	if policy == "" {
		policy = "default"
	}
	return runtime + "\x00" + image + "\x00" + policy
}

// poolRuntime is the backend of a pool's members.
func (c *Config) poolRuntime(pc PoolConfig) string {
	pol := ""
	if p, err := c.policyNamed(pc.Policy); err == nil {
		pol = p.Runtime
	}
	return c.runtimeName(pc.Runtime, pol)
}

// takePooled takes a ready member of the pool key, or returns nil.
func (m *Manager) takePooled(key string) *Sandbox {
	pl := m.pools[key]
	if pl == nil {
		return nil
	}
	defer pl.nudge()
	for {
		pl.mu.Lock()
		if len(pl.ready) == 0 {
			pl.mu.Unlock()
			return nil
		}
		sb := pl.ready[len(pl.ready)-1]
		pl.ready = pl.ready[:len(pl.ready)-1]
		m.met.setPoolReady(pl)
		pl.mu.Unlock()
		sb.mu.Lock()
		ok := !sb.ending && sb.rt != nil && sb.rec.State == api.StateRunning
		sb.mu.Unlock()
		if ok {
			return sb
		}
	}
}

func (pl *pool) nudge() {
	select {
	case pl.refill <- struct{}{}:
	default:
	}
}

// fill keeps one pool at its size until Close, and health-checks its
// members every interval.
func (m *Manager) fill(pl *pool) {
	defer m.wg.Done()
	check := time.NewTicker(10 * time.Second)
	defer check.Stop()
	retry := time.NewTimer(0)
	defer retry.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-pl.refill:
			// Let the caller that took a member run its first command
			// before the refill competes with it for the CPU.
			select {
			case <-time.After(refillDelay):
			case <-m.ctx.Done():
				return
			}
		case <-retry.C:
		case <-check.C:
			m.checkPool(pl)
		}
		for {
			pl.mu.Lock()
			want := pl.size - len(pl.ready) - pl.filling
			pl.mu.Unlock()
			if want <= 0 || m.ctx.Err() != nil {
				break
			}
			// Callers come first: no refill while creations queue.
			if !m.adm.room() || m.adm.acquire(m.ctx, false) != nil {
				retry.Reset(time.Second)
				break
			}
			pl.mu.Lock()
			pl.filling++
			pl.mu.Unlock()
			sb, err := m.newMember(pl)
			pl.mu.Lock()
			pl.filling--
			if err == nil {
				pl.ready = append(pl.ready, sb)
			}
			m.met.setPoolReady(pl)
			pl.mu.Unlock()
			if err != nil {
				m.log.Error("warm pool: create", "image", pl.image, "policy", pl.policy, "err", err)
				retry.Reset(5 * time.Second)
				break
			}
		}
	}
}

// newMember creates one pool member (admission already acquired).
func (m *Manager) newMember(pl *pool) (*Sandbox, error) {
	req := &api.CreateSandboxRequest{Image: pl.image, PolicyName: pl.policy, Runtime: pl.runtime}
	p, rec, err := m.cfg.resolve(req)
	if err != nil {
		m.adm.created()
		m.adm.release()
		return nil, err
	}
	ctx, cancel := context.WithTimeout(m.ctx, time.Minute)
	defer cancel()
	sb, err := m.createSandbox(ctx, p, rec, pl.key)
	if err != nil {
		return nil, err
	}
	m.warm(ctx, sb, pl)
	return sb, nil
}

// warmTimeout bounds a pool member's warm-up.
const warmTimeout = 10 * time.Second

// warm lets a new pool member pay its first command's one-time costs now,
// before anyone waits for it (runtime.Warmer; the gvisor backend's). It
// leaves no trace a caller could see. A warm-up that fails only costs the
// caller that one-time cost: the member is kept, and the health check
// judges it as any other.
func (m *Manager) warm(ctx context.Context, sb *Sandbox, pl *pool) {
	sb.mu.Lock()
	w, ok := sb.rt.(runtime.Warmer)
	sb.mu.Unlock()
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, warmTimeout)
	defer cancel()
	result := "ok"
	if err := w.Warm(ctx); err != nil {
		switch {
		case m.ctx.Err() != nil:
			return // shutting down
		case errors.Is(err, runtime.ErrCommandNotFound):
			// A root without the command (an image without true): not
			// warmed, and nothing is wrong with it.
			result = "skipped"
			m.log.Debug("warm pool: warm-up skipped", "sandbox", sb.id, "err", err)
		default:
			result = "failed"
			m.log.Warn("warm pool: warm-up", "sandbox", sb.id, "err", err)
		}
	}
	m.met.poolWarmups.With(pl.runtime, result).Inc()
}

// checkPool replaces members whose agent does not answer.
func (m *Manager) checkPool(pl *pool) {
	pl.mu.Lock()
	members := append([]*Sandbox(nil), pl.ready...)
	pl.mu.Unlock()
	for _, sb := range members {
		if m.healthy(sb) {
			continue
		}
		pl.mu.Lock()
		for i, x := range pl.ready {
			if x == sb {
				pl.ready = append(pl.ready[:i], pl.ready[i+1:]...)
				break
			}
		}
		pl.mu.Unlock()
		m.log.Warn("warm pool: unhealthy member replaced", "sandbox", sb.id)
		m.destroy(m.ctx, sb, api.StateFailed, "warm pool health check failed", true)
		pl.nudge()
	}
}

// healthy asks a sandbox's agent for something cheap that touches nothing
// a caller could later see.
func (m *Manager) healthy(sb *Sandbox) bool {
	sb.mu.Lock()
	rt, ok := sb.rt, !sb.ending && sb.rec.State == api.StateRunning
	sb.mu.Unlock()
	if !ok || rt == nil {
		return false
	}
	fs, ok := rt.(runtime.Files)
	if !ok {
		return true
	}
	ctx, cancel := context.WithTimeout(m.ctx, 5*time.Second)
	defer cancel()
	_, err := fs.Stat(ctx, "/workspace")
	return err == nil
}

// PoolSizes reports ready members per pool (for metrics and tests).
func (m *Manager) PoolSizes() map[string]int {
	out := map[string]int{}
	for _, pl := range m.pools {
		pl.mu.Lock()
		k := pl.image + "/" + pl.policy
		if pl.runtime != policy.RuntimeNative {
			k = pl.runtime + ":" + k
		}
		out[k] = len(pl.ready)
		pl.mu.Unlock()
	}
	return out
}

// setPoolReady reports a pool's ready members (the caller holds pl.mu).
func (m *Metrics) setPoolReady(pl *pool) {
	n := float64(len(pl.ready))
	if pl.runtime == policy.RuntimeNative {
		m.poolReady.With(pl.image, pl.policy).Set(n)
	}
	m.poolReadyRT.With(pl.runtime, pl.image, pl.policy).Set(n)
}
