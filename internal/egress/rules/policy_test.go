package rules

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/internal/errdefs"
)

func mustCompile(t *testing.T, mode string, allow, deny []string) *Policy {
	t.Helper()
	p, err := Compile(mode, allow, deny)
	if err != nil {
		t.Fatalf("Compile(%q, %q, %q): %v", mode, allow, deny, err)
	}
	return p
}

func TestCompile(t *testing.T) {
	p := mustCompile(t, "", []string{"github.com"}, []string{"evil.com"})
	if p.Mode != ModeNone || len(p.Allow) != 1 || len(p.Deny) != 1 {
		t.Errorf(`Compile("", ...) = %+v; want mode none with the rules kept`, p)
	}
	p = mustCompile(t, "allowlist", []string{"@pypi", "@GitHub", "example.com"}, nil)
	var got []string
	for _, r := range p.Allow {
		got = append(got, r.String())
	}
	want := slices.Concat(Presets["pypi"], Presets["github"], []string{"example.com"})
	if !slices.Equal(got, want) {
		t.Errorf("presets expanded to %q, want %q", got, want)
	}
	for _, mode := range []Mode{ModeNone, ModeAllowlist, ModeOpen} {
		if p := mustCompile(t, string(mode), nil, nil); p.Mode != mode {
			t.Errorf("Compile(%q).Mode = %q", mode, p.Mode)
		}
	}
}

// TestCompileErrors puts each failing call next to a similar one that
// compiles.
func TestCompileErrors(t *testing.T) {
	type args struct {
		mode        string
		allow, deny []string
	}
	tests := []struct {
		bad  args
		want string
		good args
	}{
		{args{"closed", nil, nil}, `unknown egress mode "closed" (known: none, allowlist, open)`, args{"none", nil, nil}},
		{args{"Open", nil, nil}, `unknown egress mode "Open"`, args{"open", nil, nil}},
		{args{"allowlist", []string{"github.com", "*.com"}, nil}, `egress rule "*.com": `, args{"allowlist", []string{"github.com", "*.example.com"}, nil}},
		{args{"open", nil, []string{"10.0.0.1/8"}}, `egress rule "10.0.0.1/8": host bits are set`, args{"open", nil, []string{"10.0.0.0/8"}}},
		{args{"none", []string{"a..b"}, nil}, `egress rule "a..b": empty label`, args{"none", []string{"a.b"}, nil}},
		{args{"allowlist", []string{"@nope"}, nil}, `egress rule "@nope": unknown preset (known: @github, @go, @npm, @pypi)`, args{"allowlist", []string{"@npm"}, nil}},
		{args{"allowlist", []string{"@"}, nil}, `egress rule "@": unknown preset`, args{"allowlist", []string{"@go"}, nil}},
		{args{"open", nil, []string{"@pypi"}}, `egress rule "@pypi": presets can only be allowed, not denied`, args{"open", nil, []string{"pypi.org"}}},
	}
	for _, tt := range tests {
		_, err := Compile(tt.bad.mode, tt.bad.allow, tt.bad.deny)
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) || !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("Compile(%q, %q, %q) = %v; want an ErrInvalid starting with %q", tt.bad.mode, tt.bad.allow, tt.bad.deny, err, tt.want)
		}
		if _, err := Compile(tt.good.mode, tt.good.allow, tt.good.deny); err != nil {
			t.Errorf("control Compile(%q, %q, %q): %v", tt.good.mode, tt.good.allow, tt.good.deny, err)
		}
	}
}

func TestPresets(t *testing.T) {
	names := PresetNames()
	if !slices.IsSorted(names) || len(names) != len(Presets) {
		t.Errorf("PresetNames() = %q, not the sorted preset names", names)
	}
	for _, name := range []string{"pypi", "npm", "go", "github"} {
		if len(Presets[name]) == 0 {
			t.Errorf("preset %q is missing", name)
		}
	}
	for name, rules := range Presets {
		for _, r := range rules {
			p, err := ParsePattern(r)
			if err != nil {
				t.Errorf("preset %q: %v", name, err)
			} else if p.String() != r {
				t.Errorf("preset %q: rule %q is not canonical (%q)", name, r, p)
			}
			if p.port != 443 || p.kind != kindName {
				t.Errorf("preset %q: rule %q is not an exact name on port 443", name, r)
			}
		}
	}
}

