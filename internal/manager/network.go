package manager

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/internal/egress"
	"github.com/airlock-dev/airlock/internal/errdefs"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/sandbox"
	"github.com/airlock-dev/airlock/internal/store"
)

// Limits of network queries and policies.
const (
	defaultNetworkLimit = 100
	maxNetworkLimit     = 1000
	maxNetworkRules     = 1024 // per list (allow, deny)
)

// NetworkQuery selects a sandbox's egress audit records.
type NetworkQuery struct {
	Allowed *bool // nil: allowed and denied
	// Problems keeps the records netsum.Problem counts: denied by a rule,
	// or failed before any byte moved either way.
	Problems bool
	Host     string    // the host as the gateway normalizes it (case and a trailing dot do not matter)
	Since    time.Time // only records that started at or after it
	Cursor   string    // list the records after the one with this cursor; "" from the oldest
	Limit    int       // page size: 0 is 100; at most 1000 (ignored by FollowNetwork)
}

// filter checks q and turns it into the store's filter.
func (q NetworkQuery) filter(id string) (store.EgressFilter, error) {
	f := store.EgressFilter{SandboxID: id, Allowed: q.Allowed, Problems: q.Problems, Since: q.Since, Limit: q.Limit}
	f.Host = strings.TrimSuffix(strings.ToLower(q.Host), ".")
	if q.Cursor != "" {
		n, err := strconv.ParseInt(q.Cursor, 10, 64)
		if err != nil || n < 0 {
			return f, invalid("cursor %s: not a cursor of this API (want the cursor of a network event)", errdefs.Quote(q.Cursor))
		}
		f.After = n
	}
	switch {
	case f.Limit == 0:
		f.Limit = defaultNetworkLimit
	case f.Limit < 0 || f.Limit > maxNetworkLimit:
		return f, invalid("limit %d: want 1 to %d", q.Limit, maxNetworkLimit)
	}
	return f, nil
}

func netCursor(id int64) string { return strconv.FormatInt(id, 10) }

func networkEvent(e store.EgressEvent) api.NetworkEvent {
	return api.NetworkEvent{
		Cursor: netCursor(e.ID), Time: e.Time, Proto: e.Proto, Method: e.Method, Host: e.Host, Port: e.Port,
		Path: e.Path, Addr: e.Addr, Allowed: e.Allowed, Rule: e.Rule, BytesUp: e.BytesUp, BytesDown: e.BytesDown,
		DurationMs: float64(e.Duration.Microseconds()) / 1000, Error: e.Error, Credential: e.Credential,
	}
}

// NetworkEvents returns one page of a sandbox's egress audit, oldest first.
// The records the gateways handed over before the call are stored first
// (they are written in batches, a moment later): a caller that saw a
// command end lists every connection the command made (unless the store
// takes more than 5 s to write them).
func (m *Manager) NetworkEvents(ctx context.Context, id string, q NetworkQuery) (api.NetworkEventsPage, error) {
	sb, err := m.lookup(ctx, id)
	if err != nil {
		return api.NetworkEventsPage{}, err
	}
	// Bounded: a store that is slow to write gives what it holds so far.
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	m.audit.sync(sctx)
	cancel()
	f, err := q.filter(id)
	if err != nil {
		return api.NetworkEventsPage{}, err
	}
	sb.touch(time.Now().UTC())
	limit := f.Limit
	f.Limit++ // one more, to learn whether there is a next page
	evs, err := m.st.ListEgressEvents(ctx, f)
	if err != nil {
		return api.NetworkEventsPage{}, err
	}
	page := api.NetworkEventsPage{Events: make([]api.NetworkEvent, 0, min(len(evs), limit))}
	if len(evs) > limit {
		evs = evs[:limit]
		page.NextCursor = netCursor(evs[limit-1].ID)
	}
	for _, e := range evs {
		page.Events = append(page.Events, networkEvent(e))
	}
	return page, nil
}

