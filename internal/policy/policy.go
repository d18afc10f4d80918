// Package policy owns airlock's sandbox policy: the Policy type, the YAML
// policy file format, its parsing, and its validation.
//
// The package has no side effects. It never touches the filesystem, the
// environment or the network, with one exception: Load reads the policy
// file it is given. Turning a Policy into mounts, cgroup limits, seccomp
// filters and so on is the job of other packages.
//
// What it must never do is silently ignore something: every key in a policy
// file is either understood or rejected, and every error names the file, the
// line and the key it is about, on one line, for example
//
//	agent.yaml:7: resources.memroy: unknown key (known: memory, swap, ...)
//
// Zero values mean "use the default" throughout; see the Default* constants.
package policy

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Policy is a parsed sandbox policy. The zero value is the default policy.
type Policy struct {
	// Image is a host directory used as the sandbox's root filesystem.
	// "" means the host's system directories, read-only.
	Image string
	// Workspace is the host directory mounted read-write at /workspace.
	// "" means the CLI decides (normally --workspace or the current directory).
	Workspace string
	// WorkspaceMode is how `airlock run` gives the sandbox a host
	// workspace: WorkspaceApply (or "", the same), WorkspaceReview or
	// WorkspaceLive. In a file: workspace: {path: DIR, mode: MODE}.
	// The daemon's sandboxes have no host workspace and refuse it.
	WorkspaceMode string
	// Runtime is the isolation backend: RuntimeNative (or "", the same)
	// or RuntimeGVisor.
	Runtime string

	Filesystem  Filesystem
	Resources   Resources
	Environment Environment
	Seccomp     Seccomp
	Network     Network

	// Caches are named persistent caches, as `airlock run --cache` takes
	// them: a known tool ("go", "npm", "pip", "cargo") or NAME:/path (see
	// package cache).
	Caches []string

	// Source is the file name the policy was loaded from, as given to Load
	// or Parse; "" for policies built from flags and defaults. Errors from
	// Validate are prefixed with it.
	Source string

	// pos maps key paths ("resources.memory", "filesystem.binds[0].target",
	// "environment.set.FOO") to the line they were defined on, so that
	// Validate can point at the offending line. Nil for policies not parsed
	// from a file.
	pos map[string]int
}

// Filesystem describes what the sandbox sees besides the root and the workspace.
type Filesystem struct {
	ReadOnly []string // host paths visible read-only at the same path inside
	Writable []string // host paths visible read-write at the same path inside
	Deny     []string // paths inside the sandbox that are masked
	Binds    []Bind
	Protect  Protect
}

// Bind makes the host path Source visible at Target inside the sandbox.
type Bind struct {
	Source, Target string
	Writable       bool
}

// Protect adjusts the list of workspace paths that stay read-only
// (see DefaultProtected and ProtectedPaths).
type Protect struct {
	Add, Remove []string
}

// Resources are the sandbox's limits. Zero means "the default" (see the
// Default* constants); the Effective method fills them in.
type Resources struct {
	Memory   int64 // bytes, cgroup memory.max
	Swap     int64 // bytes of swap on top of Memory, cgroup memory.swap.max
	Disk     int64 // bytes, cap on the writable copy-on-write layer and on a fresh workspace
	Tmp      int64 // bytes, size of /tmp
	Shm      int64 // bytes, size of /dev/shm
	FileSize int64 // bytes, RLIMIT_FSIZE

	Pids    int64         // cgroup pids.max
	CPU     float64       // cores, cgroup cpu.max
	Timeout time.Duration // wall-clock limit for the command
	NoFile  uint64        // RLIMIT_NOFILE
}

// Environment describes the sandboxed command's environment.
type Environment struct {
	Set  map[string]string // variables set to fixed values
	Pass []string          // variables copied from the caller's environment when present
}

// Seccomp adjusts the seccomp profile.
type Seccomp struct {
	Deny []string // syscall names denied in addition to the default profile
}

