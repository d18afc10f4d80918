// Package sandbox turns a validated policy into what a runtime needs: the
// runtime.Spec (with the compiled seccomp filter) and the environment of the
// sandboxed command. It is shared by `airlock run` and, later, the daemon, so
// that both build sandboxes the same way. It performs no I/O.
package sandbox

import (
	"fmt"
	"sort"
	"strings"

	"github.com/airlock-dev/airlock/internal/cache"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/seccomp"
)

// Opts are choices made by the caller rather than by the policy.
type Opts struct {
	Insecure     runtime.Insecure
	CgroupParent string
	// Caches are the policy's caches prepared on the host (cache.Prepare),
	// in the policy's order: each becomes a writable bind.
	Caches []cache.Mount
}

// Spec compiles p into a runtime spec.
func Spec(p *policy.Policy, o Opts) (*runtime.Spec, error) {
	r := p.Resources.Effective()
	s := &runtime.Spec{
		Image:     p.Image,
		Workspace: p.Workspace,
		Protected: p.ProtectedPaths(),
		ReadOnly:  p.Filesystem.ReadOnly,
		Writable:  p.Filesystem.Writable,
		Deny:      p.Filesystem.Deny,
		Limits: runtime.Limits{
			Memory: r.Memory, Swap: r.Swap, Pids: r.Pids, CPU: r.CPU, Disk: r.Disk,
			Tmp: r.Tmp, Shm: r.Shm, NoFile: r.NoFile, FileSize: r.FileSize, Timeout: r.Timeout,
		},
		Insecure:     o.Insecure,
		CgroupParent: o.CgroupParent,
	}
	if HasNetwork(p) {
		s.Listen = []string{HTTPProxyAddr, SOCKSProxyAddr}
	}
	for _, b := range p.Filesystem.Binds {
		s.Binds = append(s.Binds, runtime.Bind{Source: b.Source, Target: b.Target, Writable: b.Writable})
	}
	// Never a sandbox without a cache it asked for, nor with another.
	caches, err := cache.ParseAll(p.Caches)
	if err != nil {
		return nil, err
	}
	if len(caches) != len(o.Caches) {
		return nil, fmt.Errorf("caches: %d asked for, %d prepared", len(caches), len(o.Caches))
	}
	for i, c := range caches {
		m := o.Caches[i]
		if m.Name != c.Name || m.Target != c.Target || m.Source == "" {
			return nil, fmt.Errorf("caches[%d]: prepared %s at %s for %s at %s", i, m.Name, m.Target, c.Name, c.Target)
		}
		s.Binds = append(s.Binds, runtime.Bind{Source: m.Source, Target: m.Target, Writable: true})
	}
	if !o.Insecure.NoSeccomp {
		// The default profile's program is compiled ahead; a policy
		// that denies more compiles its own.
		var prog []seccomp.SockFilter
		var err error
		if len(p.Seccomp.Deny) == 0 {
			prog, err = seccomp.DefaultProgram()
		} else {
			prof := seccomp.Default()
			if err := prof.Deny(p.Seccomp.Deny...); err != nil {
				return nil, err
			}
			prog, err = prof.Compile()
		}
		if err != nil {
			return nil, err
		}
		for _, in := range prog {
			s.Seccomp = append(s.Seccomp, runtime.SockFilter{Code: in.Code, Jt: in.Jt, Jf: in.Jf, K: in.K})
		}
	}
	return s, nil
}

// The egress gateway's listeners inside a sandbox that has network access:
// an HTTP proxy (CONNECT and plain HTTP) and a SOCKS5 proxy, on loopback.
const (
	HTTPProxyAddr  = "127.0.0.1:3128"
	SOCKSProxyAddr = "127.0.0.1:1080"
)

// HasNetwork reports whether p gives the sandbox egress (through the
// gateway).
func HasNetwork(p *policy.Policy) bool {
	return p.Network.Mode == policy.NetworkAllowlist || p.Network.Mode == policy.NetworkOpen
}

// ProxyEnv is the environment that points a sandbox's tools at the
// gateway, in both spellings tools read. socks5h: the gateway resolves
// names (there is no resolver inside).
func ProxyEnv() map[string]string {
	env := map[string]string{}
	for k, v := range map[string]string{
		"HTTP_PROXY": "http://" + HTTPProxyAddr, "HTTPS_PROXY": "http://" + HTTPProxyAddr,
		"ALL_PROXY": "socks5h://" + SOCKSProxyAddr, "NO_PROXY": "localhost,127.0.0.1,::1",
	} {
		env[k] = v
		env[strings.ToLower(k)] = v
	}
	return env
}

// DefaultPath is the PATH of a sandboxed command unless the policy sets one.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Env builds the sandboxed command's environment. Nothing comes from the
// caller's environment unless the policy or a flag passes it by name:
// defaults, then the policy's set and pass, then flags (KEY=VALUE sets,
// KEY alone passes the caller's value through). lookup reads the caller's
// environment.
func Env(p *policy.Policy, flags []string, tty bool, lookup func(string) (string, bool)) ([]string, error) {
	env := map[string]string{
		"PATH": DefaultPath, "HOME": "/root", "LANG": "C.UTF-8", "USER": "root", "LOGNAME": "root",
	}
	if tty {
		env["TERM"] = "xterm-256color"
		if v, ok := lookup("TERM"); ok && v != "" {
			env["TERM"] = v
		}
	}
	if HasNetwork(p) {
		for k, v := range ProxyEnv() {
			env[k] = v
		}
	}
	// The caches' variables; the policy's and the flags' own win.
	caches, err := cache.ParseAll(p.Caches)
	if err != nil {
		return nil, err
	}
	for k, v := range cache.Env(caches) {
		env[k] = v
	}
	for k, v := range p.Environment.Set {
		env[k] = v
	}
	for _, k := range p.Environment.Pass {
		if v, ok := lookup(k); ok {
			env[k] = v
		}
	}
	for _, f := range flags {
		k, v, set := strings.Cut(f, "=")
		if k == "" || strings.ContainsRune(k, 0) || strings.ContainsRune(v, 0) {
			return nil, fmt.Errorf("--env %q: want KEY=VALUE or KEY", f)
		}
		if set {
			env[k] = v
		} else if v, ok := lookup(k); ok {
			env[k] = v
		}
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out, nil
}

// MergeEnv sets the variables of add in env (a list of KEY=VALUE, as Env
// returns), replacing any of the same name, and keeps the list sorted.
func MergeEnv(env []string, add map[string]string) []string {
	m := make(map[string]string, len(env)+len(add))
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	for k, v := range add {
		m[k] = v
	}
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}