// FollowNetwork sends a sandbox's egress audit records that match q, from
// its cursor on, to emit: those stored, then each new one as the writer
// stores it, until the sandbox ends (stopped, failed or deleted: it then
// returns nil once every record it made was sent) or ctx is done. It calls
// start once the sandbox and q are checked, before anything is read: from
// then on no record is missed. It returns an ErrUnavailable when the
// daemon shuts down.
func (m *Manager) FollowNetwork(ctx context.Context, id string, q NetworkQuery, start func(), emit func(api.NetworkEvent) error) error {
	sb, err := m.lookup(ctx, id)
	if err != nil {
		return err
	}
	q.Limit = 0
	f, err := q.filter(id)
	if err != nil {
		return err
	}
	f.Limit = maxNetworkLimit
	sb.touch(time.Now().UTC())
	start()
	return m.followStored(ctx, sb, func() <-chan struct{} { return m.audit.wait(id) }, func() (bool, error) {
		evs, err := m.st.ListEgressEvents(ctx, f)
		if err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return false, err
			}
			return false, fmt.Errorf("sandbox %s: network events: %w", id, err)
		}
		for _, e := range evs {
			if err := emit(networkEvent(e)); err != nil {
				return false, err
			}
			f.After = e.ID
		}
		return len(evs) == f.Limit, nil
	})
}

