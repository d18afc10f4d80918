package policy

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/seccomp"
)

const full = `# a policy using every key
image: /srv/rootfs
workspace: /home/me/project
filesystem:
  read_only: [/opt/tools, /data/ref]
  writable:  [/var/cache/pip-shared]
  deny: [/usr/share/secret, /etc/machine-id]
  binds:
    - {source: /host/dir, target: /inside/dir, mode: ro}
    - {source: /host/rw, target: /inside/rw, mode: rw}
    - source: /host/default
      target: /inside/default
  protect:
    add: [secrets/, Makefile]
    remove: [.vscode]
resources:
  memory: 512MiB
  swap: 0
  pids: 256
  cpu: 1.5
  timeout: 10m
  disk: 1GiB
  tmp: 256MiB
  shm: 64MiB
  nofile: 1024
  fsize: 1GiB
environment:
  set: {FOO: bar, PATH: /usr/bin:/bin, MODE: 0755, EMPTY: ""}
  pass: [TERM, GITHUB_TOKEN]
network:
  mode: allowlist
  allow: [api.github.com, "@pypi"]
  deny: [evil.example]
  http:
    - hosts: [api.github.com]
      methods: [GET, HEAD]
      paths: [/repos/]
  credentials:
    - name: github
      hosts: [api.github.com]
      secret: env:GH_TOKEN
      env: GH_PLACEHOLDER
      header: Authorization
      format: "Bearer {secret}"
  max_connections: 64
  max_bytes: 1GiB
caches: [go, "tools:/opt/cachetools"]
`

func TestParseFull(t *testing.T) {
	p, err := Parse("agent.yaml", []byte(full))
	if err != nil {
		t.Fatal(err)
	}
	want := Policy{
		Image:     "/srv/rootfs",
		Workspace: "/home/me/project",
		Filesystem: Filesystem{
			ReadOnly: []string{"/opt/tools", "/data/ref"},
			Writable: []string{"/var/cache/pip-shared"},
			Deny:     []string{"/usr/share/secret", "/etc/machine-id"},
			Binds: []Bind{
				{Source: "/host/dir", Target: "/inside/dir"},
				{Source: "/host/rw", Target: "/inside/rw", Writable: true},
				{Source: "/host/default", Target: "/inside/default"},
			},
			Protect: Protect{Add: []string{"secrets/", "Makefile"}, Remove: []string{".vscode"}},
		},
		Resources: Resources{
			Memory: 512 << 20, Swap: 0, Pids: 256, CPU: 1.5, Timeout: 10 * time.Minute,
			Disk: 1 << 30, Tmp: 256 << 20, Shm: 64 << 20, NoFile: 1024, FileSize: 1 << 30,
		},
		Environment: Environment{
			Set:  map[string]string{"FOO": "bar", "PATH": "/usr/bin:/bin", "MODE": "0755", "EMPTY": ""},
			Pass: []string{"TERM", "GITHUB_TOKEN"},
		},
		Network: Network{
			Mode: "allowlist", Allow: []string{"api.github.com", "@pypi"}, Deny: []string{"evil.example"},
			HTTP: []HTTPRule{{Hosts: []string{"api.github.com"}, Methods: []string{"GET", "HEAD"}, Paths: []string{"/repos/"}}},
			Credentials: []Credential{{Name: "github", Hosts: []string{"api.github.com"}, Secret: "env:GH_TOKEN",
				Env: "GH_PLACEHOLDER", Header: "Authorization", Format: "Bearer {secret}"}},
			MaxConnections: 64, MaxBytes: 1 << 30,
		},
		Caches: []string{"go", "tools:/opt/cachetools"},
		Source: "agent.yaml",
	}
	if !samePolicy(p, &want) {
		t.Errorf("got  %+v\nwant %+v", *p, want)
	}
	if got := p.lineOf("resources.cpu"); got != 20 {
		t.Errorf("line of resources.cpu = %d, want 20", got)
	}
}

