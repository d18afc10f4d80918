package policy

import (
	"path/filepath"
	"sort"
	"strings"
)

// DefaultProtected returns a copy of the default list of workspace paths
// that stay read-only, relative to the workspace.
func DefaultProtected() []string {
	out := make([]string, len(defaultProtected))
	for i, e := range defaultProtected {
		out[i] = e.path
	}
	return out
}

// isDefaultProtected reports whether the cleaned relative path is a default entry.
func isDefaultProtected(rel string) bool {
	for _, e := range defaultProtected {
		if e.path == rel {
			return true
		}
	}
	return false
}

// ProtectedPaths returns the workspace paths that stay read-only: the
// defaults, plus Filesystem.Protect.Add, minus Filesystem.Protect.Remove;
// cleaned, deduplicated and sorted, relative to the workspace. Entries that
// are absolute, empty, "." or contain ".." are left out (Validate rejects
// them), so the result never escapes the workspace.
func (p *Policy) ProtectedPaths() []string {
	set := map[string]bool{}
	for _, e := range defaultProtected {
		set[e.path] = true
	}
	for _, a := range p.Filesystem.Protect.Add {
		if rel, ok := cleanRel(a); ok {
			set[rel] = true
		}
	}
	for _, r := range p.Filesystem.Protect.Remove {
		if rel, ok := cleanRel(r); ok {
			delete(set, rel)
		}
	}
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// cleanRel cleans a workspace-relative path. It fails for paths that are
// empty, absolute, name the workspace itself, contain NUL or have a ".."
// element (before cleaning: "a/../b" is rejected too, to keep things
// obvious).
func cleanRel(s string) (string, bool) {
	if s == "" || filepath.IsAbs(s) || strings.ContainsRune(s, 0) {
		return "", false
	}
	for _, el := range strings.Split(s, "/") {
		if el == ".." {
			return "", false
		}
	}
	c := filepath.Clean(s)
	if c == "." {
		return "", false
	}
	return c, true
}
