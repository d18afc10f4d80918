// Package manager owns the lifecycle of the daemon's sandboxes: the state
// machine (creating, running, paused, stopped, failed), processes started
// through the API, TTLs, idle timeouts and maximum lifetimes, warm pools,
// admission control, persistence in the store, and re-adoption of running
// sandboxes after a daemon restart.
//
// It depends on a runtime (through runtime.Runtime and the small Adopter
// interface) and on the store, never on HTTP. It must never leave a sandbox
// behind that it does not track, never forget one that still holds
// resources on the host, and never hand one caller's sandbox (or anything
// left in it) to another.
package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/internal/agent"
	"github.com/airlock-dev/airlock/internal/egress"
	"github.com/airlock-dev/airlock/internal/egress/rules"
	"github.com/airlock-dev/airlock/internal/errdefs"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/quota"
	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/store"
)

// Adopter is what the manager needs from a runtime beyond Create to survive
// its own restarts: reconnect to a sandbox a previous daemon created, remove
// one it cannot reconnect to, and list what exists on the host.
type Adopter interface {
	Adopt(ctx context.Context, id string) (runtime.Sandbox, *agent.State, error)
	Remove(ctx context.Context, id string) error
	List() ([]string, error)
}

// Config configures a Manager. Zero durations and counts take the defaults
// noted on each field.
type Config struct {
	// Runtime is the native backend, Adopter its adoption.
	Runtime runtime.Runtime
	Adopter Adopter
	// Runtimes are the other backends by name ("gvisor"), each adopting
	// its own sandboxes; DefaultRuntime is the one a sandbox gets when
	// neither its request nor its policy names one ("": native).
	Runtimes       map[string]Backend
	DefaultRuntime string
	Store          *store.Store
	Log            *slog.Logger

	// Policies are the named policies callers may ask for; "default" (or
	// the empty name) is used when they name none. Images maps image names
	// to root filesystem directories.
	Policies map[string]*policy.Policy
	Images   map[string]string
	// Insecure opts every sandbox out of layers, by name (never chosen by
	// an API caller).
	Insecure     runtime.Insecure
	CgroupParent string
	// EgressHosts is the egress gateway's static host map (name -> addresses,
	// consulted before DNS).
	EgressHosts map[string][]netip.Addr
	// EgressDir holds each networked sandbox's CA and trust files (outside
	// the sandbox), one directory per sandbox id.
	EgressDir string
	// HostAccess is what sandboxes may reach on this host: the ports of
	// its loopback a policy may open (host.airlock.internal:PORT), and
	// the daemon's own API, never reached.
	HostAccess egress.HostAccess
	// Secrets are the named secrets policies may bind to hosts
	// (network.credentials), each with the hosts it may be sent to.
	Secrets map[string]SecretConfig
	// CacheDir holds the persistent caches sandboxes ask for (caches:),
	// one directory per name, owned by the daemon's user and shared by
	// every caller; "": no caches (asking for one is refused).
	CacheDir string

	MaxSandboxes int           // live sandboxes (pool members included); default 100
	MaxCreating  int           // concurrent creations; default 2×CPUs, at least 4
	QueueSize    int           // creations waiting for a slot; default 256
	QueueTimeout time.Duration // how long one may wait; default 60s

	DefaultTTL  time.Duration // default 1h
	MaxLifetime time.Duration // default 24h; TTL extensions stop there
	DefaultIdle time.Duration // default 15m; negative: none
	// SleepAfter: a running sandbox with no process running, not a pool
	// member, is asked to sleep after this long without API activity
	// (runtime.Sleeper: its agent gives its place to a program of a few
	// pages until the next request); default 10s; negative: never.
	SleepAfter  time.Duration
	ExecTimeout time.Duration // default timeout of run-and-wait exec; default 10m
	MaxOutput   int           // bytes per stream in an exec result; default 1 MiB
	Retention   time.Duration // how long stopped and failed sandboxes are listed; default 1h

	Pools []PoolConfig
	// Tick is how often timeouts, pools and activity are checked; default 1s.
	Tick time.Duration

	// AuditBuffer bounds the egress audit records waiting to be stored
	// (beyond, they are dropped and counted); default 8192. AuditKeep is
	// how many records are kept per sandbox, the newest; default 100000.
	AuditBuffer int
	AuditKeep   int
	// RecordKeep is how many activity record events are kept per
	// sandbox, the first ones (the last kept says the record is full);
	// default 100000.
	RecordKeep int

	Metrics *Metrics

	// Snapshots (snapshot.go): SnapshotDir holds their files; VolumeDir
	// is where the runtime mounts the sandboxes' workspace volumes (""
	// when workspaces are in memory: no snapshots); SnapshotQuota caps
	// the bytes all snapshots hold (0: no cap). Volumes are the volumes
	// the runtime makes the workspaces on: snapshots clone their images
	// when they can (snapshot_cow.go); nil: snapshots copy.
	SnapshotDir   string
	VolumeDir     string
	SnapshotQuota int64
	Volumes       *quota.Volumes
}