// samePolicy compares policies, ignoring recorded line numbers.
func samePolicy(a, b *Policy) bool {
	x, y := *a, *b
	x.pos, y.pos = nil, nil
	return reflect.DeepEqual(x, y)
}

func TestParseEmpty(t *testing.T) {
	for _, src := range []string{"", "\n", "# just a comment\n", "---\n", "~\n", "{}\n", "filesystem:\nresources:\n", "filesystem: {protect: }\n"} {
		p, err := Parse("agent.yaml", []byte(src))
		if err != nil {
			t.Errorf("Parse(%q): %v", src, err)
			continue
		}
		if !samePolicy(p, &Policy{Source: "agent.yaml"}) {
			t.Errorf("Parse(%q) = %+v, want the empty policy", src, *p)
		}
	}
}

// TestParseKeys checks every key on its own.
func TestParseKeys(t *testing.T) {
	tests := []struct {
		src  string
		want func(p *Policy) any
		val  any
	}{
		{"image: /srv/rootfs", func(p *Policy) any { return p.Image }, "/srv/rootfs"},
		{"image: /srv/rootfs/", func(p *Policy) any { return p.Image }, "/srv/rootfs"},
		{"workspace: /w", func(p *Policy) any { return p.Workspace }, "/w"},
		{"filesystem: {read_only: [/a, /b/../c]}", func(p *Policy) any { return p.Filesystem.ReadOnly }, []string{"/a", "/c"}},
		{"filesystem: {writable: [/a]}", func(p *Policy) any { return p.Filesystem.Writable }, []string{"/a"}},
		{"filesystem: {deny: [/etc/machine-id, /proc/kcore]}", func(p *Policy) any { return p.Filesystem.Deny }, []string{"/etc/machine-id", "/proc/kcore"}},
		{"filesystem: {binds: [{source: /a, target: /b, mode: rw}]}", func(p *Policy) any { return p.Filesystem.Binds }, []Bind{{"/a", "/b", true}}},
		{"filesystem: {binds: [{source: /a, target: /b}]}", func(p *Policy) any { return p.Filesystem.Binds }, []Bind{{"/a", "/b", false}}},
		{"filesystem: {protect: {add: [x]}}", func(p *Policy) any { return p.Filesystem.Protect.Add }, []string{"x"}},
		{"filesystem: {protect: {remove: [.idea]}}", func(p *Policy) any { return p.Filesystem.Protect.Remove }, []string{".idea"}},
		{"resources: {memory: 512MiB}", func(p *Policy) any { return p.Resources.Memory }, int64(512 << 20)},
		{"resources: {memory: 536870912}", func(p *Policy) any { return p.Resources.Memory }, int64(512 << 20)},
		{"resources: {swap: 1G}", func(p *Policy) any { return p.Resources.Swap }, int64(1 << 30)},
		{"resources: {swap: 0}", func(p *Policy) any { return p.Resources.Swap }, int64(0)},
		{"resources: {pids: 256}", func(p *Policy) any { return p.Resources.Pids }, int64(256)},
		{"resources: {cpu: 2}", func(p *Policy) any { return p.Resources.CPU }, 2.0},
		{"resources: {cpu: 0.5}", func(p *Policy) any { return p.Resources.CPU }, 0.5},
		{"resources: {timeout: 1h30m}", func(p *Policy) any { return p.Resources.Timeout }, 90 * time.Minute},
		{"resources: {timeout: 0}", func(p *Policy) any { return p.Resources.Timeout }, time.Duration(0)},
		{"resources: {disk: 10GB}", func(p *Policy) any { return p.Resources.Disk }, int64(10e9)},
		{"resources: {tmp: 256MiB}", func(p *Policy) any { return p.Resources.Tmp }, int64(256 << 20)},
		{"resources: {shm: 64M}", func(p *Policy) any { return p.Resources.Shm }, int64(64 << 20)},
		{"resources: {nofile: 4096}", func(p *Policy) any { return p.Resources.NoFile }, uint64(4096)},
		{"resources: {fsize: 1KB}", func(p *Policy) any { return p.Resources.FileSize }, int64(1000)},
		{"environment: {set: {A: b, N: 1, T: true}}", func(p *Policy) any { return p.Environment.Set }, map[string]string{"A": "b", "N": "1", "T": "true"}},
		{"environment: {pass: [TERM]}", func(p *Policy) any { return p.Environment.Pass }, []string{"TERM"}},
		{"network: {mode: none}", func(p *Policy) any { return p.Network.Mode }, "none"},
		{"x: &m 1GiB\nresources: {memory: *m}", nil, nil}, // aliases are followed...
	}
	for _, tt := range tests {
		p, err := Parse("/etc/airlock/agent.yaml", []byte(tt.src))
		if tt.want == nil {
			// ...but the anchor's key must still be known.
			if err == nil || !strings.Contains(err.Error(), "x: unknown key") {
				t.Errorf("Parse(%q) error = %v, want unknown key", tt.src, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.src, err)
			continue
		}
		if got := tt.want(p); !reflect.DeepEqual(got, tt.val) {
			t.Errorf("Parse(%q): got %#v, want %#v", tt.src, got, tt.val)
		}
	}
}

func TestParseAlias(t *testing.T) {
	src := "filesystem:\n  read_only: &ro [/a, /b]\n  deny: *ro\n"
	p, err := Parse("agent.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p.Filesystem.Deny, []string{"/a", "/b"}) {
		t.Errorf("deny = %q", p.Filesystem.Deny)
	}
}

func TestSeccompDeny(t *testing.T) {
	if _, ok := seccomp.Lookup("read"); !ok {
		t.Skip("seccomp.Lookup is still a placeholder (Lookup(\"read\") is false)")
	}
	p, err := Parse("agent.yaml", []byte("seccomp:\n  deny: [ptrace, mkdir, chmod]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p.Seccomp.Deny, []string{"ptrace", "mkdir", "chmod"}) {
		t.Errorf("deny = %q", p.Seccomp.Deny)
	}
	_, err = Parse("agent.yaml", []byte("seccomp:\n  deny:\n    - ptrace\n    - no_such_syscall\n"))
	wantErr(t, err, `agent.yaml:4: seccomp.deny[1]: unknown syscall "no_such_syscall"`)
}

func wantErr(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil {
		t.Errorf("no error, want %q", want)
		return
	}
	if !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error\n  %s\nwant prefix\n  %s", err, want)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("error has several lines: %q", err)
	}
	var pe *Error
	if !errors.As(err, &pe) {
		t.Errorf("error %T is not a *policy.Error", err)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct{ src, want string }{
		// unknown keys, at every level
		{"imgae: /x", "agent.yaml:1: imgae: unknown key (known: image, workspace, runtime, filesystem, resources, environment, seccomp, network, caches)"},
		{"runtime: firecracker", "agent.yaml:1: runtime: unknown runtime \"firecracker\": want native or gvisor"},
		{"filesystem:\n  readonly: [/x]", "agent.yaml:2: filesystem.readonly: unknown key (known: read_only, writable, deny, binds, protect)"},
		{"filesystem:\n  binds:\n    - source: /a\n      target: /b\n      mod: rw", "agent.yaml:5: filesystem.binds[0].mod: unknown key (known: source, target, mode)"},
		{"filesystem:\n  protect:\n    delete: [.vscode]", "agent.yaml:3: filesystem.protect.delete: unknown key (known: add, remove)"},
		{"\nresources:\n  memory: 1G\n  swap: 0\n  pids: 5\n  cpu: 1\n  memroy: 1G", "agent.yaml:7: resources.memroy: unknown key (known: memory, swap, pids, cpu, timeout, disk, tmp, shm, nofile, fsize)"},
		{"environment:\n  sett: {A: b}", "agent.yaml:2: environment.sett: unknown key (known: set, pass)"},
		{"seccomp:\n  allow: [read]", "agent.yaml:2: seccomp.allow: unknown key (known: deny)"},
		{"network:\n  mode: none\n  allowed: [example.com]", "agent.yaml:3: network.allowed: unknown key (known: mode, allow, deny, http, credentials, max_connections, max_bytes)"},
		{"? |\n  multi\n  line\n: 1", `agent.yaml:1: "multi\nline\n": unknown key`},
		{"environment:\n  set:\n    \"A\\nB\": 1\n    \"A\\nB\": 2", `agent.yaml:4: environment.set."A\nB": duplicate key`},
		{"a: &x {b: 1}\n<<: *x", "agent.yaml:1: a: unknown key"},
		{"image: /x\n<<: {b: 1}", "agent.yaml:2: YAML merge keys (<<) are not supported"},

		// duplicate keys
		{"image: /a\nimage: /b", "agent.yaml:2: image: duplicate key (first defined on line 1)"},
		{"resources:\n  pids: 1\n  pids: 2", "agent.yaml:3: resources.pids: duplicate key (first defined on line 2)"},
		{"environment:\n  set:\n    A: 1\n    A: 2", "agent.yaml:4: environment.set.A: duplicate key (first defined on line 3)"},

		// wrong types
		{"- image: /x", "agent.yaml:1: expected a mapping, got a list"},
		{"just a string", `agent.yaml:1: expected a mapping, got "just a string"`},
		{"filesystem: [/x]", "agent.yaml:1: filesystem: expected a mapping, got a list"},
		{"resources:\n  - memory: 1G", "agent.yaml:2: resources: expected a mapping, got a list"},
		{"filesystem:\n  read_only: /x", `agent.yaml:2: filesystem.read_only: expected a list, got "/x" (write [/x] for a one-item list)`},
		{"filesystem:\n  read_only: {a: b}", "agent.yaml:2: filesystem.read_only: expected a list, got a mapping"},
		{"filesystem:\n  read_only:\n    - [/x]", "agent.yaml:3: filesystem.read_only[0]: expected a single value, got a list"},
		{"filesystem:\n  binds: [/a]", `agent.yaml:2: filesystem.binds[0]: expected a mapping, got "/a"`},
		{"filesystem:\n  binds:\n    -", "agent.yaml:3: filesystem.binds[0]: expected a mapping with source, target and mode, got nothing"},
		{"image: [/a]", "agent.yaml:1: image: expected a single value, got a list"},
		{"image:", `agent.yaml:1: image: missing value (use "" for an empty string)`},
		{"environment:\n  set: [A=b]", "agent.yaml:2: environment.set: expected a mapping, got a list"},
		{"environment:\n  set:\n    A: {b: c}", "agent.yaml:3: environment.set.A: expected a single value, got a mapping"},
		{"environment:\n  set:\n    A:", "agent.yaml:3: environment.set.A: missing value"},
		{"environment:\n  pass: TERM", `agent.yaml:2: environment.pass: expected a list, got "TERM" (write [TERM] for a one-item list)`},
		{"network: none", `agent.yaml:1: network: expected a mapping, got "none"`},
		{"[a]: 1", "agent.yaml:1: keys must be strings, got a list"},
		{"resources:\n  ~: 1", "agent.yaml:2: resources: keys must be strings, got nothing"},

		// sizes
		{"resources:\n  memory: 12XB", `agent.yaml:2: resources.memory: invalid size "12XB": unknown unit "XB" (use B, K, KB, KiB, M, MB, MiB, G, GB, GiB, T, TB, TiB, P, PB, PiB)`},
		{"resources:\n  swap: -1", `agent.yaml:2: resources.swap: invalid size "-1": must not be negative`},
		{"resources:\n  disk: 2PiB", `agent.yaml:2: resources.disk: invalid size "2PiB": larger than the 1PiB limit`},
		{"resources:\n  tmp: 1e9", `agent.yaml:2: resources.tmp: invalid size "1e9": unknown unit "e9"`},
		{"resources:\n  shm: lots", `agent.yaml:2: resources.shm: invalid size "lots": want a number of bytes`},
		{"resources:\n  fsize: ''", `agent.yaml:2: resources.fsize: invalid size "": empty`},
		{"resources:\n  memory: 512", "agent.yaml:2: resources.memory: 512 bytes is below the minimum of 1MiB (sizes without a unit are bytes: did you mean 512MiB?)"},
		{"resources:\n  tmp: 1000", "agent.yaml:2: resources.tmp: 1000 bytes is below the minimum of 1MiB"},

		// numbers and durations
		{"resources:\n  pids: -1", `agent.yaml:2: resources.pids: invalid number of processes "-1"`},
		{"resources:\n  pids: 1.5", `agent.yaml:2: resources.pids: invalid number of processes "1.5"`},
		{"resources:\n  pids: 99999999", "agent.yaml:2: resources.pids: 99999999 is larger than the limit of 4193280 (the kernel's, less what the runtime adds for its own tasks)"},
		{"resources:\n  pids: 4194273", "agent.yaml:2: resources.pids: 4194273 is larger than the limit of 4193280 (the kernel's, less what the runtime adds for its own tasks)"},
		{"resources:\n  memory: 1MiB", "agent.yaml:2: resources.memory: 1048576 bytes is below the minimum of 4MiB (the sandbox's init needs some of it)"},
		{"resources:\n  nofile: -5", `agent.yaml:2: resources.nofile: invalid number of open files "-5"`},
		{"resources:\n  nofile: 99999999999", "agent.yaml:2: resources.nofile: 99999999999 is larger than 1073741824"},
		{"resources:\n  nofile: 4", "agent.yaml:2: resources.nofile: 4 is below the minimum of 64 (the sandbox's init needs descriptors of its own; a command can lower its own limit with ulimit -n)"},
		{"resources:\n  cpu: 0", `agent.yaml:2: resources.cpu: invalid number of cores "0" (must be > 0; leave cpu out for no limit)`},
		{"resources:\n  cpu: -1", `agent.yaml:2: resources.cpu: invalid number of cores "-1" (must be > 0`},
		{"resources:\n  cpu: .nan", `agent.yaml:2: resources.cpu: invalid number of cores ".nan"`},
		{"resources:\n  cpu: NaN", `agent.yaml:2: resources.cpu: invalid number of cores "NaN"`},
		{"resources:\n  cpu: two", `agent.yaml:2: resources.cpu: invalid number of cores "two"`},
		{"resources:\n  cpu: 0.001", "agent.yaml:2: resources.cpu: 0.001 cores is below the minimum of 0.01"},
		{"resources:\n  cpu: 1e9", "agent.yaml:2: resources.cpu: 1e+09 cores is more than 65536"},
		{"resources:\n  timeout: 10 minutes", `agent.yaml:2: resources.timeout: invalid duration "10 minutes" (want a Go duration such as 90s, 10m or 1h30m)`},
		{"resources:\n  timeout: 600", `agent.yaml:2: resources.timeout: invalid duration "600": missing unit (for example 600s or 10m)`},
		{"resources:\n  timeout: -1s", `agent.yaml:2: resources.timeout: invalid duration "-1s": must not be negative`},

		// network
		{"network:\n  mode: allowlist\n  allow: ['*.com']", `agent.yaml:3: network.allow[0]: egress rule "*.com"`},
		{"network:\n  mode: open\n  deny: ['a.com:0']", `agent.yaml:3: network.deny[0]: egress rule "a.com:0"`},
		{"network:\n  allow: ['@nope']", `agent.yaml:2: network.allow[0]: egress rule "@nope": unknown preset`},
		{"network:\n  mode: host", `agent.yaml:2: network.mode: unknown mode "host" (known: none, allowlist, open)`},

		// bind mode and paths
		{"filesystem:\n  binds:\n    - {source: /a, target: /b, mode: wr}", `agent.yaml:3: filesystem.binds[0].mode: invalid mode "wr" (want ro or rw)`},
		{"filesystem:\n  binds:\n    - {source: /a}", "agent.yaml:3: filesystem.binds[0]: missing target"},
		{"filesystem:\n  binds:\n    - {target: /b}", "agent.yaml:3: filesystem.binds[0]: missing source"},
		{"filesystem:\n  binds:\n    - {source: /a, target: b}", `agent.yaml:3: filesystem.binds[0].target: relative path "b": paths inside the sandbox must be absolute`},
		{"filesystem:\n  binds:\n    - source: /a\n      target: /proc/x", `agent.yaml:4: filesystem.binds[0].target: cannot mount "/proc/x": /proc is managed by the sandbox`},
		{"filesystem:\n  binds:\n    - {source: /a, target: /sys}", `agent.yaml:3: filesystem.binds[0].target: cannot mount "/sys": /sys is managed by the sandbox`},
		{"filesystem:\n  binds:\n    - {source: /a, target: /dev/shm}", `agent.yaml:3: filesystem.binds[0].target: cannot mount "/dev/shm": /dev is managed by the sandbox`},
		{"filesystem:\n  binds:\n    - {source: /a, target: /x/../}", "agent.yaml:3: filesystem.binds[0].target: cannot mount over /"},
		{"filesystem:\n  binds:\n    - {source: /a, target: /workspace}", "agent.yaml:3: filesystem.binds[0].target: cannot mount over /workspace"},
		{"filesystem:\n  writable: [/]", "agent.yaml:2: filesystem.writable[0]: cannot mount over /"},
		{"filesystem:\n  read_only: [/proc/self]", `agent.yaml:2: filesystem.read_only[0]: cannot mount "/proc/self"`},
		{"filesystem:\n  read_only: [/opt]\n  writable: [/opt/]", `agent.yaml:3: filesystem.writable[0]: "/opt" is already mounted by filesystem.read_only[0]`},
		{"filesystem:\n  read_only: [relative]", `agent.yaml:2: filesystem.read_only[0]: relative path "relative": relative paths need the policy file's location`},
		{"workspace: .", `agent.yaml:1: workspace: relative path "."`},
		{"workspace: /", "agent.yaml:1: workspace: refusing to use / as the workspace"},
		{"image: ~/rootfs", `agent.yaml:1: image: "~/rootfs": ~ is not expanded`},
		{"image: ''", "agent.yaml:1: image: empty path"},
		{"filesystem:\n  deny: [etc/passwd]", `agent.yaml:2: filesystem.deny[0]: relative path "etc/passwd"`},
		{"filesystem:\n  deny: [/]", "agent.yaml:2: filesystem.deny[0]: cannot deny /"},
		{"filesystem:\n  deny: [\"/a\\0b\"]", `agent.yaml:2: filesystem.deny[0]: path "/a\x00b" contains a NUL byte`},

		// protect
		{"filesystem:\n  protect:\n    remove: [Makefile]", `agent.yaml:3: filesystem.protect.remove[0]: "Makefile" is not a default protected path`},
		{"filesystem:\n  protect:\n    add: [../x]", `agent.yaml:3: filesystem.protect.add[0]: "../x": ".." is not allowed in protected paths`},
		{"filesystem:\n  protect:\n    add: [a/../../x]", `agent.yaml:3: filesystem.protect.add[0]: "a/../../x": ".." is not allowed`},
		{"filesystem:\n  protect:\n    add: [/etc]", `agent.yaml:3: filesystem.protect.add[0]: "/etc": protected paths are relative to the workspace`},
		{"filesystem:\n  protect:\n    add: [./]", `agent.yaml:3: filesystem.protect.add[0]: "./" names the whole workspace`},
		{"filesystem:\n  protect:\n    add: ['']", "agent.yaml:3: filesystem.protect.add[0]: empty path"},
		{"filesystem:\n  protect:\n    add: [.vscode]\n    remove: [.vscode/]", `agent.yaml:4: filesystem.protect.remove[0]: ".vscode/" is also added by filesystem.protect.add[0]`},

		// environment
		{"environment:\n  set:\n    A=B: c", `agent.yaml:3: environment.set."A=B": invalid variable name "A=B": contains '='`},
		{"environment:\n  set:\n    '': c", `agent.yaml:3: environment.set."": invalid variable name "": empty`},
		{"environment:\n  set:\n    A: \"x\\0y\"", "agent.yaml:3: environment.set.A: value contains a NUL byte"},
		{"environment:\n  pass: [TERM, 'A=B']", `agent.yaml:2: environment.pass[1]: invalid variable name "A=B"`},
		{"environment:\n  set: {TERM: x}\n  pass:\n    - TERM", `agent.yaml:4: environment.pass[0]: "TERM" is also in environment.set`},

		// network: request rules and credentials
		{"network:\n  http:\n    - hosts: [10.0.0.1]", `agent.yaml:3: network.http[0].hosts[0]: "10.0.0.1" is an address: request rules and credentials apply to names only`},
		{"network:\n  http:\n    - methods: [GET]", "agent.yaml:3: network.http[0].hosts: no hosts"},
		{"network:\n  http:\n    - hosts: [a.example]\n      paths: [repos]", `agent.yaml:4: network.http[0].paths[0]: invalid path prefix "repos"`},
		{"network:\n  http:\n    - hosts: [a.example]\n      paths: [/a/../b]", `agent.yaml:4: network.http[0].paths[0]: invalid path prefix "/a/../b"`},
		{"network:\n  http:\n    - hosts: [a.example]\n      methods: ['GET /']", `agent.yaml:4: network.http[0].methods[0]: invalid method "GET /"`},
		{"network:\n  http:\n    - hosts: [a.example]\n      verbs: [GET]", "agent.yaml:4: network.http[0].verbs: unknown key"},
		{"network:\n  credentials:\n    - hosts: [a.example]\n      env: T", "agent.yaml:3: network.credentials[0].secret: missing"},
		{"network:\n  credentials:\n    - hosts: [a.example]\n      secret: vault:x\n      env: T", `agent.yaml:4: network.credentials[0].secret: unknown source "vault"`},
		{"network:\n  credentials:\n    - hosts: [a.example]\n      secret: file:rel/x\n      env: T", `agent.yaml:4: network.credentials[0].secret: file "rel/x": want an absolute path`},
		{"network:\n  credentials:\n    - hosts: [a.example]\n      secret: env:T", "agent.yaml:3: network.credentials[0]: neither env nor header"},
		{"network:\n  credentials:\n    - hosts: ['*.com']\n      secret: env:T\n      env: T", `agent.yaml:3: network.credentials[0].hosts[0]: egress rule "*.com"`},
		{"environment:\n  set: {T: x}\nnetwork:\n  credentials:\n    - hosts: [a.example]\n      secret: env:T\n      env: T", "agent.yaml:7: network.credentials[0].env: T is also set by environment"},
		{"network:\n  credentials:\n    - {hosts: [a.example], secret: env:T, env: T}\n    - {hosts: [b.example], secret: env:U, env: T}", "agent.yaml:4: network.credentials[1].env: T holds the placeholder of an earlier credential"},
		{"network:\n  credentials:\n    - {hosts: [a.example], secret: env:T, header: 'X Y'}", `agent.yaml:3: network.credentials[0].header: invalid header name "X Y"`},
		{"network:\n  credentials:\n    - {hosts: [a.example], secret: env:T, header: X-Key, format: 'Bearer'}", `agent.yaml:3: network.credentials[0].format: format "Bearer": want a header value containing {secret}`},

		{"environment:\n  pass: [GH]\nnetwork:\n  credentials:\n    - {hosts: [a.example], secret: env:GH, env: T}", "agent.yaml:5: network.credentials[0].secret: environment.pass would copy $GH, the secret itself, into the sandbox"},
		{"network:\n  max_connections: -1", `agent.yaml:2: network.max_connections: invalid number of connections "-1"`},
		{"network:\n  max_bytes: lots", `agent.yaml:2: network.max_bytes: `},

		// YAML syntax, documents
		{"image: /a\n---\nimage: /b", `agent.yaml:2: multiple YAML documents in one policy file`},
		{"image: /a\n  b: c", "agent.yaml:2: invalid YAML: mapping values are not allowed in this context"},
		{"image: [", "agent.yaml:1: invalid YAML: did not find expected node content"},
		{"a:\n\tb: c", "agent.yaml:2: invalid YAML: found character that cannot start any token"},
	}
	for _, tt := range tests {
		p, err := Parse("agent.yaml", []byte(tt.src))
		if err == nil {
			t.Errorf("Parse(%q) = %+v, want error %q", tt.src, *p, tt.want)
			continue
		}
		if !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("Parse(%q) error\n  %s\nwant prefix\n  %s", tt.src, err, tt.want)
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("Parse(%q) error has several lines: %q", tt.src, err)
		}
	}
}

func TestLoadResolvesRelativePaths(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.yaml")
	src := "image: rootfs\nworkspace: .\nfilesystem:\n  read_only: [../ref]\n  writable: [/abs]\n  binds:\n    - {source: data, target: /data}\n"
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if p.Source != path || p.Image != filepath.Join(dir, "rootfs") || p.Workspace != dir ||
		p.Filesystem.ReadOnly[0] != filepath.Join(filepath.Dir(dir), "ref") ||
		p.Filesystem.Writable[0] != "/abs" || p.Filesystem.Binds[0].Source != filepath.Join(dir, "data") {
		t.Errorf("paths not resolved against %s: %+v", dir, *p)
	}

	// A relative file name: paths still resolve against its (absolute) directory,
	// and errors use the name as given.
	t.Chdir(dir)
	p, err = Load("agent.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if p.Workspace != dir || p.Source != "agent.yaml" {
		t.Errorf("Load(relative): workspace %q source %q", p.Workspace, p.Source)
	}
	if err := os.WriteFile("bad.yaml", []byte("\n\nresources:\n  memroy: 1G\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Load("bad.yaml")
	wantErr(t, err, "bad.yaml:4: resources.memroy: unknown key")
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := Load(filepath.Join(dir, "missing.yaml"))
	wantErr(t, err, filepath.Join(dir, "missing.yaml")+": cannot read policy: no such file or directory")
	_, err = Load(dir)
	wantErr(t, err, dir+": cannot read policy: ")
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, make([]byte, MaxFileSize+1), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Load(big)
	wantErr(t, err, big+": policy file is larger than")
}

func TestParseAbsoluteName(t *testing.T) {
	p, err := Parse("/etc/airlock/agent.yaml", []byte("workspace: proj\nfilesystem: {read_only: [tools]}"))
	if err != nil {
		t.Fatal(err)
	}
	if p.Workspace != "/etc/airlock/proj" || p.Filesystem.ReadOnly[0] != "/etc/airlock/tools" {
		t.Errorf("got %+v", *p)
	}
}

func TestParseRuntime(t *testing.T) {
	for _, rt := range []string{"native", "gvisor"} {
		p, err := Parse("agent.yaml", []byte("runtime: "+rt+"\n"))
		if err != nil {
			t.Fatalf("runtime %s: %v", rt, err)
		}
		if p.Runtime != rt {
			t.Fatalf("runtime %s: parsed %q", rt, p.Runtime)
		}
	}
}
