package record

import (
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/policy"
)

func TestSuggest(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	yes, no := true, false
	u := func(v uint64) *uint64 { return &v }
	evs := []Event{
		{Type: TypeStart, Time: t0, Sandbox: "0123456789abcdef"},
		{Type: TypeExec, Path: "/usr/bin/curl", Result: ResultOK},
		{Type: TypeExec, Path: "/usr/local/bin/curl", Result: ResultFailed},
		{Type: TypeExec, Path: "/proc/self/fd/3", PathTarget: "/memfd:x\n(deleted)", Result: ResultOK},
		{Type: TypeNet, Host: "API.example.com", Port: 443, Addr: "93.184.216.34:443", Allowed: &yes},
		{Type: TypeNet, Host: "api.example.com", Port: 443, Addr: "93.184.216.34:443", Allowed: &yes},
		{Type: TypeNet, Host: "local.test", Port: 8080, Addr: "127.0.0.1:8080", Allowed: &yes},
		{Type: TypeNet, Host: "evil.test", Port: 80, Allowed: &no, Rule: "not in allowlist"},
		{Type: TypeNet, Host: "gone.test", Port: 443, Allowed: &no, Error: "resolve: no such host"},
		{Type: TypeUsage, Time: t0.Add(time.Second), CPUNs: u(0), MemoryBytes: u(10 << 20), MemoryPeak: u(100 << 20), Pids: u(20)},
		{Type: TypeUsage, Time: t0.Add(2 * time.Second), CPUNs: u(1500e6), MemoryBytes: u(50 << 20), Pids: u(40)},
		{Type: TypeEnd, Time: t0.Add(3 * time.Second)},
	}
	s := Suggest(evs, "rec.jsonl")
	p, err := policy.Parse("s", []byte(s))
	if err != nil {
		t.Fatalf("the suggestion does not parse: %v\n%s", err, s)
	}
	if p.Network.Mode != policy.NetworkAllowlist || strings.Join(p.Network.Allow, ",") != "api.example.com:443,local.test:8080,127.0.0.1:8080" {
		t.Errorf("network: %+v\n%s", p.Network, s)
	}
	if p.Resources.Memory != 160<<20 || p.Resources.Pids != 80 || p.Resources.CPU != 2.5 {
		t.Errorf("resources: %+v\n%s", p.Resources, s)
	}
	for _, want := range []string{"#   evil.test:80 (1x: not in allowlist)", "#   gone.test:443 (1x: resolve: no such host)", "/usr/bin/curl (1x)", "/memfd:x?(deleted)", "2 execs"} {
		if !strings.Contains(s, want) {
			t.Errorf("missing %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "/usr/local/bin/curl") {
		t.Errorf("a failed exec listed:\n%s", s)
	}
	// Nothing reached: no network.
	p, err = policy.Parse("s", []byte(Suggest(evs[:1], "x")))
	if err != nil || (p.Network.Mode != "" && p.Network.Mode != policy.NetworkNone) {
		t.Errorf("empty record: %v %+v", err, p.Network)
	}
}