// Network describes the sandbox's network access.
type Network struct {
	// Mode is NetworkNone (or "", the same), NetworkAllowlist or
	// NetworkOpen. Outside "none", traffic goes through the egress gateway.
	Mode string
	// Allow and Deny are egress rules: HOST[:PORT] with *.domain
	// wildcards, IP literals and CIDRs, or @preset names (Allow only).
	// Deny wins.
	Allow, Deny []string
	// HTTP are request rules (methods, path prefixes) for the hosts they
	// name. Those hosts, and the hosts of Credentials, are inspected: the
	// gateway terminates their TLS with a CA of the sandbox's own.
	HTTP []HTTPRule
	// Credentials are secrets held outside the sandbox and added by the
	// gateway to requests to the hosts they are bound to.
	Credentials []Credential
	// MaxConnections caps the sandbox's concurrent connections through
	// the gateway (0: the gateway's default, 256); MaxBytes caps the bytes
	// both ways over the sandbox's life (0: no cap).
	MaxConnections int
	MaxBytes       int64
}

// HTTPRule allows requests to Hosts by method and path. A request to a
// host some rules name must match one of them.
type HTTPRule struct {
	Hosts   []string // HOST[:PORT] patterns: names and *.wildcards, no IPs
	Methods []string // allowed methods (GET, HEAD, ...); none: any
	Paths   []string // allowed path prefixes ("/repos/", "/user"); none: any
}

// Credential binds a secret to hosts. The sandbox sees a placeholder in
// Env; the gateway swaps the placeholder for the secret in the headers and
// query of HTTPS requests to Hosts (Basic authorization included), and
// sets Header to Format when Header is given. Requests to any other host
// keep the placeholder.
type Credential struct {
	Name  string   // shown in the audit; default: Env, or Header
	Hosts []string // HOST[:PORT] patterns: names and *.wildcards, no IPs
	// Secret says where the value is: "env:VAR" (airlock's environment),
	// "file:PATH" (a host file), or a bare name (a secret of `airlock
	// serve`'s configuration).
	Secret string
	Env    string // sandbox variable holding the placeholder
	Header string // header to set on every request to Hosts
	Format string // Header's value; "{secret}" stands for the secret (default "{secret}")
}

// Runtimes (isolation backends).
const (
	RuntimeNative = "native" // Linux namespaces, seccomp, Landlock, cgroups (the default)
	RuntimeGVisor = "gvisor" // gVisor's runsc: a user-space kernel
)

// Workspace modes (workspace.mode), for airlock run --workspace DIR.
const (
	// WorkspaceApply: the sandbox writes to a copy-on-write layer over
	// DIR, applied to DIR when the command ends (the default).
	WorkspaceApply = "apply"
	// WorkspaceReview: the same layer, applied only once reviewed
	// (airlock run --review).
	WorkspaceReview = "review"
	// WorkspaceLive: the sandbox writes to DIR itself while it runs.
	WorkspaceLive = "live"
)

// Network modes.
const (
	NetworkNone      = "none"      // no network at all (loopback only)
	NetworkAllowlist = "allowlist" // only what Allow names, through the egress gateway
	NetworkOpen      = "open"      // anything public but what Deny names, through the gateway
)

// Defaults used when a Resources field is 0.
const (
	DefaultMemory   int64         = 2 << 30   // 2GiB
	DefaultSwap     int64         = 0         // no swap
	DefaultPids     int64         = 1024      //
	DefaultCPU      float64       = 0         // no CPU cap
	DefaultTimeout  time.Duration = 0         // no timeout
	DefaultDisk     int64         = 1 << 30   // 1GiB
	DefaultTmp      int64         = 512 << 20 // 512MiB
	DefaultShm      int64         = 64 << 20  // 64MiB
	DefaultNoFile   uint64        = 1024      //
	DefaultFileSize int64         = 0         // no RLIMIT_FSIZE is set
)

