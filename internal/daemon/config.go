// Package daemon is `airlock serve`: it loads the configuration (file,
// environment, flags), opens the store, makes the runtime and the manager,
// listens on the unix socket (and optionally TCP), and shuts down
// gracefully. It is wiring only; the behaviour lives in manager and server.
package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/airlock-dev/airlock/internal/egress"
	"github.com/airlock-dev/airlock/internal/egress/rules"
	"github.com/airlock-dev/airlock/internal/manager"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/quota"
	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/runtime/native"
	"github.com/airlock-dev/airlock/internal/uidpool"
)

// Config is the daemon's configuration file. Durations are Go durations
// ("90s", "1h"), sizes take binary suffixes ("1M").
type Config struct {
	Socket    string `yaml:"socket"`
	Listen    string `yaml:"listen"`
	DataDir   string `yaml:"data_dir"`
	StateDir  string `yaml:"state_dir"`
	LogFormat string `yaml:"log_format"`
	LogLevel  string `yaml:"log_level"`

	MaxSandboxes int    `yaml:"max_sandboxes"`
	MaxCreating  int    `yaml:"max_creating"`
	QueueSize    int    `yaml:"queue_size"`
	QueueTimeout string `yaml:"queue_timeout"`

	DefaultTimeout string `yaml:"default_timeout"`
	MaxLifetime    string `yaml:"max_lifetime"`
	IdleTimeout    string `yaml:"idle_timeout"`
	// SleepAfter: an idle native sandbox's agent sleeps after this long
	// without API activity (manager.Config.SleepAfter); "0": never.
	SleepAfter  string `yaml:"sleep_after"`
	ExecTimeout string `yaml:"exec_timeout"`
	MaxOutput   string `yaml:"max_output"`
	MaxUpload   string `yaml:"max_upload"`
	Retention   string `yaml:"retention"`
	// RecordMaxEvents bounds the activity record of each sandbox made with
	// record: true (0: 100000).
	RecordMaxEvents int `yaml:"record_max_events"`

	Images   map[string]string    `yaml:"images"`
	Policies map[string]string    `yaml:"policies"`
	Pools    []manager.PoolConfig `yaml:"pools"`
	// DefaultRuntime is the isolation backend of sandboxes whose request
	// and policy name none: native (""), or gvisor.
	DefaultRuntime string              `yaml:"default_runtime"`
	CgroupParent   string              `yaml:"cgroup_parent"`
	EgressHosts    map[string][]string `yaml:"egress_hosts"`
	// EgressHostPorts are the ports of the host's loopback that sandbox
	// policies may open with host.airlock.internal:PORT (none by
	// default). The daemon's own listen address is never reachable.
	EgressHostPorts []int `yaml:"egress_host_ports"`
	// Secrets names the secrets policies may bind to hosts
	// (network.credentials): where each is ("env:VAR", the daemon's
	// environment, or "file:PATH"; read when a sandbox is created) and the
	// hosts it may ever be sent to.
	Secrets  map[string]manager.SecretConfig `yaml:"secrets"`
	Insecure Insecure                        `yaml:"insecure"`
	// UIDPool is where, as root, each sandbox's host uid and gid range
	// (65536 ids) is leased from: {start, size}. Unset: root's ranges in
	// /etc/subuid and /etc/subgid, else uidpool.Default.
	UIDPool *uidpool.Range `yaml:"uid_pool"`

	// DiskQuota is where sandbox workspaces live, capped at each
	// sandbox's disk size: "loop" (an ext4 image per sandbox in
	// <data_dir>/volumes; needs root and mkfs.ext4), "tmpfs" (in memory,
	// counted against the sandbox's memory limit) or "auto" (the
	// default: loop when the host can, else tmpfs with a warning).
	DiskQuota string `yaml:"disk_quota"`
	// DiskReserve is the space kept free on the volumes' filesystem (the
	// data directory's, with the store): a sandbox whose disk size would
	// eat into it is refused. Default 1G.
	DiskReserve string `yaml:"disk_reserve"`
	// CopyOnWrite is how workspace snapshots, forks and sandboxes made
	// from snapshots get their files: "auto" (the default) clones the
	// volumes' ext4 images (reflinks: constant time) where the volume
	// directory's filesystem has reflinks, or else in a pool made once
	// for them (<data_dir>/volumes.pool: a sparse file the size of the
	// data disk, formatted XFS, needs mkfs.xfs from xfsprogs) mounted on
	// <data_dir>/volumes; without either, or with "off", files are
	// copied (time grows with the workspace). Logged at start, and shown
	// by airlock doctor.
	CopyOnWrite string `yaml:"copy_on_write"`
	// SpareVolumes is how many empty volumes of each recently asked-for
	// disk size are kept made ahead (with copy_on_write), so that a cold
	// creation takes one instead of making it. Default 2; 0: none.
	SpareVolumes *int `yaml:"spare_volumes"`
	// SnapshotQuota caps the bytes all workspace snapshots hold (in
	// <data_dir>/snapshots), e.g. 10G; a snapshot past it is refused
	// (409) once fork snapshots no live sandbox uses are collected.
	// "" or 0: no cap.
	SnapshotQuota string `yaml:"snapshot_quota"`

	// E2BDomain is the domain of the E2B API's host-based routing
	// (PORT-ID.DOMAIN, the SDKs' E2B_DOMAIN); "" routes by headers only.
	E2BDomain string `yaml:"e2b_domain"`
	// Ephemeral makes a private daemon for one process (airlock mcp's
	// standalone mode), never read from the file: its socket and store are
	// in a directory of its own under EphemeralRoot, removed when it
	// stops; it has no TCP listener and no warm pools; workspaces are
	// tmpfs; its sandboxes end with it (a reaper cleans up after a
	// SIGKILL) and are destroyed when it stops. The caller owns the
	// signals: Run stops when its context is cancelled.
	Ephemeral    bool `yaml:"-"`
	ephemeralDir string
}