// TestHost is the policy matrix for name-level decisions: every denial
// has an allowed control next to it.
func TestHost(t *testing.T) {
	none := mustCompile(t, "none", []string{"github.com"}, nil)
	allow := mustCompile(t, "allowlist", []string{"github.com:443", "*.pythonhosted.org", "8.8.8.8:53", "10.0.0.0/8:5432"}, nil)
	both := mustCompile(t, "allowlist", []string{"*.example.com"}, []string{"secret.example.com", "*.example.com:22"})
	presets := mustCompile(t, "allowlist", []string{"@pypi", "@go"}, nil)
	open := mustCompile(t, "open", nil, []string{"*.evil.com", "10.0.0.0/8", "8.8.4.4"})
	openAllow := mustCompile(t, "open", []string{"*.example.com", "192.168.1.10"}, []string{"bad.example.com"})
	tests := []struct {
		name  string
		p     *Policy
		host  string
		port  int
		allow bool
		rule  string
	}{
		{"none denies", none, "github.com", 443, false, "mode none"},
		{"none denies addresses", none, "8.8.8.8", 53, false, "mode none"},
		{"allowlist allows", allow, "github.com", 443, true, "github.com:443"},
		{"allowlist case and dot", allow, "GitHub.COM.", 443, true, "github.com:443"},
		{"allowlist port", allow, "github.com", 22, false, "not in allowlist"},
		{"allowlist other", allow, "gitlab.com", 443, false, "not in allowlist"},
		{"allowlist subdomain", allow, "api.github.com", 443, false, "not in allowlist"},
		{"allowlist wildcard", allow, "files.pythonhosted.org", 443, true, "*.pythonhosted.org"},
		{"allowlist wildcard apex", allow, "pythonhosted.org", 443, false, "not in allowlist"},
		{"allowlist IP rule", allow, "8.8.8.8", 53, true, "8.8.8.8:53"},
		{"allowlist IP rule decimal", allow, "134744072", 53, true, "8.8.8.8:53"},
		{"allowlist IP rule port", allow, "8.8.8.8", 443, false, "not in allowlist"},
		{"allowlist public IP", allow, "1.1.1.1", 53, false, "not in allowlist"},
		{"allowlist private CIDR", allow, "10.1.2.3", 5432, true, "10.0.0.0/8:5432"},
		{"allowlist private CIDR port", allow, "10.1.2.3", 22, false, "private address 10.1.2.3 (private)"},
		{"allowlist private", allow, "192.168.1.1", 5432, false, "private address 192.168.1.1 (private)"},
		{"allowlist name rule is not an IP rule", allow, "github.com.", 443, true, "github.com:443"},
		{"both allows", both, "a.example.com", 443, true, "*.example.com"},
		{"both deny wins", both, "secret.example.com", 443, false, "secret.example.com"},
		{"both deny exact only", both, "x.secret.example.com", 443, true, "*.example.com"},
		{"both deny port", both, "a.example.com", 22, false, "*.example.com:22"},
		{"both apex", both, "example.com", 443, false, "not in allowlist"},
		{"presets allow", presets, "pypi.org", 443, true, "pypi.org:443"},
		{"presets allow go", presets, "proxy.golang.org", 443, true, "proxy.golang.org:443"},
		{"presets port", presets, "pypi.org", 80, false, "not in allowlist"},
		{"presets others", presets, "registry.npmjs.org", 443, false, "not in allowlist"},
		{"open allows", open, "anything.org", 443, true, "mode open"},
		{"open deny", open, "x.evil.com", 443, false, "*.evil.com"},
		{"open deny apex not covered", open, "evil.com", 443, true, "mode open"},
		{"open public IP", open, "8.8.8.8", 53, true, "mode open"},
		{"open denied IP", open, "8.8.4.4", 53, false, "8.8.4.4"},
		{"open denied IP mapped", open, "::ffff:8.8.4.4", 53, false, "8.8.4.4"},
		{"open denied IP NAT64", open, "64:ff9b::808:404", 53, false, "8.8.4.4"},
		{"open denied CIDR", open, "10.0.0.1", 80, false, "10.0.0.0/8"},
		{"open loopback", open, "127.1", 80, false, "private address 127.0.0.1 (loopback)"},
		{"open loopback v6", open, "[::1]", 80, false, "private address ::1 (loopback)"},
		{"open metadata", open, "0xa9fea9fe", 80, false, "private address 169.254.169.254 (metadata)"},
		{"open metadata NAT64", open, "64:ff9b::a9fe:a9fe", 80, false, "private address 64:ff9b::a9fe:a9fe (metadata)"},
		{"open metadata v6", open, "fd00:ec2::254", 80, false, "private address fd00:ec2::254 (metadata)"},
		{"open private", open, "192.168.1.1", 80, false, "private address 192.168.1.1 (private)"},
		{"open allow rule named", openAllow, "a.example.com", 443, true, "*.example.com"},
		{"open deny beats allow", openAllow, "bad.example.com", 443, false, "bad.example.com"},
		{"open explicit private", openAllow, "192.168.1.10", 80, true, "192.168.1.10"},
		{"open explicit private neighbour", openAllow, "192.168.1.11", 80, false, "private address 192.168.1.11 (private)"},
		{"invalid zone", open, "fe80::1%eth0", 80, false, `invalid host "fe80::1%eth0": IPv6 zone identifiers are not allowed`},
		{"invalid host", open, "a..b", 80, false, `invalid host "a..b": empty label (two dots in a row, or a leading dot)`},
		{"invalid empty", open, "", 80, false, "empty host"},
		{"port 0", open, "example.com", 0, false, "invalid port 0"},
		{"port 65536", open, "example.com", 65536, false, "invalid port 65536"},
		{"port 65535", open, "example.com", 65535, true, "mode open"},
		{"nil policy", nil, "example.com", 443, false, "no policy"},
		{"unknown mode", &Policy{Mode: "closed"}, "example.com", 443, false, `unknown mode "closed"`},
	}
	for _, tt := range tests {
		if got := tt.p.Host(tt.host, tt.port); got != (Decision{tt.allow, tt.rule}) {
			t.Errorf("%s: Host(%q, %d) = %+v; want %v, %q", tt.name, tt.host, tt.port, got, tt.allow, tt.rule)
		}
	}
}