// SecretConfig is a named secret: where it is ("env:VAR" or "file:PATH")
// and the host patterns it may ever be sent to. A policy binding it to a
// host outside them is refused, whoever wrote the policy.
type SecretConfig struct {
	Source string   `yaml:"source"`
	Hosts  []string `yaml:"hosts"`
}

// secret resolves a named secret (egress.SecretLookup).
func (c *Config) secret(name string) (string, error) {
	sc, ok := c.Secrets[name]
	if !ok {
		return "", fmt.Errorf("secret %s: not in the daemon's configuration (secrets:)", errdefs.Quote(name))
	}
	return egress.ResolveSecret(sc.Source, nil)
}

// checkCredentials refuses credentials that bind a named secret to a host
// outside the hosts the daemon's configuration allows it.
func (c *Config) checkCredentials(n policy.Network) error {
	for i, cr := range n.Credentials {
		if kind, _, _ := policy.ParseSecret(cr.Secret); kind != policy.SecretName {
			continue // env: or file: (a named policy of the daemon's own)
		}
		sc, ok := c.Secrets[cr.Secret]
		if !ok {
			return invalid("network.credentials[%d]: secret %s is not in the daemon's configuration (secrets:)", i, errdefs.Quote(cr.Secret))
		}
		var allowed []rules.Pattern
		for _, h := range sc.Hosts {
			if p, err := rules.ParsePattern(h); err == nil {
				allowed = append(allowed, p)
			}
		}
		for _, h := range cr.Hosts {
			p, err := rules.ParsePattern(h)
			if err != nil {
				return invalid("network.credentials[%d]: %v", i, err)
			}
			if !slices.ContainsFunc(allowed, p.Within) {
				return invalid("network.credentials[%d]: secret %s may not be sent to %s (the daemon's configuration allows %s)", i, errdefs.Quote(cr.Secret), errdefs.Quote(h), strings.Join(sc.Hosts, ", "))
			}
		}
	}
	return nil
}

// PoolConfig sizes the warm pool of one image and named policy.
type PoolConfig struct {
	Image  string `yaml:"image"`
	Policy string `yaml:"policy"`
	// Runtime is the members' backend ("": the policy's, else the
	// daemon's default); a member is handed only to a request for it.
	Runtime string `yaml:"runtime"`
	Size    int    `yaml:"size"`
}

