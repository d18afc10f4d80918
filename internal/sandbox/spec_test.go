package sandbox

import (
	"reflect"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/internal/cache"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/seccomp"
)

func lookupFrom(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// Nothing of the caller's environment reaches the sandbox unless passed by
// name; the control passes it by name and it arrives.
func TestEnvPassesNothingByDefault(t *testing.T) {
	caller := lookupFrom(map[string]string{"SECRET": "s3cret", "TERM": "xterm-kitty", "HOME": "/home/me"})
	env, err := Env(&policy.Policy{}, nil, false, caller)
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(env, "\n")
	for _, leaked := range []string{"s3cret", "xterm-kitty", "/home/me"} {
		if strings.Contains(joined, leaked) {
			t.Errorf("caller value %q reached the sandbox: %v", leaked, env)
		}
	}
	for _, want := range []string{"PATH=" + DefaultPath, "HOME=/root", "LANG=C.UTF-8"} {
		if !strings.Contains(joined, want) {
			t.Errorf("missing %q in %v", want, env)
		}
	}
	env, _ = Env(&policy.Policy{}, []string{"SECRET"}, true, caller)
	joined = strings.Join(env, "\n")
	if !strings.Contains(joined, "SECRET=s3cret") || !strings.Contains(joined, "TERM=xterm-kitty") {
		t.Errorf("control: --env SECRET and a TTY's TERM should pass: %v", env)
	}
}

// Flags win over the policy, which wins over the defaults.
func TestEnvPrecedence(t *testing.T) {
	p := &policy.Policy{Environment: policy.Environment{Set: map[string]string{"A": "policy", "PATH": "/p"}, Pass: []string{"B"}}}
	env, err := Env(p, []string{"A=flag", "C"}, false, lookupFrom(map[string]string{"B": "caller-b"}))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		got[k] = v
	}
	if got["A"] != "flag" || got["PATH"] != "/p" || got["B"] != "caller-b" {
		t.Errorf("env = %v", got)
	}
	if _, ok := got["C"]; ok {
		t.Errorf("--env C passed a variable the caller does not have: %v", got)
	}
	for _, bad := range []string{"=x", "A\x00B=1"} {
		if _, err := Env(p, []string{bad}, false, lookupFrom(nil)); err == nil {
			t.Errorf("--env %q accepted", bad)
		}
	}
}

// The spec carries the compiled default filter, tightened by the policy;
// the explicit opt-out carries none.
func TestSpecSeccomp(t *testing.T) {
	base, err := Spec(&policy.Policy{}, Opts{})
	if err != nil || len(base.Seccomp) == 0 {
		t.Fatalf("default spec: %d instructions, %v", len(base.Seccomp), err)
	}
	// The default program (compiled ahead) is the compiler's, as is.
	if want, err := seccomp.Default().Compile(); err == nil {
		same := len(want) == len(base.Seccomp)
		for i := 0; same && i < len(want); i++ {
			in := base.Seccomp[i]
			same = in.Code == want[i].Code && in.Jt == want[i].Jt && in.Jf == want[i].Jf && in.K == want[i].K
		}
		if !same {
			t.Errorf("default spec: its %d instructions are not the %d Default().Compile() makes", len(base.Seccomp), len(want))
		}
	}
	tight, err := Spec(&policy.Policy{Seccomp: policy.Seccomp{Deny: []string{"chmod", "fchmodat"}}}, Opts{})
	if err != nil {
		t.Fatal(err)
	}
	if len(tight.Seccomp) == len(base.Seccomp) {
		t.Errorf("denying syscalls did not change the program (%d instructions)", len(base.Seccomp))
	}
	if _, err := Spec(&policy.Policy{Seccomp: policy.Seccomp{Deny: []string{"no_such_call"}}}, Opts{}); err == nil {
		t.Error("an unknown syscall was accepted")
	}
	off, err := Spec(&policy.Policy{}, Opts{Insecure: runtime.Insecure{NoSeccomp: true}})
	if err != nil || len(off.Seccomp) != 0 {
		t.Errorf("--insecure-no-seccomp: %d instructions, %v; want none", len(off.Seccomp), err)
	}
}

// Default limits apply where the policy is silent; the policy's own win.
func TestSpecLimits(t *testing.T) {
	s, err := Spec(&policy.Policy{Resources: policy.Resources{Memory: 64 << 20}}, Opts{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Limits.Memory != 64<<20 || s.Limits.Pids != policy.DefaultPids || s.Limits.Tmp != policy.DefaultTmp {
		t.Errorf("limits = %+v", s.Limits)
	}
	if len(s.Protected) == 0 {
		t.Error("no protected workspace paths by default")
	}
}

// Caches become writable binds and set their tools' variables; the
// policy's environment and the flags win over those.
func TestCaches(t *testing.T) {
	p := &policy.Policy{Caches: []string{"go", "pip", "x:/opt/x"}}
	p.Environment.Set = map[string]string{"PIP_CACHE_DIR": "/policy/pip"}
	env, err := Env(p, []string{"GOMODCACHE=/flag/mod"}, false, lookupFrom(nil))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		got[k] = v
	}
	if got["GOCACHE"] != "/cache/go/build" || got["GOMODCACHE"] != "/flag/mod" || got["PIP_CACHE_DIR"] != "/policy/pip" {
		t.Errorf("env = %v", got)
	}
	if _, ok := got["npm_config_cache"]; ok {
		t.Error("a cache not asked for sets its variable")
	}
	o := Opts{Insecure: runtime.Insecure{NoSeccomp: true}, Caches: []cache.Mount{
		{Name: "go", Source: "/c/go", Target: "/cache/go"},
		{Name: "pip", Source: "/c/pip", Target: "/cache/pip"},
		{Name: "x", Source: "/c/x", Target: "/opt/x"},
	}}
	s, err := Spec(p, o)
	if err != nil {
		t.Fatal(err)
	}
	want := []runtime.Bind{{Source: "/c/go", Target: "/cache/go", Writable: true}, {Source: "/c/pip", Target: "/cache/pip", Writable: true}, {Source: "/c/x", Target: "/opt/x", Writable: true}}
	if !reflect.DeepEqual(s.Binds, want) {
		t.Errorf("binds = %+v", s.Binds)
	}
	// Fail closed: a cache asked for but not prepared, or prepared for
	// another, is an error, not a sandbox without it.
	o.Caches = o.Caches[:2]
	if _, err := Spec(p, o); err == nil {
		t.Error("missing cache accepted")
	}
	o.Caches = []cache.Mount{{Name: "go", Source: "/c/go", Target: "/cache/go"}, {Name: "npm", Source: "/c/npm", Target: "/cache/npm"}, {Name: "x", Source: "/c/x", Target: "/opt/x"}}
	if _, err := Spec(p, o); err == nil {
		t.Error("wrong cache accepted")
	}
}
