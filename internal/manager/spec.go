package manager

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/internal/egress/gateway"
	"github.com/airlock-dev/airlock/internal/errdefs"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/sandbox"
)

// Limits on what a create request may carry.
const (
	maxLabels     = 64
	maxLabelLen   = 256
	maxEnv        = 256
	maxEnvLen     = 128 << 10
	maxFiles      = 1024
	maxPolicySize = 64 << 10
	maxCaches     = 32
)

// policyNamed returns a configured policy; "" is "default".
func (c *Config) policyNamed(name string) (*policy.Policy, error) {
	if name == "" {
		name = "default"
	}
	p, ok := c.Policies[name]
	if !ok {
		names := make([]string, 0, len(c.Policies))
		for n := range c.Policies {
			names = append(names, n)
		}
		sort.Strings(names)
		return nil, invalid("policy_name %s: no such policy (configured: %s)", errdefs.Quote(name), strings.Join(names, ", "))
	}
	return p, nil
}

// image returns the root filesystem directory of a configured image; "" is
// the host's system directories.
func (c *Config) image(name string) (string, error) {
	if name == "" {
		return "", nil
	}
	dir, ok := c.Images[name]
	if !ok {
		return "", invalid("image %s: no such image (the daemon's configuration names its images)", errdefs.Quote(name))
	}
	return dir, nil
}

// resolve checks a create request and turns it into a policy, the spec
// record to store, and the environment every process gets.
func (c *Config) resolve(req *api.CreateSandboxRequest) (*policy.Policy, specRecord, error) {
	rec := specRecord{Image: req.Image, PolicyName: req.PolicyName, Resources: req.Resources, Caches: req.Caches, Record: req.Record}
	if req.PolicyName != "" && req.Policy != "" {
		return nil, rec, invalid("give policy_name or policy, not both")
	}
	img, err := c.image(req.Image)
	if err != nil {
		return nil, rec, err
	}
	var p policy.Policy
	if req.Policy != "" {
		if len(req.Policy) > maxPolicySize {
			return nil, rec, invalid("policy: %d bytes, the limit is %d", len(req.Policy), maxPolicySize)
		}
		parsed, err := policy.Parse("policy", []byte(req.Policy))
		if err != nil {
			return nil, rec, invalid("%v", err)
		}
		if err := apiPolicyAllowed(parsed); err != nil {
			return nil, rec, err
		}
		p = *parsed
		rec.Policy = req.Policy
	} else {
		named, err := c.policyNamed(req.PolicyName)
		if err != nil {
			return nil, rec, err
		}
		p = *named
	}
	if img != "" {
		p.Image = img
	}
	if req.Runtime != "" {
		p.Runtime = req.Runtime
	}
	if err := applyResources(&p, req.Resources); err != nil {
		return nil, rec, err
	}
	if len(req.Caches) > 0 {
		if len(req.Caches) > maxCaches {
			return nil, rec, invalid("caches: %d caches, the limit is %d", len(req.Caches), maxCaches)
		}
		if c.CacheDir == "" {
			return nil, rec, invalid("caches: this daemon keeps no caches")
		}
		p.Caches = append(slices.Clip(p.Caches), req.Caches...)
	}
	if err := p.Validate(); err != nil {
		return nil, rec, invalid("%v", err)
	}
	// Never a native sandbox for a request or policy that asked for
	// another backend: an unknown or missing one is refused.
	p.Runtime = c.runtimeName("", p.Runtime)
	if _, err := c.backend(p.Runtime); err != nil {
		return nil, rec, err
	}
	rec.Runtime = p.Runtime
	env, err := baseEnv(&p, req.Env)
	if err != nil {
		return nil, rec, err
	}
	rec.Env = env
	return &p, rec, nil
}

// apiPolicyAllowed refuses what an API caller must not choose: anything
// naming a path on the host, the daemon's own environment, and timeouts
// (which are the API's TTL).
func apiPolicyAllowed(p *policy.Policy) error {
	switch {
	case p.Image != "":
		return invalid("policy: image names a host directory; use the image field with a configured image")
	case p.Workspace != "":
		return invalid("policy: workspace names a host directory, which API callers may not choose")
	case p.WorkspaceMode != "":
		return invalid("policy: workspace.mode is for airlock run --workspace DIR; the daemon's sandboxes have no host workspace")
	case len(p.Filesystem.ReadOnly) > 0 || len(p.Filesystem.Writable) > 0 || len(p.Filesystem.Binds) > 0:
		return invalid("policy: filesystem.read_only, writable and binds name host paths, which API callers may not choose; define a named policy in the daemon's configuration")
	case len(p.Environment.Pass) > 0:
		return invalid("policy: environment.pass would copy the daemon's environment into the sandbox; use environment.set or env")
	case p.Resources.Timeout != 0:
		return invalid("policy: resources.timeout is not used by the API; use timeout_seconds")
	}
	if p.Network.MaxConnections > gateway.DefaultMaxConns {
		return invalid("policy: network.max_connections %d: API callers may lower the gateway's cap of %d connections, not raise it (the connections are the daemon's)", p.Network.MaxConnections, gateway.DefaultMaxConns)
	}
	for i, c := range p.Network.Credentials {
		if kind, _, _ := policy.ParseSecret(c.Secret); kind != policy.SecretName {
			return invalid("policy: network.credentials[%d].secret: %s reads the daemon's environment or files, which API callers may not choose; name a secret of the daemon's configuration (secrets:)", i, errdefs.Quote(c.Secret))
		}
	}
	return nil
}