// TestAddr checks decisions on resolved addresses: an allowed name that
// resolves to a private address is refused unless an IP rule allows the
// address.
func TestAddr(t *testing.T) {
	allow := mustCompile(t, "allowlist", []string{"api.example.com", "db.internal:5432", "10.0.0.5:5432", "[fd00::]/8"}, nil)
	cidr := mustCompile(t, "allowlist", []string{"db.internal", "10.0.0.0/8"}, []string{"10.0.0.1"})
	open := mustCompile(t, "open", nil, []string{"8.8.8.8", "*.evil.com"})
	ip := netip.MustParseAddr
	tests := []struct {
		name  string
		p     *Policy
		host  string
		ip    netip.Addr
		port  int
		allow bool
		rule  string
	}{
		{"public", allow, "api.example.com", ip("93.184.216.34"), 443, true, "api.example.com"},
		{"rebinding private", allow, "api.example.com", ip("10.0.0.5"), 443, false, "private address 10.0.0.5 (private)"},
		{"rebinding loopback", allow, "api.example.com", ip("127.0.0.1"), 443, false, "private address 127.0.0.1 (loopback)"},
		{"rebinding metadata", allow, "api.example.com", ip("169.254.169.254"), 80, false, "private address 169.254.169.254 (metadata)"},
		{"rebinding mapped", allow, "api.example.com", ip("::ffff:10.0.0.5"), 443, false, "private address 10.0.0.5 (private)"},
		{"rebinding NAT64", allow, "api.example.com", ip("64:ff9b::a00:5"), 443, false, "private address 64:ff9b::a00:5 (private)"},
		{"rebinding 6to4", allow, "api.example.com", ip("2002:a9fe:a9fe::"), 443, false, "private address 2002:a9fe:a9fe:: (metadata)"},
		{"rebinding ULA allowed by CIDR", allow, "api.example.com", ip("fd12::1"), 443, true, "[fd00::]/8"},
		{"explicit IP allow", allow, "db.internal", ip("10.0.0.5"), 5432, true, "10.0.0.5:5432"},
		{"explicit IP allow mapped", allow, "db.internal", ip("::ffff:10.0.0.5"), 5432, true, "10.0.0.5:5432"},
		{"explicit IP allow other address", allow, "db.internal", ip("10.0.0.6"), 5432, false, "private address 10.0.0.6 (private)"},
		{"explicit IP allow, NAT64 spelling", allow, "db.internal", ip("64:ff9b::a00:5"), 5432, false, "private address 64:ff9b::a00:5 (private)"},
		{"name not allowed", allow, "db.internal", ip("10.0.0.5"), 5433, false, "not in allowlist"},
		{"name not allowed but IP is", allow, "other.internal", ip("10.0.0.5"), 5432, false, "not in allowlist"},
		{"no name, IP rule", allow, "", ip("10.0.0.5"), 5432, true, "10.0.0.5:5432"},
		{"no name, no rule", allow, "", ip("93.184.216.34"), 443, false, "not in allowlist"},
		{"IP literal host", allow, "10.0.0.5", ip("10.0.0.5"), 5432, true, "10.0.0.5:5432"},
		{"CIDR allows", cidr, "db.internal", ip("10.0.0.2"), 5432, true, "10.0.0.0/8"},
		{"CIDR deny wins", cidr, "db.internal", ip("10.0.0.1"), 5432, false, "10.0.0.1"},
		{"CIDR outside", cidr, "db.internal", ip("172.16.0.1"), 5432, false, "private address 172.16.0.1 (private)"},
		{"CIDR public", cidr, "db.internal", ip("93.184.216.34"), 5432, true, "db.internal"},
		{"open public", open, "example.com", ip("93.184.216.34"), 443, true, "mode open"},
		{"open no name", open, "", ip("93.184.216.34"), 443, true, "mode open"},
		{"open loopback", open, "localhost", ip("127.0.0.1"), 80, false, "private address 127.0.0.1 (loopback)"},
		{"open metadata v6", open, "metadata.internal", ip("fd00:ec2::254"), 80, false, "private address fd00:ec2::254 (metadata)"},
		{"open denied address", open, "dns.google", ip("8.8.8.8"), 53, false, "8.8.8.8"},
		{"open denied address via NAT64", open, "dns.google", ip("64:ff9b::808:808"), 53, false, "8.8.8.8"},
		{"open denied address via 6to4", open, "dns.google", ip("2002:808:808::1"), 53, false, "8.8.8.8"},
		{"open other address", open, "dns.google", ip("8.8.4.4"), 53, true, "mode open"},
		{"open denied name", open, "x.evil.com", ip("93.184.216.34"), 443, false, "*.evil.com"},
		{"open invalid host", open, "a..b", ip("93.184.216.34"), 443, false, `invalid host "a..b": empty label (two dots in a row, or a leading dot)`},
		{"invalid address", open, "example.com", netip.Addr{}, 443, false, "invalid address"},
		{"zoned address", open, "example.com", ip("fe80::1%eth0"), 443, false, "address fe80::1%eth0 has an IPv6 zone"},
		{"port", open, "example.com", ip("93.184.216.34"), 0, false, "invalid port 0"},
		{"mode none", mustCompile(t, "none", []string{"10.0.0.0/8"}, nil), "", ip("10.0.0.1"), 80, false, "mode none"},
	}
	for _, tt := range tests {
		if got := tt.p.Addr(tt.host, tt.ip, tt.port); got != (Decision{tt.allow, tt.rule}) {
			t.Errorf("%s: Addr(%q, %s, %d) = %+v; want %v, %q", tt.name, tt.host, tt.ip, tt.port, got, tt.allow, tt.rule)
		}
	}
}

