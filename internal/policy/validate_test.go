package policy

import (
	"math"
	"strings"
	"testing"
	"time"
)

// TestValidateUnparsed checks Validate on policies built in code (as the CLI
// does from flags): no file, no line, just the key.
func TestValidateUnparsed(t *testing.T) {
	if err := (&Policy{}).Validate(); err != nil {
		t.Errorf("zero policy: %v", err)
	}
	tests := []struct {
		p    Policy
		want string
	}{
		{Policy{Workspace: "."}, `workspace: relative path ".": must be absolute`},
		{Policy{Image: "rootfs"}, `image: relative path "rootfs": must be absolute`},
		{Policy{Resources: Resources{Memory: -1}}, "resources.memory: size -1 must not be negative"},
		{Policy{Resources: Resources{Swap: MaxSize + 1}}, "resources.swap: size 1125899906842625 is larger than the 1PiB limit"},
		{Policy{Resources: Resources{Pids: -3}}, "resources.pids: -3 must not be negative"},
		{Policy{Resources: Resources{CPU: -1}}, "resources.cpu: invalid number of cores -1"},
		{Policy{Resources: Resources{CPU: math.NaN()}}, "resources.cpu: invalid number of cores NaN"},
		{Policy{Resources: Resources{CPU: math.Inf(1)}}, "resources.cpu: invalid number of cores +Inf"},
		{Policy{Resources: Resources{Timeout: -time.Second}}, "resources.timeout: -1s must not be negative"},
		{Policy{Network: Network{Mode: "open", Deny: []string{"*"}}}, `network.deny[0]: egress rule "*"`},
		{Policy{Environment: Environment{Set: map[string]string{"B=": "", "A=": ""}}}, `environment.set."A=": invalid variable name "A="`},
		{Policy{Environment: Environment{Pass: []string{"X\x00"}}}, `environment.pass[0]: invalid variable name "X\x00": contains a NUL byte`},
		{Policy{Filesystem: Filesystem{Binds: []Bind{{Source: "/a", Target: "/dev"}}}}, `filesystem.binds[0].target: cannot mount "/dev"`},
		{Policy{Filesystem: Filesystem{Binds: []Bind{{Source: "a", Target: "/b"}}}}, `filesystem.binds[0].source: relative path "a"`},
		{Policy{Filesystem: Filesystem{Binds: []Bind{{Source: "/a", Target: "/b"}, {Source: "/c", Target: "/b/"}}}}, `filesystem.binds[1].target: "/b" is already mounted by filesystem.binds[0].target`},
		{Policy{Filesystem: Filesystem{Deny: []string{""}}}, "filesystem.deny[0]: empty path"},
		{Policy{Filesystem: Filesystem{Deny: []string{"/workspace/" + strings.Repeat("n", 256)}}}, `filesystem.deny[0]: path "/workspace/nnn`},
		{Policy{Filesystem: Filesystem{ReadOnly: []string{"/x/" + strings.Repeat("n/", 2100)}}}, `filesystem.read_only[0]: path "/x/n/n`},
	}
	// Controls: a name of 255 bytes, a path of 4095.
	for _, ok := range []Policy{
		{Filesystem: Filesystem{Deny: []string{"/workspace/" + strings.Repeat("n", 255)}}},
		{Filesystem: Filesystem{Deny: []string{"/x" + strings.Repeat("/n", 2046) + "n"}}},
	} {
		if err := ok.Validate(); err != nil {
			t.Errorf("Validate: %v", err)
		}
	}
	for _, tt := range tests {
		err := tt.p.Validate()
		if err == nil || err.Error() != tt.want && !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("Validate(%+v) = %v, want %q", tt.p, err, tt.want)
		}
	}
}

// TestValidateAfterOverride checks that a parsed policy changed in code
// still reports the file and line of the key.
func TestValidateAfterOverride(t *testing.T) {
	p, err := Parse("agent.yaml", []byte("# c\nresources:\n  memory: 1G\n"))
	if err != nil {
		t.Fatal(err)
	}
	p.Resources.Memory = -1
	wantErr(t, p.Validate(), "agent.yaml:3: resources.memory: size -1 must not be negative")
	p.Resources.Memory = 0
	p.Resources.Pids = -1 // not in the file: line of the enclosing section
	wantErr(t, p.Validate(), "agent.yaml:2: resources.pids: -1 must not be negative")
	p.Resources.Pids = 0
	p.Network.Mode = "open" // section not in the file: no line
	p.Network.Allow = []string{"*.co.uk"}
	wantErr(t, p.Validate(), `agent.yaml: network.allow[0]: egress rule "*.co.uk"`)
}

