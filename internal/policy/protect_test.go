package policy

import (
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
)

func TestDefaultProtected(t *testing.T) {
	d := DefaultProtected()
	for _, want := range []string{".bashrc", ".zshenv", ".config/fish", ".git/hooks", ".git/config", ".gitmodules", ".github/workflows", ".vscode", ".claude", ".mcp.json", ".envrc"} {
		if !slices.Contains(d, want) {
			t.Errorf("default protected list lacks %s", want)
		}
	}
	seen := map[string]bool{}
	for _, e := range defaultProtected {
		if rel, ok := cleanRel(e.path); !ok || rel != e.path {
			t.Errorf("default entry %q is not a clean relative path", e.path)
		}
		if seen[e.path] {
			t.Errorf("default entry %q is listed twice", e.path)
		}
		seen[e.path] = true
		if e.reason == "" {
			t.Errorf("default entry %q has no reason", e.path)
		}
	}
	d[0] = "changed"
	if DefaultProtected()[0] == "changed" {
		t.Error("DefaultProtected does not return a copy")
	}
}

func TestProtectedPaths(t *testing.T) {
	without := func(drop ...string) []string {
		var out []string
		for _, p := range DefaultProtected() {
			if !slices.Contains(drop, p) {
				out = append(out, p)
			}
		}
		return out
	}
	sorted := func(s ...[]string) []string {
		var out []string
		for _, x := range s {
			out = append(out, x...)
		}
		sort.Strings(out)
		return out
	}
	tests := []struct {
		name        string
		add, remove []string
		want        []string
	}{
		{"defaults", nil, nil, sorted(DefaultProtected())},
		{"add", []string{"secrets/", "Makefile"}, nil, sorted(DefaultProtected(), []string{"Makefile", "secrets"})},
		{"clean", []string{"./a//b/", "c/./d"}, nil, sorted(DefaultProtected(), []string{"a/b", "c/d"})},
		{"duplicates", []string{"x", "x/", "./x", ".vscode"}, nil, sorted(DefaultProtected(), []string{"x"})},
		{"remove", nil, []string{".vscode", ".idea/"}, sorted(without(".vscode", ".idea"))},
		{"add and remove", []string{"Makefile"}, []string{".envrc"}, sorted(without(".envrc"), []string{"Makefile"})},
		{"invalid entries dropped", []string{"../x", "/etc", "", ".", "a/../b"}, []string{"../.vscode"}, sorted(DefaultProtected())},
	}
	for _, tt := range tests {
		p := &Policy{Filesystem: Filesystem{Protect: Protect{Add: tt.add, Remove: tt.remove}}}
		got := p.ProtectedPaths()
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: ProtectedPaths() = %q\nwant %q", tt.name, got, tt.want)
		}
		for _, g := range got {
			if strings.HasPrefix(g, "/") || slices.Contains(strings.Split(g, "/"), "..") {
				t.Errorf("%s: ProtectedPaths() contains %q", tt.name, g)
			}
		}
	}
}

func TestValidateProtect(t *testing.T) {
	tests := []struct {
		add, remove []string
		want        string
	}{
		{[]string{".."}, nil, `filesystem.protect.add[0]: "..": ".." is not allowed`},
		{[]string{"ok", "a/../b"}, nil, `filesystem.protect.add[1]: "a/../b": ".." is not allowed`},
		{nil, []string{"../.vscode"}, `filesystem.protect.remove[0]: "../.vscode": ".." is not allowed`},
		{nil, []string{"Makefile"}, `filesystem.protect.remove[0]: "Makefile" is not a default protected path`},
		{[]string{"/abs"}, nil, `filesystem.protect.add[0]: "/abs": protected paths are relative`},
		{[]string{"."}, nil, `filesystem.protect.add[0]: "." names the whole workspace`},
	}
	for _, tt := range tests {
		p := &Policy{Filesystem: Filesystem{Protect: Protect{Add: tt.add, Remove: tt.remove}}}
		err := p.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("add %q remove %q: Validate() = %v, want %q", tt.add, tt.remove, err, tt.want)
		}
	}
}