// applyResources overrides p's limits with the request's.
func applyResources(p *policy.Policy, r api.Resources) error {
	if r.Memory != "" {
		n, err := policy.ParseSize(r.Memory)
		if err != nil {
			return invalid("resources.memory: %v", err)
		}
		p.Resources.Memory = n
	}
	if r.Disk != "" {
		n, err := policy.ParseSize(r.Disk)
		if err != nil {
			return invalid("resources.disk: %v", err)
		}
		p.Resources.Disk = n
	}
	if r.Pids < 0 || r.CPU < 0 {
		return invalid("resources: pids and cpu must not be negative")
	}
	if r.Pids > 0 {
		p.Resources.Pids = r.Pids
	}
	if r.CPU > 0 {
		p.Resources.CPU = r.CPU
	}
	return nil
}

// baseEnv is the environment of every process of a sandbox: the defaults,
// the policy's, then the request's.
func baseEnv(p *policy.Policy, extra map[string]string) (map[string]string, error) {
	list, err := sandbox.Env(p, nil, false, func(string) (string, bool) { return "", false })
	if err != nil {
		return nil, invalid("%v", err)
	}
	if len(extra) > maxEnv {
		return nil, invalid("env: %d variables, the limit is %d", len(extra), maxEnv)
	}
	env := make(map[string]string, len(list)+len(extra))
	for _, kv := range list {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	for k, v := range extra {
		if err := checkEnv(k, v); err != nil {
			return nil, err
		}
		env[k] = v
	}
	return env, nil
}

// checkEnv validates one variable.
func checkEnv(k, v string) error {
	if k == "" || strings.ContainsAny(k, "=\x00") {
		return invalid("env: bad variable name %s", errdefs.Quote(k))
	}
	if strings.ContainsRune(v, 0) {
		return invalid("env %s: the value contains a NUL byte", errdefs.Quote(k))
	}
	if len(k)+len(v) > maxEnvLen {
		return invalid("env %s: longer than %d bytes", errdefs.Quote(k), maxEnvLen)
	}
	return nil
}

// checkLabels validates labels.
func checkLabels(l map[string]string) error {
	if len(l) > maxLabels {
		return invalid("labels: %d labels, the limit is %d", len(l), maxLabels)
	}
	for k, v := range l {
		if k == "" || len(k) > maxLabelLen || len(v) > maxLabelLen || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return invalid("labels: bad label %s=%s (keys are 1-%d bytes without '=', values up to %d bytes, no NUL)", errdefs.Quote(k), errdefs.Quote(v), maxLabelLen, maxLabelLen)
		}
	}
	return nil
}

// specCache keeps compiled runtime specs of named policies (compiling the
// seccomp filter is the costly part).
type specCache struct {
	mu sync.Mutex
	m  map[string]*runtime.Spec
}

func newSpecCache() *specCache { return &specCache{m: map[string]*runtime.Spec{}} }

// get returns the runtime spec for p. Inline policies are compiled every
// time; named ones once per image, policy and resources.
func (c *specCache) get(p *policy.Policy, rec specRecord, o sandbox.Opts) (*runtime.Spec, error) {
	key := ""
	if rec.Policy == "" {
		// The caches' host directories too: each tenant has its own.
		key = fmt.Sprintf("%s\x00%s\x00%+v\x00%q\x00%+v", rec.Image, rec.PolicyName, rec.Resources, rec.Caches, o.Caches)
		c.mu.Lock()
		s := c.m[key]
		c.mu.Unlock()
		if s != nil {
			cp := *s
			return &cp, nil
		}
	}
	s, err := sandbox.Spec(p, o)
	if err != nil {
		return nil, invalid("%v", err)
	}
	if key != "" {
		c.mu.Lock()
		c.m[key] = s
		c.mu.Unlock()
		cp := *s
		return &cp, nil
	}
	return s, nil
}