func (c *Config) defaults() {
	if c.MaxSandboxes <= 0 {
		c.MaxSandboxes = 100
	}
	if c.MaxCreating <= 0 {
		c.MaxCreating = 4
	}
	if c.QueueSize <= 0 {
		c.QueueSize = 256
	}
	if c.QueueTimeout <= 0 {
		c.QueueTimeout = time.Minute
	}
	if c.DefaultTTL <= 0 {
		c.DefaultTTL = time.Hour
	}
	if c.MaxLifetime <= 0 {
		c.MaxLifetime = 24 * time.Hour
	}
	if c.DefaultIdle == 0 {
		c.DefaultIdle = 15 * time.Minute
	}
	if c.SleepAfter == 0 {
		c.SleepAfter = 10 * time.Second
	}
	if c.ExecTimeout <= 0 {
		c.ExecTimeout = 10 * time.Minute
	}
	if c.MaxOutput <= 0 {
		c.MaxOutput = 1 << 20
	}
	if c.Retention <= 0 {
		c.Retention = time.Hour
	}
	if c.Tick <= 0 {
		c.Tick = time.Second
	}
	if c.AuditBuffer <= 0 {
		c.AuditBuffer = 8192
	}
	if c.RecordKeep < 2 {
		c.RecordKeep = 100000
	}
	if c.AuditKeep <= 0 {
		c.AuditKeep = 100000
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics()
	}
	if c.Policies == nil {
		c.Policies = map[string]*policy.Policy{}
	}
	if c.Policies["default"] == nil {
		c.Policies["default"] = &policy.Policy{}
	}
}

// Manager runs the daemon's sandboxes.
type Manager struct {
	cfg   Config
	log   *slog.Logger
	st    *store.Store
	met   *Metrics
	specs *specCache

	mu        sync.Mutex
	sandboxes map[string]*Sandbox // every sandbox the store has, final ones included

	adm     admission
	pools   map[string]*pool
	audit   *auditLog
	records *recordLog

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	ready  chan struct{}

	snaps snapshots
}