// DefaultDiskReserve is the default of disk_reserve.
const DefaultDiskReserve = 1 << 30

// DefaultSpareVolumes is the default of spare_volumes.
const DefaultSpareVolumes = 2

// volumes opens where the daemon keeps sandbox workspaces (disk_quota):
// nil means tmpfs workspaces inside each sandbox.
func (c *Config) volumes(log *slog.Logger) (*quota.Volumes, error) {
	reserve := int64(DefaultDiskReserve)
	if c.DiskReserve != "" {
		n, err := policy.ParseSize(c.DiskReserve)
		if err != nil {
			return nil, fmt.Errorf("config: disk_reserve: %v", err)
		}
		reserve = n
	}
	dir := filepath.Join(c.DataDir, "volumes")
	if c.CopyOnWrite != "" && c.CopyOnWrite != "auto" && c.CopyOnWrite != "off" {
		return nil, fmt.Errorf("config: copy_on_write: %q: want auto or off", c.CopyOnWrite)
	}
	if c.SpareVolumes != nil && (*c.SpareVolumes < 0 || *c.SpareVolumes > 64) {
		return nil, fmt.Errorf("config: spare_volumes: %d: want 0 to 64", *c.SpareVolumes)
	}
	switch c.DiskQuota {
	case "", quota.KindAuto:
		vs, err := quota.OpenWith(dir, c.volumeOptions(quota.KindAuto, reserve))
		if err != nil {
			log.Warn("sandbox workspaces are tmpfs, in memory: each is capped at its disk size and counted against its memory limit (set disk_quota: tmpfs to choose this, or fix the cause to get volumes on disk)", "reason", err)
			return nil, nil
		}
		return vs, nil
	case quota.KindLoop:
		vs, err := quota.OpenWith(dir, c.volumeOptions(quota.KindLoop, reserve))
		if err != nil {
			return nil, fmt.Errorf("config: disk_quota: %v (or set disk_quota: tmpfs for workspaces in memory)", err)
		}
		return vs, nil
	case "tmpfs":
		return nil, nil
	}
	return nil, fmt.Errorf("config: disk_quota: %q: want auto, loop or tmpfs", c.DiskQuota)
}

