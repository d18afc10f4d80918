package policy

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/airlock-dev/airlock/internal/cache"
	"github.com/airlock-dev/airlock/internal/egress/rules"
	"github.com/airlock-dev/airlock/internal/seccomp"
)

// Validate checks p and returns the first problem found as an *Error
// naming p.Source, the line (for parsed policies) and the key. Parse and
// Load call it; the CLI must call it again after overriding fields from
// flags.
//
// It checks that host paths (image, workspace, read_only, writable, bind
// sources) are absolute; that paths inside the sandbox (read_only,
// writable, deny, bind targets) are absolute, and that mount targets are
// not "/", /workspace, or in /proc, /sys or /dev, and are not mounted twice;
// that the runtime is known; that sizes are within [0, 1PiB] and memory, disk, tmp and shm are not
// absurdly small; that pids, cpu and nofile are in range; that the network
// mode is available; that environment variable names and values are
// usable; that protected paths stay inside the workspace; and that seccomp
// syscall names exist (seccomp.Lookup); and that caches are valid (known
// names or NAME:/path, see package cache), given once, not nested, and
// not mounted where a bind or another path of the filesystem section is.
func (p *Policy) Validate() error {
	for _, check := range []func() error{p.validateRuntime, p.validatePaths, p.validateProtect, p.validateResources, p.validateEnvironment, p.validateSeccomp, p.validateNetwork, p.validateCaches} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

func (p *Policy) validateRuntime() error {
	switch p.Runtime {
	case "", RuntimeNative, RuntimeGVisor:
		return nil
	}
	return p.errAt("runtime", "unknown runtime %q: want %s or %s", p.Runtime, RuntimeNative, RuntimeGVisor)
}

func (p *Policy) validatePaths() error {
	if p.Image != "" {
		if err := p.checkHostPath("image", p.Image); err != nil {
			return err
		}
	}
	switch p.WorkspaceMode {
	case "", WorkspaceApply, WorkspaceReview, WorkspaceLive:
	default:
		return p.errAt("workspace.mode", "unknown workspace mode %q: want %s (the default: changes applied when the command ends), %s (applied once reviewed) or %s (the directory itself, written while the command runs)", p.WorkspaceMode, WorkspaceApply, WorkspaceReview, WorkspaceLive)
	}
	if p.Workspace != "" {
		key := "workspace"
		if _, ok := p.pos["workspace.path"]; ok {
			key = "workspace.path"
		}
		if err := p.checkHostPath(key, p.Workspace); err != nil {
			return err
		}
		if filepath.Clean(p.Workspace) == "/" {
			return p.errAt(key, "refusing to use / as the workspace: it would make the whole host writable")
		}
	}
	fs := &p.Filesystem
	mounted := map[string]string{} // target -> key that mounts it
	mount := func(key, target string) error {
		if err := p.checkTarget(key, target); err != nil {
			return err
		}
		t := filepath.Clean(target)
		if other, dup := mounted[t]; dup {
			return p.errAt(key, "%q is already mounted by %s", t, other)
		}
		mounted[t] = key
		return nil
	}
	for _, l := range []struct {
		name  string
		paths []string
	}{{"read_only", fs.ReadOnly}, {"writable", fs.Writable}} {
		for i, s := range l.paths {
			key := fmt.Sprintf("filesystem.%s[%d]", l.name, i)
			if err := p.checkHostPath(key, s); err != nil {
				return err
			}
			if err := mount(key, s); err != nil {
				return err
			}
		}
	}
	for i, b := range fs.Binds {
		key := fmt.Sprintf("filesystem.binds[%d]", i)
		if err := p.checkHostPath(key+".source", b.Source); err != nil {
			return err
		}
		if err := mount(key+".target", b.Target); err != nil {
			return err
		}
	}
	for i, s := range fs.Deny {
		key := fmt.Sprintf("filesystem.deny[%d]", i)
		if err := p.checkSandboxPath(key, s); err != nil {
			return err
		}
		if filepath.Clean(s) == "/" {
			return p.errAt(key, "cannot deny /")
		}
	}
	return nil
}

func (p *Policy) checkHostPath(key, s string) error {
	relative := "must be absolute"
	if p.Source != "" {
		relative = "relative paths need the policy file's location (use policy.Load, or an absolute path)"
	}
	return p.checkPath(key, s, relative)
}

func (p *Policy) checkSandboxPath(key, s string) error {
	return p.checkPath(key, s, "paths inside the sandbox must be absolute")
}

// checkPath refuses empty, NUL-carrying and relative paths; relative says
// what to do about the last.
func (p *Policy) checkPath(key, s, relative string) error {
	switch {
	case s == "":
		return p.errAt(key, "empty path")
	case strings.ContainsRune(s, 0):
		return p.errAt(key, "path %q contains a NUL byte", s)
	case !filepath.IsAbs(s):
		return p.errAt(key, "relative path %q: %s", s, relative)
	case len(s) >= pathMax:
		return p.errAt(key, "path %q is %d bytes long; Linux paths are shorter than %d", shorten(s), len(s), pathMax)
	}
	for _, name := range strings.Split(s, "/") {
		if len(name) > nameMax {
			// No such file can exist: a rule for it would do nothing.
			return p.errAt(key, "path %q has a name of %d bytes; Linux allows at most %d", shorten(s), len(name), nameMax)
		}
	}
	return nil
}

// Linux's limits on a path and on one name in it (PATH_MAX, NAME_MAX).
const pathMax, nameMax = 4096, 255

// shorten cuts s for an error message.
func shorten(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// reservedTargets are mount points owned by the runtime.
var reservedTargets = []string{"/proc", "/sys", "/dev"}

func (p *Policy) checkTarget(key, s string) error {
	if err := p.checkSandboxPath(key, s); err != nil {
		return err
	}
	t := filepath.Clean(s)
	switch t {
	case "/":
		return p.errAt(key, "cannot mount over /")
	case "/workspace":
		return p.errAt(key, "cannot mount over /workspace (set workspace instead)")
	}
	for _, r := range reservedTargets {
		if t == r || strings.HasPrefix(t, r+"/") {
			return p.errAt(key, "cannot mount %q: %s is managed by the sandbox", t, r)
		}
	}
	return nil
}

func (p *Policy) validateProtect() error {
	pr := &p.Filesystem.Protect
	added := map[string]string{}
	for i, s := range pr.Add {
		key := fmt.Sprintf("filesystem.protect.add[%d]", i)
		rel, err := p.checkRel(key, s)
		if err != nil {
			return err
		}
		added[rel] = key
	}
	for i, s := range pr.Remove {
		key := fmt.Sprintf("filesystem.protect.remove[%d]", i)
		rel, err := p.checkRel(key, s)
		if err != nil {
			return err
		}
		if !isDefaultProtected(rel) {
			return p.errAt(key, "%q is not a default protected path (defaults: %s)", s, strings.Join(DefaultProtected(), ", "))
		}
		if other, ok := added[rel]; ok {
			return p.errAt(key, "%q is also added by %s", s, other)
		}
	}
	return nil
}

func (p *Policy) checkRel(key, s string) (string, error) {
	switch {
	case s == "":
		return "", p.errAt(key, "empty path")
	case strings.ContainsRune(s, 0):
		return "", p.errAt(key, "path %q contains a NUL byte", s)
	case filepath.IsAbs(s):
		return "", p.errAt(key, "%q: protected paths are relative to the workspace, not absolute", s)
	}
	rel, ok := cleanRel(s)
	if !ok {
		if filepath.Clean(s) == "." {
			return "", p.errAt(key, "%q names the whole workspace; name a path inside it", s)
		}
		return "", p.errAt(key, "%q: \"..\" is not allowed in protected paths", s)
	}
	return rel, nil
}

func (p *Policy) validateResources() error {
	r := &p.Resources
	sizes := []struct {
		key string
		v   int64
		min bool // reject nonzero values below MinSize
	}{
		{"resources.memory", r.Memory, true},
		{"resources.swap", r.Swap, false},
		{"resources.disk", r.Disk, true},
		{"resources.tmp", r.Tmp, true},
		{"resources.shm", r.Shm, true},
		{"resources.fsize", r.FileSize, false},
	}
	for _, s := range sizes {
		switch {
		case s.v < 0:
			return p.errAt(s.key, "size %d must not be negative", s.v)
		case s.v > MaxSize:
			return p.errAt(s.key, "size %d is larger than the 1PiB limit", s.v)
		case s.min && s.v > 0 && s.v < MinSize:
			return p.errAt(s.key, "%d bytes is below the minimum of 1MiB (sizes without a unit are bytes: did you mean %dMiB?)", s.v, s.v)
		}
	}
	if r.Memory >= MinSize && r.Memory < MinMemory {
		return p.errAt("resources.memory", "%d bytes is below the minimum of %dMiB (the sandbox's init needs some of it)", r.Memory, MinMemory>>20)
	}
	switch {
	case r.Pids < 0:
		return p.errAt("resources.pids", "%d must not be negative", r.Pids)
	case r.Pids > MaxPids:
		return p.errAt("resources.pids", "%d is larger than the limit of %d (the kernel's, less what the runtime adds for its own tasks)", r.Pids, MaxPids)
	}
	switch {
	case math.IsNaN(r.CPU) || math.IsInf(r.CPU, 0) || r.CPU < 0:
		return p.errAt("resources.cpu", "invalid number of cores %v", r.CPU)
	case r.CPU > 0 && r.CPU < MinCPU:
		return p.errAt("resources.cpu", "%v cores is below the minimum of %v", r.CPU, MinCPU)
	case r.CPU > MaxCPU:
		return p.errAt("resources.cpu", "%v cores is more than %v", r.CPU, MaxCPU)
	}
	if r.Timeout < 0 {
		return p.errAt("resources.timeout", "%v must not be negative", r.Timeout)
	}
	if r.NoFile > MaxNoFile {
		return p.errAt("resources.nofile", "%d is larger than %d", r.NoFile, MaxNoFile)
	}
	if r.NoFile > 0 && r.NoFile < MinNoFile {
		return p.errAt("resources.nofile", "%d is below the minimum of %d (the sandbox's init needs descriptors of its own; a command can lower its own limit with ulimit -n)", r.NoFile, MinNoFile)
	}
	return nil
}

func (p *Policy) validateEnvironment() error {
	env := &p.Environment
	names := make([]string, 0, len(env.Set))
	for name := range env.Set {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		v := env.Set[name]
		key := keyPath("environment.set", name)
		if err := validEnvName(name); err != "" {
			return p.errAt(key, "invalid variable name %q: %s", name, err)
		}
		if strings.ContainsRune(v, 0) {
			return p.errAt(key, "value contains a NUL byte")
		}
	}
	for i, name := range env.Pass {
		key := fmt.Sprintf("environment.pass[%d]", i)
		if err := validEnvName(name); err != "" {
			return p.errAt(key, "invalid variable name %q: %s", name, err)
		}
		if _, ok := env.Set[name]; ok {
			return p.errAt(key, "%q is also in environment.set; keep only one", name)
		}
	}
	return nil
}

func validEnvName(name string) string {
	switch {
	case name == "":
		return "empty"
	case strings.ContainsRune(name, '='):
		return "contains '='"
	case strings.ContainsRune(name, 0):
		return "contains a NUL byte"
	}
	return ""
}

func (p *Policy) validateSeccomp() error {
	for i, name := range p.Seccomp.Deny {
		if _, ok := seccomp.Lookup(name); !ok {
			return p.errAt(fmt.Sprintf("seccomp.deny[%d]", i), "unknown syscall %q", name)
		}
	}
	return nil
}

func (p *Policy) validateNetwork() error {
	mode := p.Network.Mode
	if mode == "" {
		mode = NetworkNone
	}
	switch mode {
	case NetworkNone, NetworkAllowlist, NetworkOpen:
	default:
		return p.errAt("network.mode", "unknown mode %q (known: none, allowlist, open)", p.Network.Mode)
	}
	for i, r := range p.Network.Allow {
		if _, err := rules.Compile(string(rules.ModeAllowlist), []string{r}, nil); err != nil {
			return p.errAt(fmt.Sprintf("network.allow[%d]", i), "%v", err)
		}
	}
	for i, r := range p.Network.Deny {
		if _, err := rules.Compile(string(rules.ModeAllowlist), nil, []string{r}); err != nil {
			return p.errAt(fmt.Sprintf("network.deny[%d]", i), "%v", err)
		}
	}
	if err := p.validateHTTPRules(); err != nil {
		return err
	}
	return p.validateCredentials()
}

// inspectedHosts checks the host patterns of an HTTP rule or a
// credential: names and wildcards only (an address has no name to check a
// server's certificate against).
func (p *Policy) inspectedHosts(key string, hosts []string) error {
	if len(hosts) == 0 {
		return p.errAt(key, "no hosts: name the hosts this applies to")
	}
	for j, h := range hosts {
		pat, err := rules.ParsePattern(h)
		if err != nil {
			return p.errAt(fmt.Sprintf("%s[%d]", key, j), "%v", err)
		}
		if !pat.IsName() {
			return p.errAt(fmt.Sprintf("%s[%d]", key, j), "%q is an address: request rules and credentials apply to names only", h)
		}
	}
	return nil
}

func (p *Policy) validateHTTPRules() error {
	for i, r := range p.Network.HTTP {
		key := fmt.Sprintf("network.http[%d]", i)
		if err := p.inspectedHosts(key+".hosts", r.Hosts); err != nil {
			return err
		}
		for j, m := range r.Methods {
			if m == "" || strings.Trim(strings.ToUpper(m), "ABCDEFGHIJKLMNOPQRSTUVWXYZ-") != "" {
				return p.errAt(fmt.Sprintf("%s.methods[%d]", key, j), "invalid method %q (want a name like GET)", m)
			}
		}
		for j, path := range r.Paths {
			if !strings.HasPrefix(path, "/") || strings.ContainsAny(path, "?#\x00") || strings.Contains(path, "/../") || strings.HasSuffix(path, "/..") {
				return p.errAt(fmt.Sprintf("%s.paths[%d]", key, j), "invalid path prefix %q (want an absolute path such as /repos/, without a query or dot segments)", path)
			}
		}
	}
	return nil
}

func (p *Policy) validateCredentials() error {
	envs := map[string]bool{}
	for i, c := range p.Network.Credentials {
		key := fmt.Sprintf("network.credentials[%d]", i)
		if err := p.inspectedHosts(key+".hosts", c.Hosts); err != nil {
			return err
		}
		kind, ref, err := ParseSecret(c.Secret)
		if err != nil {
			return p.errAt(key+".secret", "%v", err)
		}
		if c.Env == "" && c.Header == "" {
			return p.errAt(key, "neither env nor header: the secret would never be used (set env to give the sandbox a placeholder, header to add it to every request)")
		}
		if c.Env != "" {
			if err := validEnvName(c.Env); err != "" {
				return p.errAt(key+".env", "invalid variable name %q: %s", c.Env, err)
			}
			if envs[c.Env] {
				return p.errAt(key+".env", "%s holds the placeholder of an earlier credential", c.Env)
			}
			envs[c.Env] = true
			if _, ok := p.Environment.Set[c.Env]; ok || slices.Contains(p.Environment.Pass, c.Env) {
				return p.errAt(key+".env", "%s is also set by environment: the sandbox must see only the placeholder", c.Env)
			}
		}
		if kind == SecretEnv && slices.Contains(p.Environment.Pass, ref) {
			return p.errAt(key+".secret", "environment.pass would copy $%s, the secret itself, into the sandbox", ref)
		}
		if c.Header != "" && (strings.Trim(strings.ToLower(c.Header), "abcdefghijklmnopqrstuvwxyz0123456789-_") != "" || len(c.Header) > 128) {
			return p.errAt(key+".header", "invalid header name %q", c.Header)
		}
		if c.Format != "" && (c.Header == "" || !strings.Contains(c.Format, "{secret}") || strings.ContainsAny(c.Format, "\r\n\x00")) {
			return p.errAt(key+".format", "format %q: want a header value containing {secret}, with header set", c.Format)
		}
	}
	return nil
}

func (p *Policy) validateCaches() error {
	fs := &p.Filesystem
	var mounts []string // what the filesystem section mounts or hides
	mounts = append(mounts, fs.ReadOnly...)
	mounts = append(mounts, fs.Writable...)
	for _, b := range fs.Binds {
		mounts = append(mounts, b.Target)
	}
	mounts = append(mounts, fs.Deny...)
	for i := range p.Caches {
		key := fmt.Sprintf("caches[%d]", i)
		// ParseAll on the list so far: the checks of this one, and of
		// this one against the earlier ones.
		cs, err := cache.ParseAll(p.Caches[:i+1])
		if err != nil {
			return p.errAt(key, "%v", err)
		}
		c := cs[i]
		for _, m := range mounts {
			m = filepath.Clean(m)
			if m == c.Target || strings.HasPrefix(m, c.Target+"/") || strings.HasPrefix(c.Target, m+"/") {
				return p.errAt(key, "cache %q at %s overlaps %s of the filesystem section", c.Name, c.Target, m)
			}
		}
	}
	return nil
}
