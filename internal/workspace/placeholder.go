package workspace

import "strings"

// placeholderFiles are protected paths (policy.DefaultProtected) whose
// placeholder, while they do not exist (live workspaces), is a file with
// this content instead of an empty directory: git reads them whenever they
// are there, and fails on a directory, while these contents mean what their
// absence means (the common directory is the git directory itself; no
// per-worktree settings). They live here, not in internal/policy, so that
// the sandbox's init, which makes the placeholders, does not link the
// policy's YAML parser (whose package initialisers would run in every
// sandbox).
var placeholderFiles = map[string]string{
	".git/commondir":       ".\n",
	".git/config.worktree": "",
	".gitconfig":           "",
}

// PlaceholderFile says whether the placeholder of p, a workspace-relative
// path or the host path of one, is a file, and its content.
func PlaceholderFile(p string) (content string, ok bool) {
	for rel, content := range placeholderFiles {
		if p == rel || strings.HasSuffix(p, "/"+rel) {
			return content, true
		}
	}
	return "", false
}