// volumeOptions are the volumes' settings: copy-on-write in a pool in the
// data directory unless copy_on_write is off.
func (c *Config) volumeOptions(kind string, reserve int64) quota.Options {
	spares := DefaultSpareVolumes
	if c.SpareVolumes != nil {
		spares = *c.SpareVolumes
	}
	return quota.Options{Kind: kind, Reserve: reserve, CopyOnWrite: c.CopyOnWrite, Pool: filepath.Join(c.DataDir, "volumes.pool"), Spares: spares}
}

// Insecure opts every sandbox of the daemon out of isolation layers, by
// name; each is logged as a warning at start.
type Insecure struct {
	NoLandlock bool `yaml:"no_landlock"`
	NoSeccomp  bool `yaml:"no_seccomp"`
	NoCgroups  bool `yaml:"no_cgroups"`
}

// Load reads a configuration file ("" for none), then applies the
// environment (AIRLOCK_SOCKET, AIRLOCK_LISTEN, AIRLOCK_DATA_DIR,
// AIRLOCK_STATE_DIR, AIRLOCK_LOG_FORMAT, AIRLOCK_LOG_LEVEL,
// AIRLOCK_E2B_DOMAIN). Unknown keys
// are errors.
func Load(path string) (*Config, error) {
	c, err := LoadFile(path)
	if err != nil {
		return nil, err
	}
	for env, dst := range map[string]*string{
		"AIRLOCK_SOCKET": &c.Socket, "AIRLOCK_LISTEN": &c.Listen, "AIRLOCK_DATA_DIR": &c.DataDir,
		"AIRLOCK_STATE_DIR": &c.StateDir, "AIRLOCK_LOG_FORMAT": &c.LogFormat, "AIRLOCK_LOG_LEVEL": &c.LogLevel,
		"AIRLOCK_E2B_DOMAIN": &c.E2BDomain,
	} {
		if v, ok := os.LookupEnv(env); ok {
			*dst = v
		}
	}
	return c, nil
}

// LoadFile reads a configuration file ("" for none) without looking at
// the environment. Unknown keys are errors.
func LoadFile(path string) (*Config, error) {
	c := &Config{}
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		if err := dec.Decode(c); err != nil && err != io.EOF {
			return nil, fmt.Errorf("config %s: %s", path, yamlError(err))
		}
	}
	return c, nil
}

// DefaultSocket is the unix socket the daemon listens on and clients try
// first: /run/airlock/airlock.sock as root, $XDG_RUNTIME_DIR/airlock.sock
// otherwise.
func DefaultSocket() string {
	if os.Geteuid() == 0 {
		return "/run/airlock/airlock.sock"
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "airlock.sock")
	}
	return filepath.Join(os.TempDir(), "airlock-"+strconv.Itoa(os.Getuid()), "airlock.sock")
}

// Defaults fills in what is unset, as serve does (airlock doctor).
func (c *Config) Defaults() { c.defaults() }

func (c *Config) defaults() {
	if c.Socket == "" {
		c.Socket = DefaultSocket()
	}
	if c.DataDir == "" {
		if os.Geteuid() == 0 {
			c.DataDir = "/var/lib/airlock"
		} else if d := os.Getenv("XDG_DATA_HOME"); d != "" {
			c.DataDir = filepath.Join(d, "airlock")
		} else {
			home, _ := os.UserHomeDir()
			c.DataDir = filepath.Join(home, ".local", "share", "airlock")
		}
	}
	if c.StateDir == "" {
		if os.Geteuid() == 0 {
			c.StateDir = "/run/airlock/serve"
		} else {
			c.StateDir = filepath.Join(filepath.Dir(c.Socket), "airlock-serve")
		}
	}
}