// Limits enforced by ParseSize and Validate.
const (
	MaxSize   int64   = 1 << 50      // 1PiB; anything larger is a mistake
	MinSize   int64   = 1 << 20      // smallest memory, disk, tmp and shm accepted
	MaxPids   int64   = 1<<22 - 1024 // PID_MAX_LIMIT, less room for the runtime's own tasks (the agent's threads, gVisor's Sentry) added to the cgroup's limit
	MinMemory int64   = 4 << 20      // below it a native sandbox's init cannot start
	MinCPU    float64 = 0.01         // smallest cpu.max quota the kernel accepts
	MaxCPU    float64 = 65536
	MaxNoFile uint64  = 1 << 30
	// MinNoFile: the sandbox's init and runtime need descriptors of
	// their own before the command runs (below about 13 a native
	// sandbox could not be set up, below 7 gVisor's could not start).
	MinNoFile uint64 = 64
)

// Effective returns r with every zero field replaced by its default.
// Fields whose default is 0 (Swap, CPU, Timeout, FileSize) stay 0, meaning
// "none" or "no limit".
func (r Resources) Effective() Resources {
	if r.Memory == 0 {
		r.Memory = DefaultMemory
	}
	if r.Pids == 0 {
		r.Pids = DefaultPids
	}
	if r.Disk == 0 {
		r.Disk = DefaultDisk
	}
	if r.Tmp == 0 {
		r.Tmp = DefaultTmp
	}
	if r.Shm == 0 {
		r.Shm = DefaultShm
	}
	if r.NoFile == 0 {
		r.NoFile = DefaultNoFile
	}
	return r
}

// Error is the error type returned by Parse, Load and Validate. Its message
// is one line: "file:line: key: message", leaving out the parts that are
// unknown.
type Error struct {
	File string // policy file name; "" if the policy did not come from a file
	Line int    // 1-based line; 0 if unknown
	Key  string // dotted key path, e.g. "resources.memory" or "filesystem.binds[0].target"
	Msg  string
}

func (e *Error) Error() string {
	s := ""
	switch {
	case e.File != "" && e.Line > 0:
		s = e.File + ":" + strconv.Itoa(e.Line) + ": "
	case e.File != "":
		s = e.File + ": "
	case e.Line > 0:
		s = "line " + strconv.Itoa(e.Line) + ": "
	}
	if e.Key != "" {
		s += e.Key + ": "
	}
	// Keep the promise of one line even if a message quotes raw input.
	return oneLine.Replace(s + e.Msg)
}

var oneLine = strings.NewReplacer("\n", `\n`, "\r", `\r`)

// errAt builds an Error about key, using the line recorded for key (or for
// the closest enclosing key that has one).
func (p *Policy) errAt(key, format string, args ...any) *Error {
	return &Error{File: p.Source, Line: p.lineOf(key), Key: key, Msg: fmt.Sprintf(format, args...)}
}

func (p *Policy) lineOf(key string) int {
	for k := key; k != ""; k = parentKey(k) {
		if l, ok := p.pos[k]; ok {
			return l
		}
	}
	return 0
}

// parentKey strips the last component of a key path:
// "a.b[2]" -> "a.b", "a.b" -> "a", "a" -> "".
func parentKey(k string) string {
	for i := len(k) - 1; i >= 0; i-- {
		switch k[i] {
		case '.':
			return k[:i]
		case '[':
			return k[:i]
		}
	}
	return ""
}

// Where a credential's secret is (Credential.Secret).
const (
	SecretEnv  = "env"  // env:VAR, airlock's environment
	SecretFile = "file" // file:/absolute/path
	SecretName = "name" // a bare name: a secret of airlock serve's configuration
)

// ParseSecret splits a Credential.Secret into its kind (SecretEnv,
// SecretFile or SecretName) and what it refers to.
func ParseSecret(s string) (kind, ref string, err error) {
	k, r, hasKind := strings.Cut(s, ":")
	switch {
	case s == "":
		return "", "", errors.New("missing: say where the secret is (env:VAR, file:PATH, or the name of a secret of airlock serve)")
	case !hasKind:
		return SecretName, s, nil
	case k != SecretEnv && k != SecretFile:
		return "", "", fmt.Errorf("unknown source %q (want env:VAR, file:PATH, or a name)", k)
	case r == "":
		return "", "", fmt.Errorf("%q names nothing", s)
	case k == SecretFile && !filepath.IsAbs(r):
		return "", "", fmt.Errorf("file %q: want an absolute path", r)
	}
	return k, r, nil
}