// followStored is the loop of FollowNetwork and FollowEvents, over events
// of sb that a writer stores: page sends the next stored events after its
// own cursor and says whether it was a full page (more may be stored).
// It ends with nil once the sandbox ended and everything it made was
// sent, or when it was deleted (page returns a store.ErrNotFound).
func (m *Manager) followStored(ctx context.Context, sb *Sandbox, wait func() <-chan struct{}, page func() (full bool, err error)) error {
	for {
		// Read the sandbox's end and take the wake-up channel before
		// querying, so that nothing stored after the query is missed.
		ended := isClosed(sb.ended)
		var wake <-chan struct{}
		if !ended {
			wake = wait()
		}
		full, err := page()
		if errors.Is(err, store.ErrNotFound) {
			return nil // deleted
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		if full {
			continue
		}
		if ended {
			return nil
		}
		select {
		case <-wake:
		case <-sb.ended:
		case <-ctx.Done():
			return ctx.Err()
		case <-m.ctx.Done():
			return fmt.Errorf("the daemon is shutting down; reconnect with the last cursor: %w", errdefs.ErrUnavailable)
		}
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// applyNetwork returns base with the fields np sets replaced. To extend
// api.NetworkPolicy, add the field here and in networkView.
func applyNetwork(base policy.Network, np *api.NetworkPolicy) policy.Network {
	n := base
	if np == nil {
		return n
	}
	n.Mode, n.Allow, n.Deny = np.Mode, slices.Clone(np.Allow), slices.Clone(np.Deny)
	n.HTTP = nil
	for _, r := range np.HTTP {
		n.HTTP = append(n.HTTP, policy.HTTPRule{Hosts: slices.Clone(r.Hosts), Methods: slices.Clone(r.Methods), Paths: slices.Clone(r.Paths)})
	}
	return n
}

// networkView is the API's picture of a network policy.
func networkView(n policy.Network) api.NetworkPolicy {
	v := api.NetworkPolicy{Mode: n.Mode, Allow: slices.Clone(n.Allow), Deny: slices.Clone(n.Deny)}
	for _, r := range n.HTTP {
		v.HTTP = append(v.HTTP, api.HTTPRule{Hosts: slices.Clone(r.Hosts), Methods: slices.Clone(r.Methods), Paths: slices.Clone(r.Paths)})
	}
	if v.Mode == "" {
		v.Mode = policy.NetworkNone
	}
	return v
}

// network returns the network policy a sandbox was created with (from its
// spec record: the inline policy or the configured one it names), and
// whether that gave it an egress gateway. The spec's Network (a change
// made since) is not applied.
func (c *Config) network(rec specRecord) (policy.Network, bool, error) {
	var p *policy.Policy
	var err error
	if rec.Policy != "" {
		p, err = policy.Parse("policy", []byte(rec.Policy))
	} else {
		p, err = c.policyNamed(rec.PolicyName)
	}
	if err != nil {
		return policy.Network{}, false, fmt.Errorf("the sandbox's policy cannot be loaded (%v): %w", err, errdefs.ErrConflict)
	}
	return p.Network, sandbox.HasNetwork(p), nil
}

// NetworkPolicy returns a sandbox's network policy now: as created, or as
// last set with SetNetworkPolicy.
func (m *Manager) NetworkPolicy(ctx context.Context, id string) (api.NetworkPolicy, error) {
	sb, err := m.lookup(ctx, id)
	if err != nil {
		return api.NetworkPolicy{}, err
	}
	sb.touch(time.Now().UTC())
	sb.mu.Lock()
	rec := sb.spec
	sb.mu.Unlock()
	base, _, err := m.cfg.network(rec)
	if err != nil {
		return api.NetworkPolicy{}, fmt.Errorf("sandbox %s: %w", id, err)
	}
	return networkView(applyNetwork(base, rec.Network)), nil
}

// SetNetworkPolicy replaces a running (or paused) sandbox's mode and rules:
// it checks them, stores them in the sandbox's spec record (so they
// survive a daemon restart) and applies them to its egress gateway, which
// closes the open connections they deny. A sandbox created without a
// gateway (mode none) can only stay in mode none.
func (m *Manager) SetNetworkPolicy(ctx context.Context, id string, np api.NetworkPolicy) (api.NetworkPolicy, error) {
	switch np.Mode {
	case policy.NetworkNone, policy.NetworkAllowlist, policy.NetworkOpen:
	case "":
		return api.NetworkPolicy{}, invalid("mode: required (none, allowlist or open)")
	default:
		return api.NetworkPolicy{}, invalid("mode %s: want none, allowlist or open", errdefs.Quote(np.Mode))
	}
	if len(np.Allow) > maxNetworkRules || len(np.Deny) > maxNetworkRules || len(np.HTTP) > maxNetworkRules {
		return api.NetworkPolicy{}, invalid("allow, deny, http: at most %d rules each", maxNetworkRules)
	}
	sb, err := m.lookup(ctx, id)
	if err != nil {
		return api.NetworkPolicy{}, err
	}
	// sb.mu is held throughout, so that concurrent changes reach the store
	// and the gateway in the same order.
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.isFinal() || sb.ending || sb.rec.State == api.StateCreating {
		return api.NetworkPolicy{}, conflict("sandbox %s is %s: its network policy can change only while it runs", id, sb.rec.State)
	}
	base, hasGateway, err := m.cfg.network(sb.spec)
	if err != nil {
		return api.NetworkPolicy{}, fmt.Errorf("sandbox %s: %w", id, err)
	}
	if !hasGateway && (np.Mode != policy.NetworkNone || len(np.Allow) > 0 || len(np.Deny) > 0 || len(np.HTTP) > 0) {
		// Rules with mode none would be accepted and never apply: a
		// caller who adds one means to open something (airlock net ID
		// allow HOST keeps the mode it reads).
		return api.NetworkPolicy{}, conflict("sandbox %s was created with network mode none: it has no egress gateway, so no mode or rule can give it network, and whether a sandbox has one is fixed when it is created; create a sandbox whose policy has network mode allowlist or open", id)
	}
	n := applyNetwork(base, &np)
	check := policy.Policy{Network: n}
	if err := check.Validate(); err != nil {
		return api.NetworkPolicy{}, invalid("%v", err)
	}
	if _, err := egress.Compile(n); err != nil {
		return api.NetworkPolicy{}, invalid("%v", err)
	}
	if err := m.cfg.HostAccess.Check(n); err != nil {
		return api.NetworkPolicy{}, err
	}
	view := networkView(n)
	spec := sb.spec
	spec.Network = &view
	b := spec.marshal()
	if err := m.st.SetSpec(ctx, id, b); err != nil {
		return api.NetworkPolicy{}, fmt.Errorf("store: %w", err)
	}
	sb.spec, sb.rec.Spec = spec, b
	sb.activity, sb.dirty = time.Now().UTC(), true
	if sb.egress != nil {
		if err := sb.egress.SetNetwork(n); err != nil {
			// Compile accepted n above: this cannot happen.
			return api.NetworkPolicy{}, fmt.Errorf("sandbox %s: stored the new network policy but the gateway refused it: %w", id, err)
		}
	}
	m.log.Info("network policy changed", "sandbox", id, "mode", view.Mode, "allow", view.Allow, "deny", view.Deny)
	return networkView(n), nil
}