// manager builds the manager's configuration (without runtime and store).
func (c *Config) manager() (manager.Config, int64, error) {
	var mc manager.Config
	var err error
	dur := func(name, v string, dst *time.Duration, allowNeg bool) {
		if v == "" || err != nil {
			return
		}
		d, e := time.ParseDuration(v)
		if e != nil || (d < 0 && !allowNeg) {
			err = fmt.Errorf("config: %s: %q is not a duration (e.g. 90s, 1h)", name, v)
		}
		*dst = d
	}
	dur("queue_timeout", c.QueueTimeout, &mc.QueueTimeout, false)
	dur("default_timeout", c.DefaultTimeout, &mc.DefaultTTL, false)
	dur("max_lifetime", c.MaxLifetime, &mc.MaxLifetime, false)
	dur("idle_timeout", c.IdleTimeout, &mc.DefaultIdle, true)
	dur("exec_timeout", c.ExecTimeout, &mc.ExecTimeout, false)
	dur("retention", c.Retention, &mc.Retention, false)
	dur("sleep_after", c.SleepAfter, &mc.SleepAfter, false)
	if c.IdleTimeout == "0" || c.IdleTimeout == "0s" {
		mc.DefaultIdle = -1 // "0" in the file means none
	}
	if c.SleepAfter == "0" || c.SleepAfter == "0s" {
		mc.SleepAfter = -1 // never
	}
	if err != nil {
		return mc, 0, err
	}
	var maxUpload int64
	if c.MaxOutput != "" {
		n, e := policy.ParseSize(c.MaxOutput)
		if e != nil || n > 64<<20 {
			return mc, 0, fmt.Errorf("config: max_output: %q: want a size up to 64M", c.MaxOutput)
		}
		mc.MaxOutput = int(n)
	}
	if c.SnapshotQuota != "" && c.SnapshotQuota != "0" {
		n, e := policy.ParseSize(c.SnapshotQuota)
		if e != nil {
			return mc, 0, fmt.Errorf("config: snapshot_quota: %v", e)
		}
		mc.SnapshotQuota = n
	}
	if c.MaxUpload != "" {
		n, e := policy.ParseSize(c.MaxUpload)
		if e != nil {
			return mc, 0, fmt.Errorf("config: max_upload: %v", e)
		}
		maxUpload = n
	}
	mc.MaxSandboxes, mc.MaxCreating, mc.QueueSize = c.MaxSandboxes, c.MaxCreating, c.QueueSize
	if c.RecordMaxEvents != 0 && c.RecordMaxEvents < 100 {
		return mc, 0, fmt.Errorf("config: record_max_events: %d: want at least 100 (0: the default, 100000)", c.RecordMaxEvents)
	}
	mc.RecordKeep = c.RecordMaxEvents
	if mc.MaxSandboxes < 0 || mc.MaxCreating < 0 || mc.QueueSize < 0 {
		return mc, 0, errors.New("config: max_sandboxes, max_creating and queue_size must not be negative")
	}
	mc.Images = map[string]string{}
	for name, dir := range c.Images {
		if !filepath.IsAbs(dir) {
			return mc, 0, fmt.Errorf("config: images.%s: %q must be an absolute directory", name, dir)
		}
		if err := native.CheckImage(dir); err != nil {
			return mc, 0, fmt.Errorf("config: images.%s: %v", name, err)
		}
		mc.Images[name] = dir
	}
	for _, port := range c.EgressHostPorts {
		if port < 1 || port > 65535 {
			return mc, 0, fmt.Errorf("config: egress_host_ports: %d is not a port (1-65535)", port)
		}
	}
	mc.HostAccess.Ports = c.EgressHostPorts
	mc.Policies = map[string]*policy.Policy{}
	for name, file := range c.Policies {
		p, err := policy.Load(file)
		if err != nil {
			return mc, 0, fmt.Errorf("config: policies.%s: %v", name, err)
		}
		if p.WorkspaceMode != "" {
			return mc, 0, fmt.Errorf("config: policies.%s: workspace.mode is for airlock run --workspace DIR; the daemon's sandboxes have no host workspace", name)
		}
		if p.Resources.Timeout != 0 {
			return mc, 0, fmt.Errorf("config: policies.%s: resources.timeout does not apply to the daemon's sandboxes (they have a TTL)", name)
		}
		for i, w := range p.Filesystem.Writable {
			if err := runtime.CheckWritableSource(fmt.Sprintf("filesystem.writable[%d]", i), w); err != nil {
				return mc, 0, fmt.Errorf("config: policies.%s: %v", name, err)
			}
		}
		for i, b := range p.Filesystem.Binds {
			if b.Writable {
				if err := runtime.CheckWritableSource(fmt.Sprintf("filesystem.binds[%d].source", i), b.Source); err != nil {
					return mc, 0, fmt.Errorf("config: policies.%s: %v", name, err)
				}
			}
		}
		if len(p.Environment.Pass) > 0 {
			return mc, 0, fmt.Errorf("config: policies.%s: environment.pass would copy the daemon's environment into sandboxes; use environment.set", name)
		}
		if err := mc.HostAccess.Check(p.Network); err != nil {
			return mc, 0, fmt.Errorf("config: policies.%s: %v (add the port to egress_host_ports)", name, err)
		}
		if p.Runtime != "" && p.Runtime != policy.RuntimeNative && c.Ephemeral {
			return mc, 0, fmt.Errorf("config: policies.%s: runtime %s: airlock mcp's private daemon offers only runtime native", name, p.Runtime)
		}
		mc.Policies[name] = p
	}
	mc.EgressHosts = map[string][]netip.Addr{}
	for name, ips := range c.EgressHosts {
		for _, ip := range ips {
			if err := egress.AddHost(mc.EgressHosts, name, ip); err != nil {
				return mc, 0, fmt.Errorf("config: egress_hosts.%s: %v", name, err)
			}
		}
	}
	for name, sc := range c.Secrets {
		if kind, _, err := policy.ParseSecret(sc.Source); err != nil || kind == policy.SecretName || name == "" || strings.Contains(name, ":") {
			return mc, 0, fmt.Errorf("config: secrets.%s.source: %q: want a name without ':' and env:VAR or file:/absolute/path", name, sc.Source)
		}
		if len(sc.Hosts) == 0 {
			return mc, 0, fmt.Errorf("config: secrets.%s.hosts: name the hosts the secret may be sent to", name)
		}
		for _, h := range sc.Hosts {
			p, err := rules.ParsePattern(h)
			if err != nil {
				return mc, 0, fmt.Errorf("config: secrets.%s.hosts: %v", name, err)
			}
			if !p.IsName() {
				return mc, 0, fmt.Errorf("config: secrets.%s.hosts: %q is an address: secrets are bound to names", name, h)
			}
		}
	}
	mc.Secrets = c.Secrets
	// Beside the runtime's state root, not in it (that root's mode is the
	// runtime's to choose: sandbox inits traverse it), and named after it,
	// so that two daemons never share it.
	mc.EgressDir = filepath.Clean(c.StateDir) + "-egress"
	mc.Pools = c.Pools
	switch c.DefaultRuntime {
	case "", policy.RuntimeNative, policy.RuntimeGVisor:
		mc.DefaultRuntime = c.DefaultRuntime
	default:
		return mc, 0, fmt.Errorf("config: default_runtime: unknown runtime %q: want %s or %s", c.DefaultRuntime, policy.RuntimeNative, policy.RuntimeGVisor)
	}
	if c.Ephemeral && mc.DefaultRuntime == policy.RuntimeGVisor {
		return mc, 0, errors.New("config: default_runtime: airlock mcp's private daemon offers only runtime native")
	}
	mc.CgroupParent = c.CgroupParent
	mc.Insecure.NoLandlock, mc.Insecure.NoSeccomp, mc.Insecure.NoCgroups = c.Insecure.NoLandlock, c.Insecure.NoSeccomp, c.Insecure.NoCgroups
	return mc, maxUpload, nil
}

// unknownField is how the YAML decoder says a key is not known, naming a
// Go type the reader of the error has never heard of.
var unknownField = regexp.MustCompile(`field (\S+) not found in type \S+`)

// yamlError is a decoding error on one line: each of its problems (with
// its line number), "; "-separated, unknown keys said as such.
func yamlError(err error) string {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err.Error()
	}
	msgs := make([]string, len(te.Errors))
	for i, m := range te.Errors {
		msgs[i] = unknownField.ReplaceAllString(m, "unknown key $1")
	}
	return strings.Join(msgs, "; ")
}