func TestEffective(t *testing.T) {
	r := Resources{Memory: 5 << 20, CPU: 2}.Effective()
	want := Resources{Memory: 5 << 20, CPU: 2, Pids: DefaultPids, Disk: DefaultDisk, Tmp: DefaultTmp, Shm: DefaultShm, NoFile: DefaultNoFile}
	if r != want {
		t.Errorf("Effective() = %+v, want %+v", r, want)
	}
}

func TestErrorFormat(t *testing.T) {
	tests := []struct {
		e    Error
		want string
	}{
		{Error{File: "a.yaml", Line: 3, Key: "k", Msg: "m"}, "a.yaml:3: k: m"},
		{Error{File: "a.yaml", Key: "k", Msg: "m"}, "a.yaml: k: m"},
		{Error{File: "a.yaml", Line: 3, Msg: "m"}, "a.yaml:3: m"},
		{Error{Line: 3, Key: "k", Msg: "m"}, "line 3: k: m"},
		{Error{Key: "k", Msg: "m"}, "k: m"},
	}
	for _, tt := range tests {
		if got := tt.e.Error(); got != tt.want {
			t.Errorf("%+v.Error() = %q, want %q", tt.e, got, tt.want)
		}
	}
}

// TestCaches checks the caches section: each refusal names the file, the
// line and the key, next to a policy that is accepted.
func TestCaches(t *testing.T) {
	ok, err := Parse("c.yaml", []byte("caches: [go, npm, pip, cargo, \"hf:/opt/hf\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ok.Caches) != 5 || ok.Caches[4] != "hf:/opt/hf" {
		t.Errorf("caches = %q", ok.Caches)
	}
	for _, c := range []struct{ doc, want string }{
		{"caches: go\n", "c.yaml:1: caches: expected a list"},
		{"caches:\n  - go\n  - golang\n", `c.yaml:3: caches[1]: unknown cache "golang" (known: cargo, go, npm, pip`},
		{"caches:\n  - go\n  - go\n", `c.yaml:3: caches[1]: cache "go" is given twice`},
		{"caches: [\"x:/workspace/x\"]\n", `c.yaml:1: caches[0]: cache path "/workspace/x": /workspace is the sandbox's own`},
		{"caches: [\"x:relative\"]\n", `c.yaml:1: caches[0]: cache path "relative": must be absolute`},
		{"caches: [\"x:/opt/a\", \"y:/opt/a/b\"]\n", `c.yaml:1: caches[1]: caches "x" (/opt/a) and "y" (/opt/a/b) are nested`},
		{"caches: [\"X:/opt/a\"]\n", `c.yaml:1: caches[0]: cache name "X"`},
		{"caches: [{name: go}]\n", "c.yaml:1: caches[0]: expected a single value"},
		{"filesystem:\n  binds: [{source: /s, target: /opt/a}]\ncaches: [\"x:/opt/a/b\"]\n", `c.yaml:3: caches[0]: cache "x" at /opt/a/b overlaps /opt/a of the filesystem section`},
		{"filesystem:\n  writable: [/cache/go/mod]\ncaches: [go]\n", `c.yaml:3: caches[0]: cache "go" at /cache/go overlaps /cache/go/mod`},
		{"filesystem:\n  deny: [/cache]\ncaches: [go]\n", `c.yaml:3: caches[0]: cache "go" at /cache/go overlaps /cache`},
	} {
		_, err := Parse("c.yaml", []byte(c.doc))
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%q: %v\nwant %q", c.doc, err, c.want)
		}
	}
	// Controls: a bind next to (not over) a cache; caches from code.
	if _, err := Parse("c.yaml", []byte("filesystem:\n  binds: [{source: /s, target: /opt/ab}]\ncaches: [\"x:/opt/a\"]\n")); err != nil {
		t.Error(err)
	}
	if err := (&Policy{Caches: []string{"go", "x:/srv/x"}}).Validate(); err != nil {
		t.Error(err)
	}
	wantErr(t, (&Policy{Caches: []string{"go", ""}}).Validate(), "caches[1]: empty cache name")
}