// New makes a manager. Start it with Recover.
func New(cfg Config) (*Manager, error) {
	cfg.defaults()
	if cfg.Runtime == nil || cfg.Store == nil {
		return nil, errors.New("manager: a runtime and a store are required")
	}
	for _, pc := range cfg.Pools {
		if _, err := cfg.policyNamed(pc.Policy); err != nil {
			return nil, fmt.Errorf("pool %q/%q: %w", pc.Image, pc.Policy, err)
		}
		if _, err := cfg.image(pc.Image); err != nil {
			return nil, fmt.Errorf("pool %q/%q: %w", pc.Image, pc.Policy, err)
		}
		if _, err := cfg.backend(cfg.poolRuntime(pc)); err != nil {
			return nil, fmt.Errorf("pool %q/%q: %w", pc.Image, pc.Policy, err)
		}
		if pc.Size < 0 || pc.Size > cfg.MaxSandboxes {
			return nil, fmt.Errorf("pool %q/%q: size %d must be between 0 and max_sandboxes (%d)", pc.Image, pc.Policy, pc.Size, cfg.MaxSandboxes)
		}
	}
	if len(cfg.Runtimes) > 0 && cfg.Adopter != nil {
		cfg.Adopter = newAdopters(cfg.Adopter, cfg.Runtimes)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{
		cfg: cfg, log: cfg.Log, st: cfg.Store, met: cfg.Metrics, specs: newSpecCache(),
		sandboxes: map[string]*Sandbox{}, pools: map[string]*pool{},
		ctx: ctx, cancel: cancel, ready: make(chan struct{}),
	}
	m.audit = newAuditLog(cfg.Store, cfg.Log, cfg.AuditBuffer, cfg.AuditKeep, func(n int) { m.met.auditDropped.Add(float64(n)) })
	m.records = newRecordLog(cfg.Store, m, cfg.AuditBuffer, cfg.RecordKeep)
	m.adm.init(cfg.MaxSandboxes, cfg.MaxCreating, cfg.QueueSize, cfg.QueueTimeout, m.met)
	for _, pc := range cfg.Pools {
		if pc.Size > 0 {
			rtName := cfg.poolRuntime(pc)
			k := poolKey(rtName, pc.Image, pc.Policy)
			m.pools[k] = &pool{key: k, runtime: rtName, image: pc.Image, policy: pc.Policy, size: pc.Size, refill: make(chan struct{}, 1)}
		}
	}
	m.met.bind(m)
	return m, nil
}

// Ready is closed once Recover has run.
func (m *Manager) Ready() <-chan struct{} { return m.ready }

// Close stops the manager's background work. Sandboxes keep running (a
// restarted daemon re-adopts them); pool members are destroyed only when
// destroyPools is set (a clean shutdown: they hold no caller's state).
// Egress gateways are closed (their listeners die with the daemon anyway)
// and every audit record they made is stored before Close returns (within
// ctx's deadline but at least 1 s, or 10 s when ctx has none).
func (m *Manager) Close(ctx context.Context, destroyPools bool) {
	m.cancel()
	m.wg.Wait()
	if destroyPools {
		for _, sb := range m.snapshot() {
			sb.mu.Lock()
			pooled := sb.rec.Pool != "" && !sb.isFinal()
			sb.mu.Unlock()
			if pooled {
				m.destroy(ctx, sb, api.StateStopped, "daemon shut down", true)
			}
		}
	}
	for _, sb := range m.snapshot() {
		sb.mu.Lock()
		gw := sb.egress
		sb.egress = nil
		sb.mu.Unlock()
		if gw != nil {
			gw.Close()
		}
	}
	// Records stop answering execs (they wait for the next daemon) and
	// store what they have.
	for _, sb := range m.snapshot() {
		sb.mu.Lock()
		rc := sb.recorder
		sb.recorder = nil
		sb.mu.Unlock()
		if rc != nil {
			rc.Detach()
		}
	}
	wait := 10 * time.Second
	if d, ok := ctx.Deadline(); ok {
		wait = max(time.Until(d), time.Second)
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wait)
	if err := m.audit.close(actx); err != nil {
		m.log.Error("egress audit: not every record was stored before shutdown", "err", err)
	}
	if err := m.records.close(actx); err != nil {
		m.log.Error("activity record: not every event was stored before shutdown", "err", err)
	}
	cancel()
	m.flushActivity(ctx)
}

// snapshot returns every sandbox, sorted by id.
func (m *Manager) snapshot() []*Sandbox {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*Sandbox, 0, len(m.sandboxes))
	for _, sb := range m.sandboxes {
		out = append(out, sb)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// lookup finds a sandbox that the caller (ctx's tenant) may see: not a
// pool member, and of the caller's tenant unless the caller is the
// operator. Another tenant's sandbox is "not found", as if it did not exist.
func (m *Manager) lookup(ctx context.Context, id string) (*Sandbox, error) {
	m.mu.Lock()
	sb := m.sandboxes[id]
	m.mu.Unlock()
	if sb == nil {
		return nil, fmt.Errorf("sandbox %s: %w", errdefs.Quote(id), errdefs.ErrNotFound)
	}
	sb.mu.Lock()
	hidden := sb.rec.Pool != "" || !maySee(ctx, sb.rec.Tenant)
	sb.mu.Unlock()
	if hidden {
		return nil, fmt.Errorf("sandbox %s: %w", errdefs.Quote(id), errdefs.ErrNotFound)
	}
	return sb, nil
}

// CountByState counts the sandboxes callers can see, by state, plus the
// pool members as "pooled".
func (m *Manager) CountByState() map[string]int {
	out := map[string]int{api.StateCreating: 0, api.StateRunning: 0, api.StatePaused: 0, api.StateStopped: 0, api.StateFailed: 0, "pooled": 0}
	for _, sb := range m.snapshot() {
		sb.mu.Lock()
		if sb.rec.Pool != "" {
			out["pooled"]++
		} else {
			out[sb.rec.State]++
		}
		sb.mu.Unlock()
	}
	return out
}

// invalid wraps a message as an ErrInvalid.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), errdefs.ErrInvalid)
}

// conflict wraps a message as an ErrConflict.
func conflict(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), errdefs.ErrConflict)
}