// TestHostLoopback: host.airlock.internal opens only by an allow rule
// naming it with the port, in either mode, for its loopback addresses;
// each denial next to the allowed control.
func TestHostLoopback(t *testing.T) {
	if _, err := Compile("allowlist", []string{HostLoopback}, nil); err == nil || !errors.Is(err, errdefs.ErrInvalid) ||
		!strings.Contains(err.Error(), "name the port, as in host.airlock.internal:11434") {
		t.Errorf("a rule without a port: %v", err)
	}
	if _, err := Compile("allowlist", []string{"HOST.airlock.internal."}, nil); err == nil {
		t.Error("a rule without a port, spelled otherwise, compiled")
	}
	if _, err := Compile("allowlist", nil, []string{HostLoopback}); err != nil {
		t.Errorf("a deny rule without a port: %v", err) // denies every port: fine
	}
	exact := mustCompile(t, "allowlist", []string{"host.airlock.internal:11434"}, nil)
	openExact := mustCompile(t, "open", []string{"host.airlock.internal:11434"}, nil)
	wild := mustCompile(t, "allowlist", []string{"*.airlock.internal", "*.airlock.internal:11434"}, nil)
	open := mustCompile(t, "open", []string{"*.airlock.internal"}, nil)
	denied := mustCompile(t, "allowlist", []string{"host.airlock.internal:11434"}, []string{"*.airlock.internal:11434"})
	deniedAddr := mustCompile(t, "allowlist", []string{"host.airlock.internal:11434"}, []string{"127.0.0.1"})
	loop4, loop6 := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")
	for _, tc := range []struct {
		name          string
		p             *Policy
		host          string
		port          int
		ip            netip.Addr
		byName, allow bool // Host's and Addr's answers
	}{
		{"exact rule", exact, HostLoopback, 11434, loop4, true, true},
		{"exact rule, ::1", exact, HostLoopback, 11434, loop6, true, true},
		{"exact rule, spelled otherwise", exact, "Host.Airlock.Internal.", 11434, loop4, true, true},
		{"exact rule, open mode", openExact, HostLoopback, 11434, loop4, true, true},
		{"another port", exact, HostLoopback, 5432, loop4, false, false},
		{"another loopback address", exact, HostLoopback, 11434, netip.MustParseAddr("127.0.0.2"), true, false},
		{"another address", exact, HostLoopback, 11434, netip.MustParseAddr("10.0.0.5"), true, false},
		{"a wildcard", wild, HostLoopback, 11434, loop4, false, false},
		{"a wildcard's other names", wild, "x.airlock.internal", 11434, netip.MustParseAddr("93.184.216.34"), true, true},
		{"open mode", open, HostLoopback, 11434, loop4, false, false},
		{"open mode, another name", open, "x.example.org", 11434, netip.MustParseAddr("93.184.216.34"), true, true},
		{"a name deny rule", denied, HostLoopback, 11434, loop4, false, false},
		{"an address deny rule", deniedAddr, HostLoopback, 11434, loop4, true, false},
		{"an address deny rule, the other address", deniedAddr, HostLoopback, 11434, loop6, true, true},
	} {
		dh := tc.p.Host(tc.host, tc.port)
		da := tc.p.Addr(tc.host, tc.ip, tc.port)
		if dh.Allow != tc.byName || da.Allow != tc.allow {
			t.Errorf("%s: Host %+v, Addr(%v) %+v; want %v, %v", tc.name, dh, tc.ip, da, tc.byName, tc.allow)
		}
		if !tc.allow && da.Rule == "" {
			t.Errorf("%s: a denial without its reason", tc.name)
		}
	}
	// The denial says what would open it.
	if d := open.Host(HostLoopback, 11434); d.Allow || !strings.Contains(d.Rule, "only an allow rule naming it with the port") {
		t.Errorf("open mode: %+v", d)
	}
	// A bare loopback address keeps needing an IP rule (the control: the
	// name's rule does not open the address itself).
	if d := exact.Host("127.0.0.1", 11434); d.Allow {
		t.Errorf("the name's rule opened the address: %+v", d)
	}
	if d := mustCompile(t, "allowlist", []string{"127.0.0.1:11434"}, nil).Host("127.0.0.1", 11434); !d.Allow {
		t.Errorf("an IP rule: %+v", d)
	}
	if p, ok := mustCompile(t, "allowlist", []string{"host.airlock.internal:80"}, nil).Allow[0].HostLoopbackPort(); !ok || p != 80 {
		t.Errorf("HostLoopbackPort = %d, %v", p, ok)
	}
	if _, ok := wild.Allow[0].HostLoopbackPort(); ok {
		t.Error("a wildcard names the host's loopback")
	}
}
