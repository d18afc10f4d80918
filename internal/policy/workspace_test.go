package policy

import (
	"strings"
	"testing"
)

// TestWorkspaceMode: workspace takes a path or {path, mode}; each mode
// is accepted and survives Marshal, bad values name the file, the line
// and the key.
func TestWorkspaceMode(t *testing.T) {
	for _, c := range []struct{ doc, path, mode string }{
		{"workspace: /w\n", "/w", ""},
		{"workspace: {mode: review}\n", "", WorkspaceReview},
		{"workspace:\n  path: /w\n  mode: live\n", "/w", WorkspaceLive},
		{"workspace:\n  mode: apply\n", "", WorkspaceApply},
		{"workspace: {path: /w}\n", "/w", ""},
	} {
		p, err := Parse("w.yaml", []byte(c.doc))
		if err != nil {
			t.Errorf("%q: %v", c.doc, err)
			continue
		}
		if p.Workspace != c.path || p.WorkspaceMode != c.mode {
			t.Errorf("%q: path %q mode %q, want %q %q", c.doc, p.Workspace, p.WorkspaceMode, c.path, c.mode)
		}
		b, err := p.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		q, err := Parse("m.yaml", b)
		if err != nil || q.Workspace != c.path || q.WorkspaceMode != c.mode {
			t.Errorf("%q: Marshal gave %q, parsed back %+v %v", c.doc, b, q, err)
		}
	}
	for _, c := range []struct{ doc, want string }{
		{"image: /i\nworkspace:\n  mode: sideways\n", `w.yaml:3: workspace.mode: unknown workspace mode "sideways": want apply`},
		{"workspace: {mode: Review}\n", `w.yaml:1: workspace.mode: unknown workspace mode "Review"`},
		{"workspace:\n  mode: ''\n", "w.yaml:2: workspace.mode: empty workspace mode: want apply, review or live"},
		{"workspace:\n  mode: [review]\n", "w.yaml:2: workspace.mode: expected a single value"},
		{"workspace:\n  mode: review\n  mood: live\n", "w.yaml:3: workspace.mood: unknown key (known: path, mode)"},
		{"workspace:\n  path: .\n", `w.yaml:2: workspace.path: relative path "."`},
		{"workspace:\n  path: /\n", "w.yaml:2: workspace.path: refusing to use / as the workspace"},
		{"workspace:\n  mode: review\n  mode: live\n", "w.yaml:3: workspace.mode: duplicate key"},
	} {
		_, err := Parse("w.yaml", []byte(c.doc))
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%q: %v\nwant %q", c.doc, err, c.want)
		}
	}
	wantErr(t, (&Policy{WorkspaceMode: "overlay"}).Validate(), `workspace.mode: unknown workspace mode "overlay"`)
	if err := (&Policy{WorkspaceMode: WorkspaceReview}).Validate(); err != nil {
		t.Error(err)
	}
}
